/* data/python_transform.h in a build without Python (python/py_embed.h, PY_EMBED_ABSENT): a
 * dataset entry whose type is a Python transform is refused when its rows are loaded, with the
 * caller (grpo_dataset.c) naming the config file, line and entry. Rows without a transform and
 * the built-in preference formats do not come here and keep working. */
#include "data/python_transform.h"

#include "common/error.h"
#include "python/py_embed.h"

int python_transform_rows(const char *spec, const json_t *cfg, int dataset_idx, const json_t *rows,
                          json_t **out_rows) {
    *out_rows = NULL;
    return err_set("dataset type '%s' is a Python dataset transform, " PY_EMBED_ABSENT, spec);
}
