/* Dataset rows through the Hugging Face `datasets` library in the embedded interpreter: local
 * parquet, CSV, Arrow and text files, directories (saved datasets, directories of shards) and
 * Hub dataset ids (data/dataset_source.h says which entry goes where). Each row comes back as a
 * JSON object (python/py_json.h), exactly what the JSON reader gives the dataset types.
 * In a build without Python (dataset_library_absent.c) both functions refuse with a message
 * naming the entry and ending in PY_EMBED_ABSENT. */
#ifndef RLHF_DATA_DATASET_LIBRARY_H
#define RLHF_DATA_DATASET_LIBRARY_H

#include "data/dataset_rows.h"
#include "data/dataset_source.h"

/* Calls fn with each row of the entry's split, in the library's order. Returns 0, or -1 with an
 * error naming the entry: `datasets` missing (what to install), the library's own error (an
 * unknown split, a missing file, a Hub id that does not exist or needs a token), a row that is
 * not JSON ("FILE: row N['col']: ..."), fn's error prefixed "FILE: row N", or no rows. */
int dataset_library_foreach(const DatasetSource *src, const DatasetConfig *dc, DatasetRowFn fn,
                            void *ctx);

/* The commit a Hub entry's `revision` (default main) names, for the prepared-dataset cache key:
 * from the Hub, else from the huggingface_hub cache (offline), else the revision as given.
 * Writes it to out (cap bytes). Returns 0, or -1 with an error (huggingface_hub missing). */
int dataset_library_revision(const DatasetConfig *dc, char *out, size_t cap);

#endif
