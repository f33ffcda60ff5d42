/* The checks of tests/run_dataset_tests.sh, which prepares WORK (the same preference rows as
 * JSONL, parquet, CSV, Arrow, parquet shards in a directory, a saved DatasetDict, a parquet file
 * with a wrong column; written with pyarrow / datasets in a test venv), serves HUB_ROOT/org/tiny
 * (the rows as a Hub dataset) on HF_ENDPOINT, and activates the venv:
 *
 *   dataset_sources_check WORK online HUB_ROOT    every source gives the JSONL file's tokenised
 *                                                 pairs, id for id; bad inputs give one clear
 *                                                 message each; the cache key follows the Hub
 *                                                 dataset's commit
 *   dataset_sources_check WORK offline HUB_ROOT   (HF_DATASETS_OFFLINE=1, server stopped) the Hub
 *                                                 dataset loads from `datasets`' cache, with the
 *                                                 same pairs and the same cache key */
#include "common/error.h"
#include "common/fileio.h"
#include "config/train_config.h"
#include "data/dataset_cache.h"
#include "data/pref_dataset.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *work;
static Tokenizer tok;

/* WORK/<name>.yaml: DPO on the tiny model with one dataset entry (`entry`: its YAML lines after
 * "  - "). Returns 0 with *cfg loaded, or -1 with the error. */
static int load_config(TrainConfig *cfg, const char *name, const char *entry) {
    char path[4096], text[8192];
    snprintf(path, sizeof path, "%s/%s.yaml", work, name);
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nlearning_rate: 1e-3\nsequence_len: 64\n"
             "dataset_prepared_path: %s/prepared\ndatasets:\n  - %s\n    type: chatml.intel\n",
             harness_source_path("models/tiny-arith"), work, entry);
    if (harness_write_file(path, text, strlen(text)) != 0) return err_set("cannot write %s", path);
    return train_config_load(cfg, path, NULL, 0);
}

