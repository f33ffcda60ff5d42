#include "python/py_json.h"

#include "common/error.h"
#include "common/json_util.h"
#include "python/py_error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than this is not data anyone writes by hand; it is a list that contains itself. */
#define PY_JSON_MAX_DEPTH 500

/* ------------------------------------------------------------------ JSON -> Python */

static PyObject *from_json(const json_t *v, int depth);

static PyObject *dict_from_object(const json_t *v, int depth) {
    PyObject *d = PyDict_New();
    const char *key;
    json_t *item;
    json_object_foreach((json_t *)v, key, item) {
        PyObject *value = from_json(item, depth + 1);
        if (!value) {
            Py_DECREF(d);
            return NULL;
        }
        int rc = PyDict_SetItemString(d, key, value);
        Py_DECREF(value);
        if (rc != 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

static PyObject *list_from_array(const json_t *v, int depth) {
    size_t n = json_array_size(v);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *value = from_json(json_array_get(v, i), depth + 1);
        if (!value) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, value); /* steals the reference */
    }
    return list;
}

static PyObject *from_json(const json_t *v, int depth) {
    if (depth > PY_JSON_MAX_DEPTH) {
        PyErr_Format(PyExc_RecursionError, "JSON nested deeper than %d levels", PY_JSON_MAX_DEPTH);
        return NULL;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return dict_from_object(v, depth);
    case JSON_ARRAY:
        return list_from_array(v, depth);
    case JSON_STRING: {
        /* A number jansson cannot hold (json_util.h): Python's json gives an int or a float. */
        const char *big = json_bignum_text(v);
        if (big && json_bignum_is_integer(big)) return PyLong_FromString(big, NULL, 10);
        if (big) return PyFloat_FromDouble(strtod(big, NULL));
        return PyUnicode_FromStringAndSize(json_string_value(v), (Py_ssize_t)json_string_length(v));
    }
    case JSON_INTEGER:
        return PyLong_FromLongLong(json_integer_value(v));
    case JSON_REAL:
        return PyFloat_FromDouble(json_real_value(v));
    case JSON_TRUE:
        Py_RETURN_TRUE;
    case JSON_FALSE:
        Py_RETURN_FALSE;
    case JSON_NULL:
        Py_RETURN_NONE;
    }
    PyErr_SetString(PyExc_TypeError, "unknown JSON value type");
    return NULL;
}

PyObject *py_from_json(const json_t *v) {
    if (!v) {
        err_set("py_from_json: no value");
        return NULL;
    }
    PyObject *o = from_json(v, 0);
    if (!o) py_error_set("JSON value as a Python object");
    return o;
}

/* ------------------------------------------------------------------ Python -> JSON */

/* Where in the value conversion is, for messages: "['prompt'][0]['content']". */
typedef struct {
    const char *what;
    char path[512];
    size_t len;
} JsonPath;

/* Appends "['key']" or "[index]"; returns the length to go back to with path_pop. */
static size_t path_push(JsonPath *p, const char *key, Py_ssize_t index) {
    size_t old = p->len, room = sizeof p->path - p->len;
    int n = key ? snprintf(p->path + p->len, room, "['%s']", key)
                : snprintf(p->path + p->len, room, "[%ld]", (long)index);
    if (n > 0) p->len += (size_t)n < room ? (size_t)n : room - 1;
    return old;
}

static void path_pop(JsonPath *p, size_t old) {
    p->len = old;
    p->path[old] = '\0';
}

static json_t *path_error(JsonPath *p, const char *problem, PyObject *o) {
    const char *type_name = o ? Py_TYPE(o)->tp_name : "?";
    err_set("%s%s: %s (got %s)", p->what, p->path, problem, type_name);
    return NULL;
}

static json_t *to_json(PyObject *o, JsonPath *p, int depth);

static json_t *object_from_dict(PyObject *d, JsonPath *p, int depth) {
    json_t *obj = json_object();
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value)) { /* borrowed references */
        if (!PyUnicode_Check(key)) {
            json_decref(obj);
            return path_error(p, "a dict key is not a str", key);
        }
        Py_ssize_t klen;
        const char *k = PyUnicode_AsUTF8AndSize(key, &klen);
        if (!k) {
            PyErr_Clear();
            json_decref(obj);
            return path_error(p, "a dict key is not valid Unicode text", key);
        }
        size_t old = path_push(p, k, 0);
        json_t *item = to_json(value, p, depth + 1);
        path_pop(p, old);
        if (!item || json_object_setn_new(obj, k, (size_t)klen, item) != 0) {
            json_decref(obj);
            return item ? path_error(p, "a dict key is not valid UTF-8", key) : NULL;
        }
    }
    return obj;
}

static json_t *array_from_sequence(PyObject *seq, JsonPath *p, int depth) {
    json_t *arr = json_array();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t old = path_push(p, NULL, i);
        json_t *item = to_json(PySequence_Fast_GET_ITEM(seq, i), p, depth + 1);
        path_pop(p, old);
        if (!item) {
            json_decref(arr);
            return NULL;
        }
        json_array_append_new(arr, item);
    }
    return arr;
}

static json_t *to_json(PyObject *o, JsonPath *p, int depth) {
    if (depth > PY_JSON_MAX_DEPTH)
        return path_error(p, "nested too deeply (does a list or dict contain itself?)", o);
    if (o == Py_None) return json_null();
    if (PyBool_Check(o)) return json_boolean(o == Py_True);
    if (PyLong_Check(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) { /* a bignum (json_util.h), as a JSON file would give it */
            PyObject *s = PyObject_Str(o);
            const char *digits = s ? PyUnicode_AsUTF8(s) : NULL;
            json_t *big = digits ? json_bignum(digits) : NULL;
            Py_XDECREF(s);
            if (!big) PyErr_Clear();
            return big ? big : path_error(p, "an int that cannot be read", o);
        }
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return path_error(p, "an int that cannot be read", o);
        }
        return json_integer(v);
    }
    if (PyFloat_Check(o)) {
        double v = PyFloat_AsDouble(o);
        if (!isfinite(v)) return path_error(p, "NaN or infinity is not a JSON number", o);
        return json_real(v);
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(o, &len);
        if (!s) {
            PyErr_Clear();
            return path_error(p, "a str that is not valid Unicode (lone surrogate?)", o);
        }
        return json_stringn(s, (size_t)len);
    }
    if (PyDict_Check(o)) return object_from_dict(o, p, depth);
    if (PyList_Check(o) || PyTuple_Check(o)) {
        /* For a list or tuple PySequence_Fast gives the object itself, with a new reference. */
        PyObject *seq = PySequence_Fast(o, "");
        json_t *arr = array_from_sequence(seq, p, depth);
        Py_DECREF(seq);
        return arr;
    }
    return path_error(
        p, "not a JSON value (expected dict, list, tuple, str, int, float, bool or None)", o);
}

json_t *py_to_json(PyObject *o, const char *what) {
    JsonPath p = {.what = what ? what : "value", .path = "", .len = 0};
    return to_json(o, &p, 0);
}
