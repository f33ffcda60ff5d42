#include "rewards/python_reward.h"

#include "common/error.h"
#include "python/py_embed.h"
#include "python/py_error.h"
#include "python/py_json.h"
#include "python/py_support.h"

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *label;     /* "name (module.fn)" for messages */
    PyObject *fn;    /* the user's callable */
    PyObject *log;   /* _rlhf_support.RewardLog: receives log_metric / log_extra */
    PyObject *state; /* _rlhf_support.trainer_state, kept to build each call's trainer_state */
    PyObject *is_real;
} PythonReward;

/* ------------------------------------------------------------------ opening */

/* Axolotl takes a name it cannot import as a reward model: a non-empty local directory or a
 * Hugging Face Hub id. Says so, since rlhf.c runs no reward models. */
static const char *reward_model_hint(const char *spec, char *buf, size_t cap) {
    DIR *dir = opendir(spec);
    if (dir) {
        bool empty = true;
        for (struct dirent *e; empty && (e = readdir(dir));)
            empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        closedir(dir);
        if (!empty) {
            snprintf(buf, cap,
                     " '%s' is a directory, which Axolotl would load as a reward model: reward "
                     "models are not supported by rlhf.c, only reward functions.",
                     spec);
            return buf;
        }
    }
    if (strchr(spec, '/')) {
        snprintf(buf, cap,
                 " If '%s' is a Hugging Face reward model: reward models are not supported by "
                 "rlhf.c, only reward functions.",
                 spec);
        return buf;
    }
    return "";
}

static int import_failure(const char *spec, const char *module_name) {
    char why[1536], hint[1024], dir[1024];
    bool not_found = py_support_module_missing(module_name);
    py_error_take(why, sizeof why);
    if (!not_found)
        return err_set("Reward function %s: importing %s failed: %s", spec, module_name, why);
    py_support_first_search_dir(dir, sizeof dir);
    return err_set("Reward function %s not found. %s (searched the working directory %s first, "
                   "then sys.path).%s",
                   spec, why, dir, reward_model_hint(spec, hint, sizeof hint));
}

/* The function's __name__ (what TRL names its metrics by), else the attribute name. */
static char *function_name(PyObject *fn, const char *attr) {
    PyObject *name = PyObject_GetAttrString(fn, "__name__");
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    char *copy = xstrdup(s ? s : attr);
    Py_XDECREF(name);
    return copy;
}

/* Axolotl's test: inspect.signature(fn) has at least two parameters. */
static int check_parameter_count(const char *spec, PyObject *fn) {
    PyObject *count_fn = py_support_get("parameter_count");
    if (!count_fn) return -1;
    PyObject *count = PyObject_CallOneArg(count_fn, fn);
    Py_DECREF(count_fn);
    if (!count) return py_error_set("Reward function %s: cannot read its parameters", spec);
    long n = PyLong_AsLong(count);
    Py_DECREF(count);
    if (n < 2)
        return err_set("Reward function must accept at least two arguments: prompts: list and "
                       "completions: list (%s declares %ld)",
                       spec, n);
    return 0;
}

static void python_reward_free(PythonReward *r) {
    if (!r) return;
    if (py_embed_running()) {
        PyGILState_STATE gil;
        if (py_embed_enter(&gil) == 0) {
            Py_XDECREF(r->fn);
            Py_XDECREF(r->log);
            Py_XDECREF(r->state);
            Py_XDECREF(r->is_real);
            py_embed_leave(gil);
        }
    }
    free(r->label);
    free(r);
}

static int python_reward_score(void *impl, const RewardBatch *b, double *out);

static void python_reward_close(void *impl) {
    python_reward_free(impl);
}

/* Wraps fn (a reference the wrapper takes over) as a RewardFunc called `name` and `label` in
 * messages (both taken over too); GIL held. Returns 0, or -1 with an error, fn released. */
