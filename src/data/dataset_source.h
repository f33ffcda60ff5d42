/* Where a dataset entry's rows come from, decided as Axolotl's load_dataset_with_config decides
 * (axolotl/utils/data/shared.py), before any row is read:
 *
 *   path is a file                 its format: `ds_type`, else its extension (.parquet, .arrow,
 *                                  .csv, .txt; anything else is JSON/JSONL); split "train" only
 *   path is a directory
 *     with data_files              the files (globs) inside it, else from the working directory
 *                                  (where Axolotl's load_dataset(ds_type, data_files) looks);
 *                                  format: ds_type, else the files' extension
 *     without                      `datasets`: load_from_disk, else load_dataset(dir), which
 *                                  reads a directory of shards and names splits by file name
 *   path is not on disk            a Hugging Face Hub dataset id: load_dataset(path, name,
 *                                  split, data_files, revision), with `datasets`' cache and
 *                                  offline mode (HF_DATASETS_OFFLINE, HF_HUB_OFFLINE, HF_HOME)
 *
 * JSON/JSONL files are read here, in C, so a JSON config needs no Python. Everything else (and a
 * JSON split slice such as train[:100]) goes through the `datasets` library in the embedded
 * interpreter (data/dataset_library.h): parquet and Arrow are not formats to parse by hand, and
 * CSV's and a directory's semantics (type inference, split names) are that library's. */
#ifndef RLHF_DATA_DATASET_SOURCE_H
#define RLHF_DATA_DATASET_SOURCE_H

#include "config/train_config.h"

typedef enum {
    DATASET_JSON_FILES,    /* JSON/JSONL files, read in C (data/dataset_rows.c) */
    DATASET_LIBRARY_FILES, /* local files through `datasets`: load_dataset(format, data_files) */
    DATASET_LIBRARY_DIR,   /* a directory through `datasets`: load_from_disk / load_dataset */
    DATASET_HUB,           /* a Hub dataset id through `datasets` */
} DatasetSourceKind;

typedef struct {
    DatasetSourceKind kind;
    const char *format; /* the builder: json, parquet, csv, arrow or text (static string) */
    char **files;       /* *_FILES: the files, globs expanded, in order */
    int n_files;
} DatasetSource;

/* Decides the entry's source and resolves its files. Returns 0, or -1 with an error naming the
 * entry ("config.yaml:3: datasets[0].data_files[1]: ... matches no file"): an unknown ds_type, a
 * split other than "train" for local files, data_files with a file path, a local-looking path
 * (./x, /x, x.jsonl) that does not exist. */
int dataset_source_open(DatasetSource *src, const DatasetConfig *dc);

void dataset_source_free(DatasetSource *src);

/* "file.parquet", "file.parquet (+2 more)", "org/name (split train)", "dir/": what rows'
 * messages are prefixed with. Written to out (cap bytes). */
void dataset_source_label(const DatasetSource *src, const DatasetConfig *dc, char *out, size_t cap);

#endif
