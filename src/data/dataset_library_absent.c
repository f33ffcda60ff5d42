/* data/dataset_library.h in a build without Python: parquet, CSV, Arrow, directories and Hub
 * datasets are read through `datasets`, which this build cannot run. */
#include "data/dataset_library.h"

#include "common/error.h"
#include "python/py_embed.h"

/* "config.yaml:3: datasets[0]" for messages (a config made in code may have none). */
static const char *entry_name(const DatasetConfig *dc) {
    return dc->where ? dc->where : "dataset";
}

static int refuse(const DatasetSource *src, const DatasetConfig *dc) {
    const char *what = src->kind == DATASET_HUB           ? "a Hugging Face Hub dataset"
                       : src->kind == DATASET_LIBRARY_DIR ? "a dataset directory"
                                                          : src->format;
    return err_set(
        "%s.path: \"%s\" is %s%s, read through the Python package `datasets`, " PY_EMBED_ABSENT,
        entry_name(dc), dc->path, src->kind == DATASET_LIBRARY_FILES ? "a file of type " : "",
        what);
}

int dataset_library_foreach(const DatasetSource *src, const DatasetConfig *dc, DatasetRowFn fn,
                            void *ctx) {
    return refuse(src, dc);
}

int dataset_library_revision(const DatasetConfig *dc, char *out, size_t cap) {
    DatasetSource hub = {.kind = DATASET_HUB};
    return refuse(&hub, dc);
}
