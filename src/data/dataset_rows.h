/* The rows of a local dataset (`ds_type: json`): a JSONL file (one object per line, blank lines
 * skipped), a JSON file holding an array of objects, or several such files (`data_files`, inside
 * `path` when it is a directory). Shared by every dataset type. */
#ifndef RLHF_DATA_DATASET_ROWS_H
#define RLHF_DATA_DATASET_ROWS_H

#include "config/train_config.h"

#include <jansson.h>

/* Called with each row (a JSON object) in file order; returns 0, or -1 with an error that the
 * reader prefixes with "FILE:LINE" (JSONL) or "FILE: row N" (JSON array). */
typedef int (*DatasetRowFn)(void *ctx, const json_t *row);

/* Whether the entry's path is a local file or directory: 0, or -1 with an error naming the
 * config line (Axolotl would try the Hub for a name that is not on disk; we say we do not). */
int dataset_path_check(const DatasetConfig *dc);

/* Reads every row of a dataset entry. A row that is not a JSON object is an error. Returns 0, or
 * -1 with an error naming the file and the line. */
int dataset_rows_foreach(const DatasetConfig *dc, DatasetRowFn fn, void *ctx);

#endif
