#include "data/python_transform.h"

#include "common/error.h"
#include "python/py_embed.h"
#include "python/py_error.h"
#include "python/py_json.h"
#include "python/py_support.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* What the factory asked for, read from its (map_fn, map_kwargs). */
typedef struct {
    const char *spec;
    PyObject *map_fn;
    PyObject *call_kwargs;     /* {"tokenizer": None} when map_fn names it, else NULL */
    bool remove_all;           /* remove_columns: "__all__" */
    json_t *remove_columns;    /* array of names (empty when none) */
    json_t *first_output_keys; /* the first returned dict's keys (object of nulls), or NULL */
    int returned_none;         /* -1: not known yet; 0: rows return dicts; 1: rows return None */
} RowMap;

/* ------------------------------------------------------------------ resolving the factory */

/* Axolotl's `load`: "t" is "t.default"; module = second-to-last part, function = last part. */
static void split_type_name(const char *spec, char *module, size_t module_cap, char *fn,
                            size_t fn_cap) {
    const char *last = strrchr(spec, '.');
    if (!last) {
        snprintf(module, module_cap, "%s", spec);
        snprintf(fn, fn_cap, "default");
        return;
    }
    const char *start = last;
    while (start > spec && start[-1] != '.')
        start--;
    snprintf(module, module_cap, "%.*s", (int)(last - start), start);
    snprintf(fn, fn_cap, "%s", last + 1);
}

static int load_failure(const char *spec, const char *what) {
    char why[1536];
    py_error_take(why, sizeof why);
    return err_set("Failed to load dataset transform function for type '%s': %s%s", spec, what,
                   why);
}

/* The factory function named by spec (new reference), or NULL with an error. */
static PyObject *import_factory(const char *spec) {
    char module_name[256], fn_name[256];
    split_type_name(spec, module_name, sizeof module_name, fn_name, sizeof fn_name);
    if (!module_name[0] || !fn_name[0]) {
        err_set("Failed to load dataset transform function for type '%s': expected "
                "'<file>.<function>' (e.g. rewards.my_transform for ./rewards.py)",
                spec);
        return NULL;
    }
    PyObject *module = py_support_import(module_name);
    if (!module) {
        char what[512];
        snprintf(what, sizeof what,
                 "importing module '%s' (from the working directory first): ", module_name);
        load_failure(spec, what);
        return NULL;
    }
    PyObject *fn = PyObject_GetAttrString(module, fn_name);
    Py_DECREF(module);
    if (!fn) {
        load_failure(spec, "");
        return NULL;
    }
    if (!PyCallable_Check(fn)) {
        err_set("Failed to load dataset transform function for type '%s': %s.%s is a %s, not a "
                "function",
                spec, module_name, fn_name, Py_TYPE(fn)->tp_name);
        Py_DECREF(fn);
        return NULL;
    }
    return fn;
}