static int wrap_callable(RewardFunc *f, PyObject *fn, char *name, char *label) {
    PythonReward *r = xcalloc(1, sizeof *r);
    r->fn = fn;
    PyObject *log_class = py_support_get("RewardLog");
    r->log = log_class ? PyObject_CallNoArgs(log_class) : NULL;
    Py_XDECREF(log_class);
    r->state = py_support_get("trainer_state");
    r->is_real = py_support_get("is_real");
    if (!r->log || !r->state || !r->is_real) {
        if (PyErr_Occurred()) py_error_set("Reward function %s: setting up its call", label);
        Py_XDECREF(r->fn);
        Py_XDECREF(r->log);
        Py_XDECREF(r->state);
        Py_XDECREF(r->is_real);
        free(r);
        free(name);
        free(label);
        return -1;
    }
    r->label = label;
    *f = (RewardFunc){
        .name = name, .impl = r, .score = python_reward_score, .close = python_reward_close};
    return 0;
}

/* Imports, checks and wraps the callable; GIL held. */
static int open_callable(RewardFunc *f, const char *spec, const char *module_name,
                         const char *attr) {
    PyObject *module = py_support_import(module_name);
    if (!module) return import_failure(spec, module_name);
    PyObject *fn = PyObject_GetAttrString(module, attr);
    Py_DECREF(module);
    if (!fn) {
        char why[1536];
        py_error_take(why, sizeof why);
        return err_set("Reward function %s not found. %s", spec, why);
    }
    if (!PyCallable_Check(fn)) {
        err_set("Reward function %s is not callable (it is a %s)", spec, Py_TYPE(fn)->tp_name);
        Py_DECREF(fn);
        return -1;
    }
    if (check_parameter_count(spec, fn) != 0) {
        Py_DECREF(fn);
        return -1;
    }

    char *name = function_name(fn, attr);
    size_t cap = strlen(name) + strlen(spec) + 4;
    char *label = xmalloc(cap);
    snprintf(label, cap, "%s (%s)", name, spec);
    return wrap_callable(f, fn, name, label);
}

int python_reward_open(RewardFunc *f, const char *spec) {
    *f = (RewardFunc){0};
    const char *dot = strrchr(spec, '.');
    if (!dot || dot == spec || !dot[1]) {
        char hint[1024];
        return err_set("Reward function %s not found: expected 'module.function' (e.g. "
                       "rewards.my_reward, a function in ./rewards.py).%s",
                       spec, reward_model_hint(spec, hint, sizeof hint));
    }
    size_t module_len = (size_t)(dot - spec);
    char *module_name = xmalloc(module_len + 1);
    memcpy(module_name, spec, module_len);
    module_name[module_len] = '\0';

    PyGILState_STATE gil;
    int rc = py_embed_enter(&gil);
    if (rc == 0) {
        rc = open_callable(f, spec, module_name, dot + 1);
        py_embed_leave(gil);
    } else {
        err_prefix("Reward function %s", spec);
    }
    free(module_name);
    return rc;
}

int python_reward_wrap(RewardFunc *f, void *callable, const char *name) {
    *f = (RewardFunc){0};
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("Reward function %s", name);
    PyObject *fn = callable;
    int rc;
    if (!PyCallable_Check(fn)) {
        rc = err_set("Reward function %s is not callable (it is a %s)", name, Py_TYPE(fn)->tp_name);
    } else {
        Py_INCREF(fn);
        rc = wrap_callable(f, fn, xstrdup(name), xstrdup(name));
    }
    py_embed_leave(gil);
    return rc;
}

int python_reward_is(const RewardFunc *f) {
    return f && f->score == python_reward_score;
}

/* ------------------------------------------------------------------ one call */

/* kwargs[key] = py_from_json(array of n values). */
static int set_list_kwarg(PyObject *kwargs, const char *key, const json_t *values, int n,
                          const char *label) {
    if (!json_is_array(values) || json_array_size(values) != (size_t)n)
        return err_set("reward function %s: '%s' must be a list of %d values (one per "
                       "completion), got %zu",
                       label, key, n, json_is_array(values) ? json_array_size(values) : 0);
    PyObject *list = py_from_json(values);
    if (!list) return err_prefix("reward function %s: '%s'", label, key);
    int rc = PyDict_SetItemString(kwargs, key, list);
    Py_DECREF(list);
    return rc == 0 ? 0 : py_error_set("reward function %s: '%s'", label, key);
}

