#include "data/dataset_source.h"

#include "common/error.h"
#include "common/fileio.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "config.yaml:3: datasets[0]" for messages (a config made in code may have none). */
static const char *entry_name(const DatasetConfig *dc) {
    return dc->where ? dc->where : "dataset";
}

/* The builders of `datasets` that Axolotl's ds_type names. */
static const char *const formats[] = {"json", "parquet", "csv", "arrow", "text"};

static const char *known_format(const char *name) {
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (strcmp(name, formats[i]) == 0) return formats[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Axolotl's extension table. By the file's suffix rather than Axolotl's substring test, which
 * takes /exports/csv/train.jsonl for CSV; NULL where the name says nothing (JSON by default). */
static const char *format_of_name(const char *name) {
    static const struct {
        const char *suffix, *format;
    } table[] = {{".parquet", "parquet"}, {".arrow", "arrow"}, {".csv", "csv"},
                 {".txt", "text"},        {".jsonl", "json"},  {".json", "json"}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (ends_with(name, table[i].suffix)) return table[i].format;
    return NULL;
}

/* A path the user meant as local: a Hub id is "name" or "org/name", never these. */
static bool looks_local(const char *path) {
    return path[0] == '/' || path[0] == '.' || path[0] == '~' || format_of_name(path) != NULL ||
           strchr(path, '/') != strrchr(path, '/');
}

static void add_file(DatasetSource *src, const char *path) {
    src->files = xrealloc(src->files, (size_t)(src->n_files + 1) * sizeof *src->files);
    src->files[src->n_files++] = xstrdup(path);
}

/* Adds the files matching pattern (a glob, sorted as glob(3) sorts) under base; returns how many
 * (0: none; -1: error set). Directories that match are not files and are skipped. */
static int add_matches(DatasetSource *src, const char *base, const char *pattern) {
    char full[4096];
    if (pattern[0] == '/' || !base) {
        if (snprintf(full, sizeof full, "%s", pattern) >= (int)sizeof full)
            return err_set("data_files: path too long: %s", pattern);
    } else if (path_join(full, sizeof full, base, pattern) != 0) {
        return -1;
    }
    glob_t g;
    int rc = glob(full, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) return 0;
    if (rc != 0) return err_set("data_files: cannot expand \"%s\"", full);
    int added = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (!file_exists(g.gl_pathv[i]) || dir_exists(g.gl_pathv[i])) continue;
        add_file(src, g.gl_pathv[i]);
        added++;
    }
    globfree(&g);
    return added;
}

static int resolve_data_files(DatasetSource *src, const DatasetConfig *dc) {
    for (int f = 0; f < dc->n_data_files; f++) {
        const char *pattern = dc->data_files[f];
        int n = add_matches(src, dc->path, pattern);
        if (n == 0 && pattern[0] != '/') n = add_matches(src, NULL, pattern);
        if (n < 0) return err_prefix("%s.data_files[%d]", entry_name(dc), f);
        if (n == 0)
            return err_set("%s.data_files[%d]: \"%s\" matches no file (looked in %s and in the "
                           "working directory)",
                           entry_name(dc), f, pattern, dc->path);
    }
    return 0;
}

/* ds_type, else the suffix of the path (a file) or of the data files, else JSON. */
static int choose_format(DatasetSource *src, const DatasetConfig *dc, bool is_file) {
    if (dc->ds_type) {
        src->format = known_format(dc->ds_type);
        if (!src->format)
            return err_set("%s.ds_type: \"%s\" is not a dataset type (expected json, parquet, "
                           "csv, arrow or text)",
                           entry_name(dc), dc->ds_type);
        return 0;
    }
    const char *by_name = is_file            ? format_of_name(dc->path)
                          : src->n_files > 0 ? format_of_name(src->files[0])
                                             : NULL;
    src->format = by_name ? by_name : "json";
    return 0;
}

static int open_source(DatasetSource *src, const DatasetConfig *dc);

int dataset_source_open(DatasetSource *src, const DatasetConfig *dc) {
    memset(src, 0, sizeof *src);
    if (open_source(src, dc) == 0) return 0;
    dataset_source_free(src);
    return -1;
}

static int open_source(DatasetSource *src, const DatasetConfig *dc) {
    const char *split = dc->split ? dc->split : "train";
    bool is_dir = dir_exists(dc->path), is_file = !is_dir && file_exists(dc->path);
    if (!is_dir && !is_file) {
        if (looks_local(dc->path))
            return err_set("%s.path: \"%s\" is not a local file or directory (relative paths "
                           "start from the working directory)",
                           entry_name(dc), dc->path);
        src->kind = DATASET_HUB;
        src->format = dc->ds_type ? known_format(dc->ds_type) : NULL;
        if (dc->ds_type && !src->format) return choose_format(src, dc, false);
        return 0;
    }
    if (is_dir && dc->n_data_files == 0) {
        src->kind = DATASET_LIBRARY_DIR;
        return choose_format(src, dc, false);
    }
    if (is_file && dc->n_data_files > 0)
        return err_set("%s.data_files: given with a file as path (\"%s\"); data_files name files "
                       "inside a directory or a Hub dataset",
                       entry_name(dc), dc->path);
    if (is_file)
        add_file(src, dc->path);
    else if (resolve_data_files(src, dc) != 0)
        return -1;
    if (choose_format(src, dc, is_file) != 0) return -1;
    /* A file is one split, "train" (what load_dataset(format, data_files=...) calls it); a slice
     * of it (train[:100], train[10%:]) is the library's to take. */
    bool train = strcmp(split, "train") == 0;
    if (!train && strncmp(split, "train[", 6) != 0)
        return err_set("%s.split: \"%s\": local files (path \"%s\") hold only the split \"train\"",
                       entry_name(dc), split, dc->path);
    src->kind =
        strcmp(src->format, "json") == 0 && train ? DATASET_JSON_FILES : DATASET_LIBRARY_FILES;
    return 0;
}

void dataset_source_free(DatasetSource *src) {
    for (int i = 0; i < src->n_files; i++)
        free(src->files[i]);
    free(src->files);
    memset(src, 0, sizeof *src);
}

void dataset_source_label(const DatasetSource *src, const DatasetConfig *dc, char *out,
                          size_t cap) {
    const char *split = dc->split ? dc->split : "train";
    switch (src->kind) {
    case DATASET_JSON_FILES:
    case DATASET_LIBRARY_FILES:
        if (src->n_files > 1)
            snprintf(out, cap, "%s (+%d more)", src->files[0], src->n_files - 1);
        else
            snprintf(out, cap, "%s", src->n_files ? src->files[0] : dc->path);
        return;
    case DATASET_LIBRARY_DIR:
        snprintf(out, cap, "%s (split %s)", dc->path, split);
        return;
    case DATASET_HUB:
        snprintf(out, cap, "%s (split %s)", dc->path, split);
        return;
    }
}
