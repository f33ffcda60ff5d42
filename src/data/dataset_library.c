#include "data/dataset_library.h"

#include "common/error.h"
#include "python/py_embed.h"
#include "python/py_error.h"
#include "python/py_json.h"
#include "python/py_support.h"

#include <stdio.h>
#include <string.h>

/* "config.yaml:3: datasets[0]" for messages (a config made in code may have none). */
static const char *entry_name(const DatasetConfig *dc) {
    return dc->where ? dc->where : "dataset";
}

/* The message for a failed call: a missing package says what to install, anything else is the
 * library's own exception. Takes the exception. Returns -1. */
static int library_failure(const DatasetConfig *dc, const char *doing) {
    if (PyErr_ExceptionMatches(PyExc_ModuleNotFoundError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *name = value ? PyObject_GetAttrString(value, "name") : NULL;
        const char *module = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        char missing[128];
        snprintf(missing, sizeof missing, "%s", module ? module : "datasets");
        PyErr_Clear();
        Py_XDECREF(name);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return err_set("%s: %s needs the Python package '%s', which the embedded Python %s does "
                       "not find: pip install datasets (into the environment you activate, of "
                       "Python %s)",
                       entry_name(dc), doing, missing, py_embed_version(), py_embed_version());
    }
    return py_error_set("%s: %s", entry_name(dc), doing);
}

static const char *kind_name(DatasetSourceKind kind) {
    return kind == DATASET_HUB ? "hub" : kind == DATASET_LIBRARY_DIR ? "dir" : "files";
}

static PyObject *string_list(char *const *items, int n) {
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(items[i]);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

/* dataset_load(...) of the support module: a new reference, or NULL with the exception set. */
static PyObject *load_split(const DatasetSource *src, const DatasetConfig *dc) {
    PyObject *load = py_support_get("dataset_load");
    if (!load) return NULL;
    PyObject *files = NULL, *data_files = NULL;
    if (src->kind == DATASET_LIBRARY_FILES)
        files = string_list(src->files, src->n_files);
    else
        files = Py_NewRef(Py_None);
    if (src->kind == DATASET_HUB && dc->n_data_files > 0)
        data_files = string_list(dc->data_files, dc->n_data_files);
    else
        data_files = Py_NewRef(Py_None);
    PyObject *ds = NULL;
    if (files && data_files)
        ds = PyObject_CallFunction(load, "sszOzszO", kind_name(src->kind), dc->path, src->format,
                                   files, dc->name, dc->split ? dc->split : "train", dc->revision,
                                   data_files);
    Py_XDECREF(files);
    Py_XDECREF(data_files);
    Py_DECREF(load);
    return ds;
}

typedef struct {
    DatasetRowFn fn;
    void *ctx;
    const char *label;
} RowSink;

/* Each row of ds (an iterable of dicts) as JSON to the sink. Returns the count, or -1 with an
 * error set (a Python exception is taken into it). */
static long each_row(PyObject *ds, const RowSink *sink) {
    PyObject *it = PyObject_GetIter(ds);
    if (!it) return py_error_set("%s: the loaded dataset is not iterable", sink->label);
    long n = 0;
    int rc = 0;
    for (PyObject *row; rc == 0 && (row = PyIter_Next(it)) != NULL; n++) {
        char what[64];
        snprintf(what, sizeof what, "row %ld", n);
        json_t *j = py_to_json(row, what);
        Py_DECREF(row);
        if (!j)
            rc = err_prefix("%s", sink->label);
        else if (!json_is_object(j))
            rc = err_set("%s: row %ld: expected a JSON object", sink->label, n);
        else if (sink->fn(sink->ctx, j) != 0)
            rc = err_prefix("%s: row %ld", sink->label, n);
        json_decref(j);
    }
    if (rc == 0 && PyErr_Occurred()) rc = py_error_set("%s: reading rows", sink->label);
    Py_DECREF(it);
    return rc == 0 ? n : -1;
}

int dataset_library_foreach(const DatasetSource *src, const DatasetConfig *dc, DatasetRowFn fn,
                            void *ctx) {
    char label[4200], doing[4400];
    dataset_source_label(src, dc, label, sizeof label);
    snprintf(doing, sizeof doing, "loading %s%s with `datasets`", label,
             src->kind == DATASET_HUB ? " from the Hugging Face Hub" : "");
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("%s: %s", entry_name(dc), doing);
    PyObject *ds = load_split(src, dc);
    long n = -1;
    if (!ds) {
        library_failure(dc, doing);
    } else {
        RowSink sink = {fn, ctx, label};
        n = each_row(ds, &sink);
        Py_DECREF(ds);
        if (n == 0) err_set("%s: %s holds no rows", entry_name(dc), label);
    }
    py_embed_leave(gil);
    return n > 0 ? 0 : -1;
}

int dataset_library_revision(const DatasetConfig *dc, char *out, size_t cap) {
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("%s", entry_name(dc));
    PyObject *fn = py_support_get("dataset_revision");
    PyObject *sha = fn ? PyObject_CallFunction(fn, "szz", dc->path, dc->name, dc->revision) : NULL;
    const char *text = sha && PyUnicode_Check(sha) ? PyUnicode_AsUTF8(sha) : NULL;
    int rc = 0;
    if (text)
        snprintf(out, cap, "%s", text);
    else if (fn)
        rc = PyErr_Occurred() ? library_failure(dc, "resolving the Hub revision")
                              : err_set("%s: the Hub revision is not a string", entry_name(dc));
    else
        rc = err_prefix("%s", entry_name(dc));
    Py_XDECREF(sha);
    Py_XDECREF(fn);
    py_embed_leave(gil);
    return rc;
}