/* factory(DictDefault(cfg), dataset_idx=i), as Axolotl calls it. New reference or NULL. */
static PyObject *call_factory(const char *spec, PyObject *factory, const json_t *cfg,
                              int dataset_idx) {
    json_t *empty = cfg ? NULL : json_object();
    PyObject *plain = py_from_json(cfg ? cfg : empty);
    json_decref(empty);
    if (!plain) {
        err_prefix("dataset type '%s': the config", spec);
        return NULL;
    }
    PyObject *dict_default = py_support_get("DictDefault");
    PyObject *cfg_obj = dict_default ? PyObject_CallOneArg(dict_default, plain) : NULL;
    Py_XDECREF(dict_default);
    Py_DECREF(plain);
    if (!cfg_obj) {
        if (PyErr_Occurred()) py_error_set("dataset type '%s': the config as DictDefault", spec);
        return NULL;
    }
    PyObject *args = PyTuple_Pack(1, cfg_obj);
    PyObject *kwargs = Py_BuildValue("{s:i}", "dataset_idx", dataset_idx);
    PyObject *result = args && kwargs ? PyObject_Call(factory, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_DECREF(cfg_obj);
    if (!result) {
        char what[512];
        snprintf(what, sizeof what, "%s(cfg, dataset_idx=%d) raised: ", spec, dataset_idx);
        load_failure(spec, what);
    }
    return result;
}

/* ------------------------------------------------------------------ reading map_kwargs */

static int read_remove_columns(RowMap *m, PyObject *value) {
    const char *text = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
    PyErr_Clear();
    if (text && strcmp(text, "__all__") == 0) {
        m->remove_all = true;
        return 0;
    }
    json_t *names =
        (PyList_Check(value) || PyTuple_Check(value)) ? py_to_json(value, "remove_columns") : NULL;
    size_t i;
    json_t *name;
    json_array_foreach(names, i, name) {
        if (!json_is_string(name)) {
            json_decref(names);
            names = NULL;
            break;
        }
    }
    if (!names) {
        err_clear();
        return err_set("dataset type '%s': remove_columns must be a list of column names or "
                       "\"__all__\" (got a %s)",
                       m->spec, Py_TYPE(value)->tp_name);
    }
    json_decref(m->remove_columns);
    m->remove_columns = names;
    return 0;
}

static int read_map_kwargs(RowMap *m, PyObject *map_kwargs) {
    if (!PyDict_Check(map_kwargs))
        return err_set("dataset type '%s': the transform returned (map_fn, %s); the second item "
                       "must be a dict of map options such as {\"remove_columns\": [...]}",
                       m->spec, Py_TYPE(map_kwargs)->tp_name);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(map_kwargs, &pos, &key, &value)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        PyErr_Clear();
        if (k && strcmp(k, "remove_columns") == 0) {
            if (read_remove_columns(m, value) != 0) return -1;
        } else {
            return err_set("dataset type '%s': map option '%s' is not supported by rlhf.c (only "
                           "remove_columns is)",
                           m->spec, k ? k : "?");
        }
    }
    return 0;
}

/* Splits the factory's result into map_fn and options. Steals nothing. */
static int read_factory_result(RowMap *m, PyObject *result) {
    PyObject *map_fn = result;
    if (PyTuple_Check(result)) {
        if (PyTuple_Size(result) != 2)
            return err_set("dataset type '%s': the transform returned a tuple of %zd items; "
                           "expected map_fn or (map_fn, map_kwargs)",
                           m->spec, PyTuple_Size(result));
        map_fn = PyTuple_GET_ITEM(result, 0);
        if (read_map_kwargs(m, PyTuple_GET_ITEM(result, 1)) != 0) return -1;
    }
    if (!PyCallable_Check(map_fn))
        return err_set("dataset type '%s': the transform returned a %s; expected a function "
                       "taking a row (or (function, map_kwargs))",
                       m->spec, Py_TYPE(map_fn)->tp_name);
    Py_INCREF(map_fn);
    m->map_fn = map_fn;

    PyObject *names_parameter = py_support_get("names_parameter");
    PyObject *named =
        names_parameter ? PyObject_CallFunction(names_parameter, "Os", map_fn, "tokenizer") : NULL;
    Py_XDECREF(names_parameter);
    int takes_tokenizer = named ? PyObject_IsTrue(named) : -1;
    Py_XDECREF(named);
    if (takes_tokenizer < 0) return py_error_set("dataset type '%s': reading map_fn", m->spec);
    if (takes_tokenizer) m->call_kwargs = Py_BuildValue("{s:O}", "tokenizer", Py_None);
    return 0;
}

/* ------------------------------------------------------------------ one row */

static bool is_removed(const RowMap *m, const json_t *input, const char *column) {
    if (!json_object_get(input, column)) return false; /* not a column the row came with */
    if (m->remove_all) return true;
    size_t i;
    json_t *name;
    json_array_foreach(m->remove_columns, i, name) {
        if (strcmp(json_string_value(name), column) == 0) return true;
    }
    return false;
}

/* The returned dict's keys must be the first row's (datasets' columns come from it). */
static int check_same_keys(RowMap *m, const json_t *returned, size_t row) {
    const char *key;
    json_t *value;
    if (!m->first_output_keys) {
        m->first_output_keys = json_object();
        json_object_foreach((json_t *)returned, key, value) {
            json_object_set_new(m->first_output_keys, key, json_null());
        }
        return 0;
    }
    json_object_foreach((json_t *)returned, key, value) {
        if (!json_object_get(m->first_output_keys, key))
            return err_set("dataset type '%s', row %zu: the transform returned key '%s', which "
                           "row 0's result did not have (every row must give the same keys)",
                           m->spec, row, key);
    }
    json_object_foreach(m->first_output_keys, key, value) {
        if (!json_object_get(returned, key))
            return err_set("dataset type '%s', row %zu: the transform did not return key '%s', "
                           "which row 0's result had (every row must give the same keys)",
                           m->spec, row, key);
    }
    return 0;
}

