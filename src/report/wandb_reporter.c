/* The Weights & Biases reporter: HF's WandbCallback (setup and on_log) with the official wandb
 * package, run in the embedded interpreter (python/py_embed.h).
 *
 * wandb.init gets what Axolotl hands it through WANDB_* variables: project (wandb_project, else
 * $WANDB_PROJECT, else HF's "huggingface"), entity, name (wandb_name is Axolotl's run_name), id
 * (wandb_run_id, resumed with resume="allow"), mode (wandb_mode; unset, wandb reads $WANDB_MODE
 * itself, so WANDB_MODE=offline works) and the config file's keys as the run's config. Metrics
 * are stepped by "train/global_step", as WandbCallback defines them. */
#include "common/error.h"
#include "python/py_embed.h"
#include "python/py_error.h"
#include "python/py_json.h"
#include "report/report_tags.h"
#include "report/reporter.h"

#include <stdlib.h>

typedef struct {
    PyObject *run;
} WandbReporter;

/* kwargs[key] = value when value is set; a new str. Returns 0, or -1 with a Python error. */
static int set_str(PyObject *kwargs, const char *key, const char *value) {
    if (!value || !*value) return 0;
    PyObject *s = PyUnicode_FromString(value);
    int rc = s ? PyDict_SetItemString(kwargs, key, s) : -1;
    Py_XDECREF(s);
    return rc;
}

static PyObject *init_kwargs(const TrainConfig *cfg) {
    const TrackingConfig *t = &cfg->tracking;
    PyObject *kw = PyDict_New();
    if (!kw) return NULL;
    const char *project = t->wandb_project;
    if (!project || !*project) project = getenv("WANDB_PROJECT");
    if (!project || !*project) project = "huggingface";
    PyObject *config = cfg->raw ? py_from_json(cfg->raw) : PyDict_New();
    if (set_str(kw, "project", project) || set_str(kw, "entity", t->wandb_entity) ||
        set_str(kw, "name", t->wandb_name) || set_str(kw, "id", t->wandb_run_id) ||
        set_str(kw, "mode", t->wandb_mode) ||
        (t->wandb_run_id && *t->wandb_run_id && set_str(kw, "resume", "allow")) || !config ||
        PyDict_SetItemString(kw, "config", config) != 0) {
        Py_XDECREF(config);
        Py_DECREF(kw);
        return NULL;
    }
    Py_DECREF(config);
    return kw;
}

/* run.define_metric("train/global_step"); run.define_metric("*", step_metric=..., step_sync=True)
 */
static int define_step_metric(PyObject *run) {
    PyObject *r1 = PyObject_CallMethod(run, "define_metric", "s", "train/global_step");
    if (!r1) return -1;
    Py_DECREF(r1);
    PyObject *define = PyObject_GetAttrString(run, "define_metric");
    PyObject *args = Py_BuildValue("(s)", "*");
    PyObject *kw =
        Py_BuildValue("{s:s,s:O}", "step_metric", "train/global_step", "step_sync", Py_True);
    PyObject *r2 = define && args && kw ? PyObject_Call(define, args, kw) : NULL;
    Py_XDECREF(define);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(r2);
    return r2 ? 0 : -1;
}

static int wandb_log(void *ctx, const json_t *entry, int64_t step) {
    WandbReporter *w = ctx;
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return -1;
    int rc = -1;
    PyObject *d = PyDict_New();
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        if (!d || !report_is_scalar(key, v)) continue;
        char tag[512];
        report_tag(key, tag, sizeof tag);
        PyObject *pv = py_from_json(v);
        if (!pv || PyDict_SetItemString(d, tag, pv) != 0) Py_CLEAR(d);
        Py_XDECREF(pv);
    }
    PyObject *gs = d ? PyLong_FromLongLong((long long)step) : NULL;
    if (gs && PyDict_SetItemString(d, "train/global_step", gs) == 0) {
        PyObject *r = PyObject_CallMethod(w->run, "log", "O", d);
        rc = r ? 0 : py_error_set("wandb.log at step %lld", (long long)step);
        Py_XDECREF(r);
    } else {
        py_error_set("wandb: cannot make the logged values");
    }
    Py_XDECREF(gs);
    Py_XDECREF(d);
    py_embed_leave(gil);
    return rc;
}

static void wandb_close(void *ctx) {
    WandbReporter *w = ctx;
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) == 0) {
        PyObject *r = PyObject_CallMethod(w->run, "finish", NULL);
        if (!r) {
            py_error_set("wandb: run.finish");
            fprintf(stderr, "warning: %s\n", err_msg());
        }
        Py_XDECREF(r);
        Py_DECREF(w->run);
        py_embed_leave(gil);
    }
    free(w);
}

int wandb_reporter_open(Reporter *r, const TrainConfig *cfg, bool optional, FILE *log) {
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return -1;
    PyObject *wandb = PyImport_ImportModule("wandb");
    if (!wandb) {
        if (optional && PyErr_ExceptionMatches(PyExc_ImportError)) {
            PyErr_Clear();
            py_embed_leave(gil);
            return 1;
        }
        py_error_set("cannot import the wandb package (pip install wandb, in the Python %s "
                     "environment rlhf embeds)",
                     py_embed_version());
        py_embed_leave(gil);
        return -1;
    }
    PyObject *kw = init_kwargs(cfg);
    PyObject *init = kw ? PyObject_GetAttrString(wandb, "init") : NULL;
    PyObject *args = init ? PyTuple_New(0) : NULL;
    PyObject *run = args ? PyObject_Call(init, args, kw) : NULL;
    int rc = 0;
    if (!run)
        rc = py_error_set("wandb.init");
    else if (run == Py_None) /* wandb returns a disabled run object, but be safe */
        rc = err_set("wandb.init returned no run");
    else if (define_step_metric(run) != 0)
        rc = py_error_set("wandb: define_metric");
    Py_XDECREF(args);
    Py_XDECREF(init);
    Py_XDECREF(kw);
    Py_DECREF(wandb);
    if (rc != 0) {
        Py_XDECREF(run);
        py_embed_leave(gil);
        return -1;
    }
    WandbReporter *w = xcalloc(1, sizeof *w);
    w->run = run;
    PyObject *dir = PyObject_GetAttrString(run, "dir");
    const char *dir_text = dir && PyUnicode_Check(dir) ? PyUnicode_AsUTF8(dir) : NULL;
    fprintf(log, "wandb: logging to run %s\n", dir_text ? dir_text : "(no directory)");
    Py_XDECREF(dir);
    PyErr_Clear();
    py_embed_leave(gil);
    *r = (Reporter){.name = "wandb", .ctx = w, .log = wandb_log, .close = wandb_close};
    return 0;
}
