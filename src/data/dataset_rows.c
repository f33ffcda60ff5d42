#include "data/dataset_rows.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/dataset_library.h"
#include "data/dataset_source.h"

#include <stdlib.h>
#include <string.h>

static int call_row(DatasetRowFn fn, void *ctx, const json_t *row) {
    if (!json_is_object(row)) return err_set("expected a JSON object");
    return fn(ctx, row);
}

/* A JSONL file (one object per line) or a JSON file holding an array of objects. */
static int load_file(const char *path, DatasetRowFn fn, void *ctx) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    size_t start = 0;
    while (start < len && (text[start] == ' ' || text[start] == '\n' || text[start] == '\t' ||
                           text[start] == '\r'))
        start++;
    int rc = 0;
    size_t rows = 0;
    if (start < len && text[start] == '[') {
        json_t *arr = NULL;
        rc = json_load_text(text, len, path, &arr);
        for (size_t i = 0; rc == 0 && i < json_array_size(arr); i++, rows++)
            if (call_row(fn, ctx, json_array_get(arr, i)) != 0)
                rc = err_prefix("%s: row %zu", path, i);
        json_decref(arr);
    } else {
        int line = 0;
        for (size_t pos = 0; pos < len && rc == 0;) {
            line++;
            const char *s = text + pos;
            const char *nl = memchr(s, '\n', len - pos);
            size_t n = nl ? (size_t)(nl - s) : len - pos;
            pos += n + 1;
            size_t k = 0;
            while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
                k++;
            if (k == n) continue;
            rows++;
            json_t *row = NULL;
            if (json_load_text(s, n, NULL, &row) != 0 || call_row(fn, ctx, row) != 0)
                rc = err_prefix("%s:%d", path, line);
            json_decref(row);
        }
    }
    free(text);
    if (rc == 0 && rows == 0) rc = err_set("%s: the file holds no rows", path);
    return rc;
}

int dataset_rows_foreach(const DatasetConfig *dc, DatasetRowFn fn, void *ctx) {
    DatasetSource src;
    if (dataset_source_open(&src, dc) != 0) return -1;
    int rc = 0;
    if (src.kind != DATASET_JSON_FILES) rc = dataset_library_foreach(&src, dc, fn, ctx);
    for (int f = 0; rc == 0 && src.kind == DATASET_JSON_FILES && f < src.n_files; f++)
        rc = load_file(src.files[f], fn, ctx);
    dataset_source_free(&src);
    return rc;
}
