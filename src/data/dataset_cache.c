#include "data/dataset_cache.h"

#include "common/error.h"
#include "common/fileio.h"
#include "data/dataset_library.h"
#include "data/dataset_source.h"

#include <dirent.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAGIC "RLHFSFT2"

static void fnv1a(uint64_t *h, const void *data, size_t len) {
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        *h ^= p[i];
        *h *= 0x100000001B3ull;
    }
}

static void hash_string(uint64_t *h, const char *s) {
    fnv1a(h, s ? s : "", (s ? strlen(s) : 0) + 1); /* the NUL separates fields */
}

static int hash_file(uint64_t *h, const char *path, bool optional) {
    if (optional && !file_exists(path)) {
        hash_string(h, "(absent)");
        return 0;
    }
    char *data;
    size_t len;
    if (read_file(path, &data, &len) != 0) return -1;
    fnv1a(h, &len, sizeof len);
    fnv1a(h, data, len);
    free(data);
    return 0;
}

/* A directory's regular files, names and bytes, in sorted order, all the way down (what
 * load_dataset(dir) or load_from_disk may read). */
static int hash_tree(uint64_t *h, const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) return err_set("%s: cannot list the directory", dir);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        const char *name = names[i]->d_name;
        if (rc == 0 && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
            path_join(path, sizeof path, dir, name) == 0) {
            hash_string(h, name);
            rc = dir_exists(path) ? hash_tree(h, path) : hash_file(h, path, false);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* What an entry's rows are read from (data/dataset_source.h): local files' names and bytes, a
 * directory's whole tree, a Hub dataset's resolved commit (invariant 1: the revision). */
static int hash_source(uint64_t *h, const DatasetConfig *dc) {
    DatasetSource src;
    if (dataset_source_open(&src, dc) != 0) return -1;
    int rc = 0;
    hash_string(h, src.format);
    for (int f = 0; rc == 0 && f < src.n_files; f++) {
        hash_string(h, src.files[f]);
        rc = hash_file(h, src.files[f], false);
    }
    if (rc == 0 && src.kind == DATASET_LIBRARY_DIR) rc = hash_tree(h, dc->path);
    if (rc == 0 && src.kind == DATASET_HUB) {
        char commit[256];
        rc = dataset_library_revision(dc, commit, sizeof commit);
        if (rc == 0) hash_string(h, commit);
    }
    dataset_source_free(&src);
    return rc;
}

int dataset_cache_key(const TrainConfig *cfg, int32_t eos_id, uint64_t *key) {
    uint64_t h = 0xCBF29CE484222325ull;
    hash_string(&h, CACHE_MAGIC);
    fnv1a(&h, &cfg->sequence_len, sizeof cfg->sequence_len);
    fnv1a(&h, &eos_id, sizeof eos_id);
    fnv1a(&h, &cfg->tokenizer_legacy, sizeof cfg->tokenizer_legacy);
    hash_string(&h, cfg->tokenizer_type);
    char path[4096];
    /* config.json too: its model_type can change the class AutoTokenizer builds */
    const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    for (int i = 0; i < 3; i++) {
        if (path_join(path, sizeof path, cfg->tokenizer_config, tok_files[i]) != 0 ||
            hash_file(&h, path, i > 0) != 0)
            return -1;
    }
    /* the chat template choice shapes chat_template datasets */
    hash_string(&h, cfg->chat_template);
    if (cfg->chat_template_jinja && file_exists(cfg->chat_template_jinja)) {
        if (hash_file(&h, cfg->chat_template_jinja, false) != 0) return -1;
    } else {
        hash_string(&h, cfg->chat_template_jinja);
    }
    for (int d = 0; d < cfg->n_datasets; d++) {
        const DatasetConfig *dc = &cfg->datasets[d];
        char *options = dc->options ? json_dumps(dc->options, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
        hash_string(&h, options); /* every option of the entry: field names, roles, ... */
        free(options);
        hash_string(&h, dc->type);
        hash_string(&h, dc->split);
        if (hash_source(&h, dc) != 0) return -1;
    }
    *key = h;
    return 0;
}

const char *dataset_prepared_root(const TrainConfig *cfg) {
    return cfg->dataset_prepared_path ? cfg->dataset_prepared_path : "last_run_prepared";
}

void dataset_cache_dir(const TrainConfig *cfg, uint64_t key, char *out, size_t cap) {
    snprintf(out, cap, "%s/%016llx", dataset_prepared_root(cfg), (unsigned long long)key);
}

/* The cache keeps the tokenised order (invariant 3); the merged order is made from it. */
static int merge_or_free(SftDataset *ds, const TrainConfig *cfg) {
    if (sft_dataset_merge(ds, cfg) == 0) return 0;
    sft_dataset_free(ds);
    return -1;
}

int sft_dataset_prepare(SftDataset *ds, const TrainConfig *cfg, const Tokenizer *tok,
                        int32_t eos_id, int vocab_size, bool rebuild, FILE *log, char *cache_dir,
                        size_t cap) {
    uint64_t key;
    if (dataset_cache_key(cfg, eos_id, &key) != 0) return -1;
    dataset_cache_dir(cfg, key, cache_dir, cap);
    if (!rebuild) {
        int found = dataset_cache_read(cache_dir, vocab_size, ds);
        if (found == 1) {
            fprintf(log, "using the prepared dataset in %s (%zu examples)\n", cache_dir, ds->n);
            return merge_or_free(ds, cfg);
        }
        if (found < 0) fprintf(log, "warning: %s; preparing the dataset again\n", err_msg());
    }
    if (sft_dataset_load(ds, cfg, tok, eos_id) != 0) return -1;
    if (dataset_cache_write(cache_dir, ds) != 0)
        fprintf(log, "warning: the prepared dataset could not be cached: %s\n", err_msg());
    else
        fprintf(log, "prepared %zu examples into %s\n", ds->n, cache_dir);
    return merge_or_free(ds, cfg); /* training can go on without a cache */
}

int dataset_cache_write(const char *dir, const SftDataset *ds) {
    char path[4096];
    /* the key directory and every missing parent (the quickstart's outputs/prepared sits in an
     * output directory that training creates only later) */
    if (make_dirs(dir) != 0) return -1;
    if (path_join(path, sizeof path, dir, "examples.bin") != 0) return -1;
    AtomicFile af;
    if (atomic_file_open(&af, path) != 0) return -1;
    uint64_t head[4] = {ds->n, ds->dropped_too_long, ds->rows, (uint64_t)ds->n_parts};
    int ok = fwrite(CACHE_MAGIC, 1, 8, af.fp) == 8 && fwrite(head, 8, 4, af.fp) == 4;
    for (int p = 0; ok && p < ds->n_parts; p++) {
        uint64_t rows = ds->part_rows[p];
        ok = fwrite(&rows, 8, 1, af.fp) == 1;
    }
    for (size_t i = 0; ok && i < ds->n; i++) {
        uint64_t row = ds->items[i].row;
        uint32_t len = (uint32_t)ds->items[i].len;
        ok = fwrite(&row, 8, 1, af.fp) == 1 && fwrite(&len, 4, 1, af.fp) == 1 &&
             fwrite(ds->items[i].ids, 4, len, af.fp) == len &&
             fwrite(ds->items[i].labels, 1, len, af.fp) == len;
    }
    if (!ok) {
        atomic_file_abort(&af);
        return err_set("%s: write failed", path);
    }
    return atomic_file_commit(&af);
}

int dataset_cache_read(const char *dir, int vocab_size, SftDataset *ds) {
    memset(ds, 0, sizeof *ds);
    char path[4096];
    if (path_join(path, sizeof path, dir, "examples.bin") != 0) return -1;
    if (!file_exists(path)) return 0;
    char *data;
    size_t len;
    if (read_file(path, &data, &len) != 0) return -1;
    size_t pos = 40;
    uint64_t head[4] = {0}; /* examples, dropped, tokenised rows, datasets */
    int rc = 1;
    if (len < pos || memcmp(data, CACHE_MAGIC, 8) != 0) {
        rc = err_set("%s: not a dataset cache (bad header)", path);
    } else {
        memcpy(head, data + 8, sizeof head);
        /* rows not kept have no bytes here: bounded so that a damaged count cannot ask
         * sft_dataset_merge for an absurd allocation */
        if (head[0] > len || head[0] > head[2] || head[2] - head[0] > UINT32_MAX ||
            head[3] > (len - pos) / 8)
            rc = err_set("%s: corrupt (counts %llu, %llu, %llu)", path, (unsigned long long)head[0],
                         (unsigned long long)head[2], (unsigned long long)head[3]);
    }
    uint64_t n = head[0], parts_sum = 0;
    if (rc == 1) {
        ds->n_parts = (int)head[3];
        ds->part_rows = xcalloc((size_t)(head[3] ? head[3] : 1), sizeof *ds->part_rows);
        for (uint64_t p = 0; p < head[3]; p++, pos += 8) {
            uint64_t rows;
            memcpy(&rows, data + pos, 8);
            ds->part_rows[p] = (size_t)rows;
            parts_sum += rows;
        }
        ds->rows = (size_t)head[2];
        if (parts_sum != head[2]) rc = err_set("%s: corrupt (rows per dataset)", path);
    }
    uint64_t next_row = 0; /* rows are written in tokenised order: strictly increasing */
    if (rc == 1) ds->items = xcalloc((size_t)(n ? n : 1), sizeof *ds->items);
    for (uint64_t i = 0; rc == 1 && i < n; i++) {
        uint32_t l;
        uint64_t row;
        if (pos + 12 > len ||
            (memcpy(&row, data + pos, 8), memcpy(&l, data + pos + 8, 4), pos += 12,
             l > len - pos) ||
            (size_t)l * 5 > len - pos) {
            rc = err_set("%s: truncated at example %llu", path, (unsigned long long)i);
            break;
        }
        if (row < next_row || row >= head[2]) {
            rc = err_set("%s: corrupt (example %llu's row %llu)", path, (unsigned long long)i,
                         (unsigned long long)row);
            break;
        }
        next_row = row + 1;
        SftExample *e = &ds->items[ds->n++];
        e->row = (size_t)row;
        e->len = (int)l;
        e->ids = xmalloc((size_t)(l ? l : 1) * sizeof *e->ids);
        e->labels = xmalloc(l ? l : 1);
        memcpy(e->ids, data + pos, (size_t)l * 4);
        memcpy(e->labels, data + pos + (size_t)l * 4, l);
        pos += (size_t)l * 5;
        for (uint32_t t = 0; t < l; t++)
            if (e->ids[t] < 0 || e->ids[t] >= vocab_size) {
                rc = err_set("%s: token id %d outside the vocabulary", path, e->ids[t]);
                break;
            }
    }
    if (rc == 1 && pos != len) rc = err_set("%s: %zu unexpected trailing bytes", path, len - pos);
    free(data);
    if (rc != 1) {
        sft_dataset_free(ds);
        return -1;
    }
    ds->dropped_too_long = (size_t)head[1];
    return 1;
}