/* The pairs of an entry, or -1 with the error. */
static int load_pairs(PrefDataset *ds, const char *name, const char *entry) {
    TrainConfig cfg;
    memset(ds, 0, sizeof *ds);
    if (load_config(&cfg, name, entry) != 0) return -1;
    FILE *log = fopen("/dev/null", "w");
    int rc = pref_dataset_load(ds, &cfg, &tok, log);
    fclose(log);
    train_config_free(&cfg);
    return rc;
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* Loads the entry and compares every pair with the JSONL reference. */
static void check_same_pairs(const PrefDataset *want, const char *name, const char *entry) {
    PrefDataset got;
    int rc = load_pairs(&got, name, entry);
    CHECK(rc == 0, "%s: %s", name, err_msg());
    if (rc == 0) {
        CHECK(got.n_pairs == want->n_pairs, "%s: %zu pairs, JSONL %zu", name, got.n_pairs,
              want->n_pairs);
        size_t differ = 0;
        for (size_t i = 0; i < got.n_pairs && i < want->n_pairs; i++) {
            const PrefPair *g = &got.pairs[i], *w = &want->pairs[i];
            if (!same_ids(g->prompt, g->n_prompt, w->prompt, w->n_prompt) ||
                !same_ids(g->chosen, g->n_chosen, w->chosen, w->n_chosen) ||
                !same_ids(g->rejected, g->n_rejected, w->rejected, w->n_rejected))
                differ++;
        }
        CHECK(differ == 0, "%s: %zu pairs differ from the JSONL file's", name, differ);
    }
    pref_dataset_free(&got);
}

/* Loading the entry fails with a message holding each of the fragments (NULL-ended). */
static void check_error(const char *name, const char *entry, ...) {
    PrefDataset ds;
    int rc = load_pairs(&ds, name, entry);
    pref_dataset_free(&ds);
    CHECK(rc != 0, "%s: loaded, expected an error", name);
    if (rc == 0) return;
    va_list ap;
    va_start(ap, entry);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
        CHECK(strstr(err_msg(), want) != NULL, "%s: \"%s\" not in: %s", name, want, err_msg());
    va_end(ap);
}

/* The prepared-dataset cache key of the Hub entry. */
static uint64_t hub_key(void) {
    TrainConfig cfg;
    uint64_t key = 0;
    int rc = load_config(&cfg, "hub_key", "path: org/tiny");
    if (rc == 0) rc = dataset_cache_key(&cfg, 2, &key);
    CHECK(rc == 0, "hub cache key: %s", err_msg());
    if (rc == 0) train_config_free(&cfg);
    return key;
}

static void write_key(uint64_t key) {
    char path[4096], text[32];
    snprintf(path, sizeof path, "%s/hub_key.txt", work);
    snprintf(text, sizeof text, "%016llx", (unsigned long long)key);
    harness_write_file(path, text, strlen(text));
}

static uint64_t read_key(void) {
    char path[4096], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/hub_key.txt", work);
    uint64_t key = 0;
    if (read_file(path, &text, &len) == 0) key = strtoull(text, NULL, 16);
    free(text);
    return key;
}

/* Local sources, bad inputs, and the Hub dataset through HF_ENDPOINT. */
static void check_online(const PrefDataset *want, const char *hub_root) {
    check_same_pairs(want, "parquet", "path: rows.parquet");
    check_same_pairs(want, "csv", "path: rows.csv");
    check_same_pairs(want, "arrow", "path: rows.arrow");
    check_same_pairs(want, "ds_type", "path: rows.data\n    ds_type: parquet");
    check_same_pairs(want, "shards_dir", "path: shards");
    check_same_pairs(want, "data_files_glob", "path: shards\n    data_files: ['train-*.parquet']");
    check_same_pairs(want, "saved_to_disk", "path: saved");
    check_same_pairs(want, "json_slice", "path: rows.jsonl\n    split: 'train[:100%]'");
    check_same_pairs(want, "hub", "path: org/tiny");

    check_error("split_jsonl", "path: rows.jsonl\n    split: test", "split_jsonl.yaml:7",
                "split: \"test\"", "only the split \"train\"", NULL);
    check_error("split_parquet", "path: rows.parquet\n    split: test", "split_parquet.yaml:7",
                "only the split \"train\"", NULL);
    check_error("split_shards", "path: shards\n    split: test", "split_shards.yaml:7",
                "Unknown split \"test\"", NULL);
    check_error("split_hub", "path: org/tiny\n    split: test", "split_hub.yaml:7", "org/tiny",
                "Unknown split \"test\"", NULL);
    check_error("wrong_column", "path: wrong.parquet", "wrong.parquet: row 0",
                "missing field \"question\"", NULL);
    check_error("missing_hub", "path: org/missing", "missing_hub.yaml:7", "org/missing",
                "Hugging Face Hub", NULL);
    check_error("glob_nothing", "path: shards\n    data_files: ['*.nothing']",
                "data_files[0]: \"*.nothing\" matches no file", NULL);
    check_error("typo_local", "path: ./rows.jsonl.typo", "is not a local file or directory", NULL);

    /* invariant 1 of dataset_cache.h: the key follows the Hub dataset's commit */
    uint64_t k1 = hub_key();
    char extra[4096];
    snprintf(extra, sizeof extra, "%s/org/tiny/extra.txt", hub_root);
    harness_write_file(extra, "x", 1); /* a new commit on main */
    uint64_t k2 = hub_key();
    unlink(extra);
    uint64_t k3 = hub_key();
    CHECK(k1 != k2 && k1 == k3, "the Hub key follows main's commit: %llx %llx %llx",
          (unsigned long long)k1, (unsigned long long)k2, (unsigned long long)k3);
    write_key(k1);
}

/* The Hub dataset from the cache, offline: same pairs, same key. */
static void check_offline(const PrefDataset *want) {
    check_same_pairs(want, "hub_offline", "path: org/tiny");
    CHECK(hub_key() == read_key(), "offline, the key is the cached commit's, as online");
    check_error("missing_offline", "path: org/missing", "org/missing", NULL);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: dataset_sources_check WORK online|offline HUB_ROOT\n");
        return 2;
    }
    work = argv[1];
    if (chdir(work) != 0) return 2; /* relative dataset paths start here, as for a user */
    CHECK(tokenizer_load(&tok, harness_source_path("models/tiny-arith")) == 0, "%s", err_msg());
    PrefDataset want;
    CHECK(load_pairs(&want, "jsonl", "path: rows.jsonl") == 0, "reference: %s", err_msg());
    CHECK(want.n_pairs >= 8, "the reference has %zu pairs", want.n_pairs);
    if (strcmp(argv[2], "online") == 0)
        check_online(&want, argv[3]);
    else
        check_offline(&want);
    pref_dataset_free(&want);
    tokenizer_free(&tok);
    return harness_finish(strcmp(argv[2], "online") == 0 ? "dataset_sources_check online"
                                                         : "dataset_sources_check offline");
}
