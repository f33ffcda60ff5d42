/* The rows of a dataset entry, whatever its source (data/dataset_source.h): JSON/JSONL files read
 * here (one object per line, blank lines skipped, or a JSON array of objects), everything else
 * (parquet, CSV, Arrow, text, directories, Hub datasets) through `datasets`
 * (data/dataset_library.h). Shared by every dataset type. */
#ifndef RLHF_DATA_DATASET_ROWS_H
#define RLHF_DATA_DATASET_ROWS_H

#include "config/train_config.h"

#include <jansson.h>

/* Called with each row (a JSON object) in file order; returns 0, or -1 with an error that the
 * reader prefixes with "FILE:LINE" (JSONL) or "FILE: row N" (JSON array). */
typedef int (*DatasetRowFn)(void *ctx, const json_t *row);

/* Reads every row of a dataset entry, in file order (the library's order for its sources). A row
 * that is not a JSON object is an error. Returns 0, or -1 with an error naming the entry, the
 * file and the line (JSON) or row (the library). */
int dataset_rows_foreach(const DatasetConfig *dc, DatasetRowFn fn, void *ctx);

#endif