/* datasets' merge: the row as map_fn left it, minus the removed columns it did not return,
 * updated with what it returned. Returns a new object or NULL with an error. */
static json_t *merge_row(RowMap *m, const json_t *input, PyObject *example, PyObject *returned,
                         size_t row) {
    char what[512];
    snprintf(what, sizeof what, "dataset type '%s', row %zu: the row after the transform", m->spec,
             row);
    json_t *merged = py_to_json(example, what);
    if (!merged) return NULL;
    json_t *out = NULL;
    if (returned != example) {
        snprintf(what, sizeof what, "dataset type '%s', row %zu: the transform's result", m->spec,
                 row);
        out = py_to_json(returned, what);
        if (!out || check_same_keys(m, out, row) != 0) {
            json_decref(merged);
            json_decref(out);
            return NULL;
        }
    }
    const char *key;
    json_t *value;
    void *tmp;
    json_object_foreach_safe(merged, tmp, key, value) {
        if (is_removed(m, input, key) && !(out && json_object_get(out, key)))
            json_object_del(merged, key);
    }
    if (out) json_object_update(merged, out);
    json_decref(out);
    return merged;
}

static json_t *map_row(RowMap *m, const json_t *input, size_t row) {
    if (!json_is_object(input)) {
        err_set("dataset type '%s', row %zu: expected an object (a row of named columns)", m->spec,
                row);
        return NULL;
    }
    PyObject *example = py_from_json(input);
    if (!example) {
        err_prefix("dataset type '%s', row %zu", m->spec, row);
        return NULL;
    }
    PyObject *args = PyTuple_Pack(1, example);
    PyObject *returned = args ? PyObject_Call(m->map_fn, args, m->call_kwargs) : NULL;
    Py_XDECREF(args);
    json_t *out = NULL;
    if (!returned) {
        py_error_set("dataset type '%s', row %zu", m->spec, row);
    } else if (returned != Py_None && !PyDict_Check(returned)) {
        err_set("dataset type '%s', row %zu: the transform returned a %s; expected a dict of "
                "columns (or None)",
                m->spec, row, Py_TYPE(returned)->tp_name);
    } else if (m->returned_none >= 0 && m->returned_none != (returned == Py_None)) {
        err_set("dataset type '%s', row %zu: the transform returned %s, but %s for row 0; it "
                "must return a dict for every row or None for every row",
                m->spec, row, returned == Py_None ? "None" : "a dict",
                returned == Py_None ? "a dict" : "None");
    } else {
        m->returned_none = returned == Py_None;
        /* None: datasets keeps the dataset as it was (a map run for its side effects). */
        out = returned == Py_None ? json_deep_copy(input)
                                  : merge_row(m, input, example, returned, row);
    }
    Py_XDECREF(returned);
    Py_DECREF(example);
    return out;
}

/* ------------------------------------------------------------------ the whole set */

static int map_rows(RowMap *m, const json_t *rows, json_t **out_rows) {
    json_t *out = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *mapped = map_row(m, row, i);
        if (!mapped) {
            json_decref(out);
            return -1;
        }
        json_array_append_new(out, mapped);
    }
    *out_rows = out;
    return 0;
}

int python_transform_rows(const char *spec, const json_t *cfg, int dataset_idx, const json_t *rows,
                          json_t **out_rows) {
    *out_rows = NULL;
    if (!json_is_array(rows))
        return err_set("dataset type '%s': the rows must be an array of objects", spec);
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("dataset type '%s'", spec);

    RowMap m = {.spec = spec, .remove_columns = json_array(), .returned_none = -1};
    int rc = -1;
    PyObject *factory = import_factory(spec);
    PyObject *result = factory ? call_factory(spec, factory, cfg, dataset_idx) : NULL;
    if (result && read_factory_result(&m, result) == 0) rc = map_rows(&m, rows, out_rows);

    Py_XDECREF(result);
    Py_XDECREF(factory);
    Py_XDECREF(m.map_fn);
    Py_XDECREF(m.call_kwargs);
    json_decref(m.remove_columns);
    json_decref(m.first_output_keys);
    py_embed_leave(gil);
    return rc;
}