static PyObject *completion_id_lists(const RewardBatch *b) {
    PyObject *rows = PyList_New(b->n);
    for (int i = 0; rows && i < b->n; i++) {
        int len = b->completion_lens[i];
        PyObject *row = PyList_New(len);
        for (int t = 0; row && t < len; t++) {
            PyObject *id = PyLong_FromLong(b->completion_ids[i][t]);
            if (!id)
                Py_CLEAR(row);
            else
                PyList_SET_ITEM(row, t, id);
        }
        if (!row)
            Py_CLEAR(rows);
        else
            PyList_SET_ITEM(rows, i, row);
    }
    return rows;
}

/* TRL passes every column but these three (their batch-wide forms go as prompts, completions
 * and completion_ids). */
static bool column_not_passed(const char *key) {
    return strcmp(key, "prompt") == 0 || strcmp(key, "completion") == 0 ||
           strcmp(key, "completion_ids") == 0;
}

/* The keyword arguments in TRL's order: prompts, completions, completion_ids, the columns, then
 * trainer_state, log_extra and log_metric (which replace columns of those names, as in TRL). */
static PyObject *call_kwargs(PythonReward *r, const RewardBatch *b) {
    PyObject *kwargs = PyDict_New();
    if (set_list_kwarg(kwargs, "prompts", b->prompts, b->n, r->label) != 0 ||
        set_list_kwarg(kwargs, "completions", b->completions, b->n, r->label) != 0)
        goto fail;
    if (b->n > 0 && (!b->completion_ids || !b->completion_lens)) {
        err_set("reward function %s: the batch has no completion_ids", r->label);
        goto fail;
    }
    PyObject *ids = completion_id_lists(b);
    if (!ids || PyDict_SetItemString(kwargs, "completion_ids", ids) != 0) {
        Py_XDECREF(ids);
        py_error_set("reward function %s: completion_ids", r->label);
        goto fail;
    }
    Py_DECREF(ids);

    if (b->columns && !json_is_object(b->columns)) {
        err_set("reward function %s: dataset columns must be an object", r->label);
        goto fail;
    }
    const char *key;
    json_t *column;
    json_object_foreach((json_t *)b->columns, key, column) {
        if (column_not_passed(key)) continue;
        if (PyDict_GetItemString(kwargs, key)) {
            err_set("reward function %s: the dataset column '%s' has the name of an argument "
                    "TRL passes itself (TRL fails the same way: multiple values for '%s')",
                    r->label, key, key);
            goto fail;
        }
        if (set_list_kwarg(kwargs, key, column, b->n, r->label) != 0) goto fail;
    }

    PyObject *fields = py_from_json(b->trainer_state ? b->trainer_state : json_null());
    PyObject *state = fields ? PyObject_CallOneArg(r->state, fields) : NULL;
    Py_XDECREF(fields);
    if (!state || PyDict_SetItemString(kwargs, "trainer_state", state) != 0) {
        Py_XDECREF(state);
        if (PyErr_Occurred()) py_error_set("reward function %s: trainer_state", r->label);
        goto fail;
    }
    Py_DECREF(state);
    PyObject *log_extra = PyObject_GetAttrString(r->log, "log_extra");
    PyObject *log_metric = PyObject_GetAttrString(r->log, "log_metric");
    int rc = !log_extra || !log_metric ||
             PyDict_SetItemString(kwargs, "log_extra", log_extra) != 0 ||
             PyDict_SetItemString(kwargs, "log_metric", log_metric) != 0;
    Py_XDECREF(log_extra);
    Py_XDECREF(log_metric);
    if (rc != 0) {
        py_error_set("reward function %s: log callbacks", r->label);
        goto fail;
    }
    return kwargs;
fail:
    Py_DECREF(kwargs);
    return NULL;
}

/* One returned value as a score: None is NaN ("no score", as TRL reads it), a bool, int, float
 * or other real number (numpy scalars) its value. Returns 0, or -1 when v is none of those. */
static int score_value(PythonReward *r, PyObject *v, double *out) {
    if (v == Py_None) {
        *out = NAN;
        return 0;
    }
    if (PyFloat_Check(v) || PyLong_Check(v)) {
        *out = PyFloat_Check(v) ? PyFloat_AS_DOUBLE(v) : PyLong_AsDouble(v);
        if (*out == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        return 0;
    }
    PyObject *real = PyObject_CallOneArg(r->is_real, v);
    int is_real = real ? PyObject_IsTrue(real) : -1;
    Py_XDECREF(real);
    if (is_real == 1) {
        *out = PyFloat_AsDouble(v);
        if (!(*out == -1.0 && PyErr_Occurred())) return 0;
    }
    PyErr_Clear();
    return -1;
}

/* The start of repr(v), for saying what a wrong value was. */
static void short_repr(PyObject *v, char *out, size_t cap) {
    PyObject *repr = PyObject_Repr(v);
    const char *s = repr ? PyUnicode_AsUTF8(repr) : NULL;
    PyErr_Clear();
    snprintf(out, cap, "%.60s%s", s ? s : "?", s && strlen(s) > 60 ? "..." : "");
    Py_XDECREF(repr);
}

static int read_scores(PythonReward *r, PyObject *result, int n, double *out) {
    if (PyUnicode_Check(result) || PyBytes_Check(result) || PyDict_Check(result))
        return err_set("reward function %s returned a %s; expected a list of %d numbers (None "
                       "for no score)",
                       r->label, Py_TYPE(result)->tp_name, n);
    PyObject *seq = PySequence_Fast(result, "");
    if (!seq) {
        PyErr_Clear();
        return err_set("reward function %s returned a %s; expected a list of %d numbers (None "
                       "for no score)",
                       r->label, Py_TYPE(result)->tp_name, n);
    }
    Py_ssize_t got = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (got != n) {
        rc = err_set("reward function %s returned %zd values for %d completions", r->label, got, n);
    }
    for (Py_ssize_t i = 0; rc == 0 && i < got; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        if (score_value(r, v, &out[i]) != 0) {
            char repr[80];
            short_repr(v, repr, sizeof repr);
            rc = err_set("reward function %s: value %zd is a %s (%s); expected a number or None",
                         r->label, i, Py_TYPE(v)->tp_name, repr);
        }
    }
    Py_DECREF(seq);
    return rc;
}

/* An `async def` reward gives a coroutine: run it as TRL does (to completion, on a loop kept
 * for the run). Steals `result`; returns the awaited value (new) or NULL with an exception. */
static PyObject *await_if_coroutine(PyObject *result) {
    if (!result || !PyCoro_CheckExact(result)) return result;
    PyObject *run = py_support_get("run_coroutine");
    PyObject *awaited = run ? PyObject_CallOneArg(run, result) : NULL;
    Py_XDECREF(run);
    Py_DECREF(result);
    return awaited;
}

static int python_reward_score(void *impl, const RewardBatch *b, double *out) {
    PythonReward *r = impl;
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("reward function %s", r->label);
    int rc = -1;
    PyObject *kwargs = call_kwargs(r, b);
    if (kwargs) {
        PyObject *args = PyTuple_New(0);
        PyObject *result = await_if_coroutine(PyObject_Call(r->fn, args, kwargs));
        Py_DECREF(args);
        if (!result) {
            if (py_embed_hosted()) py_support_keep_exception();
            py_error_set("reward function %s raised", r->label);
        } else
            rc = read_scores(r, result, b->n, out);
        Py_XDECREF(result);
        Py_DECREF(kwargs);
    }
    py_embed_leave(gil);
    return rc;
}

/* ------------------------------------------------------------------ logs */

int python_reward_take_logs(RewardFunc *f, json_t **metrics, json_t **extra) {
    *metrics = *extra = NULL;
    if (!python_reward_is(f))
        return err_set("%s is not a Python reward function", f && f->name ? f->name : "this");
    PythonReward *r = f->impl;
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return -1;
    int rc = -1;
    PyObject *taken = PyObject_CallMethod(r->log, "take", NULL);
    if (!taken || !PyTuple_Check(taken) || PyTuple_Size(taken) != 2) {
        py_error_set("reward function %s: reading its logs", r->label);
    } else {
        *metrics = py_to_json(PyTuple_GET_ITEM(taken, 0), "log_metric values");
        *extra = *metrics ? py_to_json(PyTuple_GET_ITEM(taken, 1), "log_extra values") : NULL;
        if (*metrics && *extra)
            rc = 0;
        else
            err_prefix("reward function %s", r->label);
    }
    Py_XDECREF(taken);
    if (rc != 0) {
        json_decref(*metrics);
        json_decref(*extra);
        *metrics = *extra = NULL;
    }
    py_embed_leave(gil);
    return rc;
}
