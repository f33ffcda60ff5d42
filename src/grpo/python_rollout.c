/* trl.rollout_func (python_rollout.h): resolving the function, calling it once per generation
 * batch, and reading what it returns into completion rows. */
#include "grpo/python_rollout_internal.h"

#include "common/error.h"
#include "python/py_error.h"
#include "python/py_json.h"
#include "python/py_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* getattr(_rlhf_rollout, name)(*args) as a new reference; NULL with the exception set. */
static PyObject *call_helper(const char *name, PyObject *args) {
    PyObject *mod = rollout_module(), *fn = mod ? PyObject_GetAttrString(mod, name) : NULL;
    PyObject *r = fn ? PyObject_CallObject(fn, args) : NULL;
    Py_XDECREF(fn);
    return r;
}

/* The module attribute spec names, checked callable. GIL held. */
static PyObject *resolve(const char *spec) {
    const char *dot = strrchr(spec, '.');
    if (!dot || dot == spec || !dot[1]) {
        err_set("key 'trl.rollout_func': \"%s\" is not 'module.function' (e.g. "
                "math_env.math_solver_rollout, a function in ./math_env.py)",
                spec);
        return NULL;
    }
    char *module_name = xmalloc((size_t)(dot - spec) + 1);
    memcpy(module_name, spec, (size_t)(dot - spec));
    module_name[dot - spec] = '\0';
    PyObject *module = py_support_import(module_name), *fn = NULL;
    if (!module) {
        char why[1536], dir[1024];
        bool missing = py_support_module_missing(module_name);
        py_error_take(why, sizeof why);
        py_support_first_search_dir(dir, sizeof dir);
        if (missing)
            err_set("key 'trl.rollout_func': rollout function %s not found. %s (searched the "
                    "working directory %s first, then sys.path)",
                    spec, why, dir);
        else
            err_set("key 'trl.rollout_func': rollout function %s: importing %s failed: %s", spec,
                    module_name, why);
    } else {
        fn = PyObject_GetAttrString(module, dot + 1);
        Py_DECREF(module);
        if (!fn) {
            char why[1536];
            py_error_take(why, sizeof why);
            err_set("key 'trl.rollout_func': rollout function %s not found. %s", spec, why);
        } else if (!PyCallable_Check(fn)) {
            err_set("key 'trl.rollout_func': rollout function %s is not callable (it is a %s)",
                    spec, Py_TYPE(fn)->tp_name);
            Py_CLEAR(fn);
        }
    }
    free(module_name);
    return fn;
}

/* The token's text, or None. New reference. */
static PyObject *token_text(const Tokenizer *tok, int32_t id) {
    size_t len;
    const char *s = id >= 0 ? tokenizer_id_to_token(tok, id, &len) : NULL;
    if (!s) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
}

/* TRL's GRPOConfig fields a rollout function reads from trainer.args: the trl: block as given,
 * with the values the run derived from it. New reference, or NULL with the exception set. */
static PyObject *trainer_args(const TrainConfig *cfg) {
    const GrpoConfig *g = &cfg->grpo;
    json_t *args = json_object();
    const json_t *trl = json_object_get(cfg->raw, "trl");
    if (json_is_object(trl)) json_object_update(args, (json_t *)trl);
    json_object_set_new(args, "num_generations", json_integer(g->num_generations));
    json_object_set_new(args, "max_completion_length", json_integer(g->max_completion_length));
    json_object_set_new(args, "temperature", json_real(g->temperature));
    json_object_set_new(args, "top_p", json_real(g->top_p));
    json_object_set_new(args, "top_k", json_integer(g->top_k));
    json_object_set_new(args, "min_p", g->min_p > 0 ? json_real(g->min_p) : json_null());
    json_object_set_new(args, "repetition_penalty", json_real(g->repetition_penalty));
    json_object_set_new(args, "generation_batch_size", json_integer(g->generation_batch_size));
    json_object_set_new(args, "steps_per_generation", json_integer(g->steps_per_generation));
    json_object_set_new(args, "per_device_train_batch_size", json_integer(cfg->micro_batch_size));
    json_object_set_new(args, "gradient_accumulation_steps",
                        json_integer(cfg->gradient_accumulation_steps));
    json_object_set_new(args, "output_dir", json_string(cfg->output_dir));
    json_object_set_new(args, "seed", json_integer(cfg->seed));
    PyObject *d = py_from_json(args);
    json_decref(args);
    if (!d) return NULL;
    PyObject *types = PyImport_ImportModule("types");
    PyObject *ns = types ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
    PyObject *empty = PyTuple_New(0);
    PyObject *r = ns ? PyObject_Call(ns, empty, d) : NULL;
    Py_XDECREF(types), Py_XDECREF(ns), Py_XDECREF(empty), Py_DECREF(d);
    return r;
}

/* The model, processing_class and trainer objects. GIL held. */
static int make_objects(PythonRollout *pr) {
    const GrpoConfig *g = &pr->cfg->grpo;
    PyObject *mod = rollout_module();
    if (!mod) return -1;
    PyObject *special = Py_BuildValue(
        "{s:i,s:i,s:N,s:N}", "eos_token_id", pr->eos_id, "pad_token_id", pr->pad_id, "eos_token",
        token_text(pr->tok, pr->eos_id), "pad_token", token_text(pr->tok, pr->pad_id));
    /* the trl settings with generation_kwargs' sampling values over them (its stop strings are
     * the built-in sampler's: a rollout function stops its generation as it likes) */
#define OVER(x, base) (isnan(x) ? (base) : (x))
    PyObject *gen = Py_BuildValue(
        "{s:O,s:d,s:i,s:d,s:d,s:d,s:i,s:i,s:i}", "do_sample", g->gen_do_sample ? Py_True : Py_False,
        "temperature", OVER(g->gen_temperature, g->temperature), "top_k",
        g->gen_top_k >= 0 ? g->gen_top_k : g->top_k, "top_p", OVER(g->gen_top_p, g->top_p), "min_p",
        OVER(g->gen_min_p, g->min_p), "repetition_penalty",
        OVER(g->gen_repetition_penalty, g->repetition_penalty), "max_new_tokens",
        g->gen_max_new_tokens > 0 ? g->gen_max_new_tokens : g->max_completion_length,
        "eos_token_id", pr->eos_id, "pad_token_id", pr->pad_id);
#undef OVER
    PyObject *args = trainer_args(pr->cfg), *state = py_support_get("trainer_state");
    PyObject *gen_class = PyObject_GetAttrString(mod, "GenerationConfig");
    PyObject *empty = PyTuple_New(0);
    PyObject *gen_config = gen_class && gen ? PyObject_Call(gen_class, empty, gen) : NULL;
    pr->processing_class =
        special ? PyObject_CallMethod(mod, "ProcessingClass", "(O)", special) : NULL;
    pr->model =
        gen_config ? PyObject_CallMethod(mod, "Model", "(Oi)", gen_config, pr->pad_id) : NULL;
    PyObject *st = state ? PyObject_CallOneArg(state, Py_None) : NULL;
    const char *url = g->vllm_server_url; /* vllm_mode: server: the trainer's vllm_client */
    if (pr->model && pr->processing_class && args && st)
        pr->trainer = PyObject_CallMethod(mod, "Trainer", "(OOOOz)", pr->model,
                                          pr->processing_class, args, st, url);
    Py_XDECREF(special), Py_XDECREF(gen), Py_XDECREF(args), Py_XDECREF(state);
    Py_XDECREF(gen_class), Py_XDECREF(empty), Py_XDECREF(gen_config), Py_XDECREF(st);
    if (!pr->trainer) return py_error_set("setting up the rollout function's objects");
    return 0;
}

static void release(PythonRollout *pr) {
    Py_XDECREF(pr->fn);
    Py_XDECREF(pr->model);
    Py_XDECREF(pr->processing_class);
    Py_XDECREF(pr->trainer);
}

int python_rollout_open(PythonRollout **out, const char *spec, void *callable,
                        const TrainConfig *cfg, const Tokenizer *tok, int32_t eos_id,
                        int32_t pad_id) {
    *out = NULL;
    PythonRollout *pr = xcalloc(1, sizeof *pr);
    *pr = (PythonRollout){
        .spec = xstrdup(spec), .cfg = cfg, .tok = tok, .eos_id = eos_id, .pad_id = pad_id};
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) {
        free(pr->spec), free(pr);
        return err_prefix("key 'trl.rollout_func' (%s)", spec);
    }
    if (callable) {
        pr->fn = callable;
        Py_INCREF(pr->fn);
    }
    int rc = pr->fn || (pr->fn = resolve(spec)) ? 0 : -1;
    if (rc == 0) {
        PyObject *args = Py_BuildValue("(O)", pr->fn);
        PyObject *kind = call_helper("contract", args);
        Py_DECREF(args);
        if (!kind)
            rc = py_error_set("key 'trl.rollout_func': rollout function %s", spec);
        else
            pr->trl = PyUnicode_Check(kind) && !strcmp(PyUnicode_AsUTF8(kind), "trl");
        Py_XDECREF(kind);
    }
    if (rc == 0) rc = make_objects(pr);
    if (rc != 0) release(pr);
    py_embed_leave(gil);
    if (rc != 0) {
        free(pr->spec), free(pr);
        return -1;
    }
    *out = pr;
    return 0;
}

void python_rollout_close(PythonRollout *pr) {
    if (!pr) return;
    if (py_embed_running()) {
        PyGILState_STATE gil;
        if (py_embed_enter(&gil) == 0) {
            release(pr);
            py_embed_leave(gil);
        }
    }
    if (pr->tpl) chat_template_free(pr->tpl);
    json_decref(pr->special_tokens);
    free(pr->spec);
    free(pr);
}

void rollout_output_free(RolloutOutput *o, int rows) {
    if (o->comp) completions_free(o->comp, rows);
    free(o->comp);
    for (int i = 0; o->prompt_ids && i < rows; i++)
        free(o->prompt_ids[i]);
    for (int i = 0; o->env_mask && i < rows; i++)
        free(o->env_mask[i]);
    free(o->prompt_ids), free(o->prompt_lens), free(o->env_mask);
    json_decref(o->columns);
    memset(o, 0, sizeof *o);
}

/* A list of plain int lists (validated by the helpers) as rows of ids. */
static void read_rows(PyObject *list, int rows, int32_t **ids, int *lens) {
    for (int i = 0; i < rows; i++) {
        PyObject *row = PyList_GET_ITEM(list, i);
        Py_ssize_t n = PyList_GET_SIZE(row);
        ids[i] = xmalloc((size_t)(n ? n : 1) * sizeof **ids);
        for (Py_ssize_t t = 0; t < n; t++)
            ids[i][t] = (int32_t)PyLong_AsLong(PyList_GET_ITEM(row, t));
        lens[i] = (int)n;
    }
}

/* TRL's contract: the validated (prompt_ids, completion_ids, env_mask, extra) tuple. */
static int read_trl(PythonRollout *pr, PyObject *t, int rows, RolloutOutput *o) {
    o->prompt_ids = xcalloc((size_t)rows, sizeof *o->prompt_ids);
    o->prompt_lens = xcalloc((size_t)rows, sizeof *o->prompt_lens);
    read_rows(PyTuple_GET_ITEM(t, 0), rows, o->prompt_ids, o->prompt_lens);
    int32_t **ids = xcalloc((size_t)rows, sizeof *ids);
    int *lens = xcalloc((size_t)rows, sizeof *lens);
    read_rows(PyTuple_GET_ITEM(t, 1), rows, ids, lens);
    for (int i = 0; i < rows; i++)
        o->comp[i] = (Completion){.ids = ids[i], .len = lens[i]};
    free(ids);
    PyObject *mask = PyTuple_GET_ITEM(t, 2);
    if (mask != Py_None) {
        o->env_mask = xcalloc((size_t)rows, sizeof *o->env_mask);
        for (int i = 0; i < rows; i++) {
            PyObject *row = PyList_GET_ITEM(mask, i);
            o->env_mask[i] = xmalloc((size_t)(lens[i] ? lens[i] : 1));
            for (int k = 0; k < lens[i]; k++)
                o->env_mask[i][k] = (uint8_t)PyLong_AsLong(PyList_GET_ITEM(row, k));
        }
    }
    free(lens);
    PyObject *extra = PyTuple_GET_ITEM(t, 3);
    if (PyDict_Size(extra) > 0) {
        o->columns = py_to_json(extra, "the rollout's extra fields");
        if (!o->columns) return err_prefix("rollout function %s", pr->spec);
    }
    return 0;
}

/* Axolotl's guide: completion strings, tokenised as TRL tokenises completion text. */
static int read_axolotl(PythonRollout *pr, PyObject *list, int rows, RolloutOutput *o) {
    int max = pr->cfg->grpo.max_completion_length;
    for (int i = 0; i < rows; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(list, i), &len);
        int32_t *ids;
        size_t n;
        if (!s) return py_error_set("rollout function %s: completion %d", pr->spec, i);
        if (tokenizer_encode(pr->tok, s, (size_t)len, false, &ids, &n) != 0)
            return err_prefix("rollout function %s: tokenising completion %d", pr->spec, i);
        if ((int)n >= max) {
            n = (size_t)max; /* cut at max_completion_length: truncated */
        } else if (pr->eos_id >= 0) {
            ids = xrealloc(ids, (n + 1) * sizeof *ids);
            ids[n++] = pr->eos_id; /* the rollout finished it */
        }
        o->comp[i] = (Completion){.ids = ids, .len = (int)n};
    }
    return 0;
}

/* The function's argument: per completion row, the dataset row (Axolotl's guide) or its
 * prompt (TRL). New reference. */
static PyObject *prompts_arg(const PythonRollout *pr, const GrpoDataset *ds, const size_t *idx,
                             int n_prompts, int G) {
    PyObject *list = PyList_New((Py_ssize_t)n_prompts * G);
    for (int i = 0; list && i < n_prompts * G; i++) {
        const json_t *row = json_array_get(ds->rows, idx[i / G]);
        PyObject *v = py_from_json(pr->trl ? json_object_get(row, "prompt") : row);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

int python_rollout_run(PythonRollout *pr, GrpoRollout *engine, const GrpoDataset *ds,
                       const size_t *idx, int n_prompts, int G, uint64_t stream,
                       const json_t *trainer_state, RolloutOutput *out) {
    int rows = n_prompts * G;
    memset(out, 0, sizeof *out);
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("rollout function %s", pr->spec);
    PyObject *prompts = prompts_arg(pr, ds, idx, n_prompts, G), *result = NULL, *checked = NULL;
    int rc = prompts ? 0 : err_prefix("rollout function %s: the prompts", pr->spec);
    if (rc == 0) {
        PyObject *state_fn = py_support_get("trainer_state");
        PyObject *state_dict = state_fn ? py_from_json(trainer_state) : NULL;
        PyObject *state = state_dict ? PyObject_CallOneArg(state_fn, state_dict) : NULL;
        if (state) PyObject_SetAttrString(pr->trainer, "state", state);
        Py_XDECREF(state_fn), Py_XDECREF(state_dict), Py_XDECREF(state);
        const json_t *step = json_object_get(trainer_state, "global_step");
        rollout_engine_bind(pr, engine, stream, step ? (int64_t)json_integer_value(step) : -1);
        if (PyErr_Occurred())
            result = NULL;
        else if (pr->trl)
            result = PyObject_CallFunctionObjArgs(pr->fn, prompts, pr->trainer, NULL);
        else {
            PyObject *gen = PyObject_GetAttrString(pr->model, "generation_config");
            result = gen ? PyObject_CallFunctionObjArgs(pr->fn, pr->model, pr->processing_class,
                                                        prompts, gen, NULL)
                         : NULL;
            Py_XDECREF(gen);
        }
        rollout_engine_unbind();
        if (!result) rc = py_error_set("rollout function %s failed", pr->spec);
    }
    if (rc == 0) {
        PyObject *args = pr->trl
                             ? Py_BuildValue("(Oii)", result, rows, engine->model->cfg.vocab_size)
                             : Py_BuildValue("(Oi)", result, rows);
        checked = call_helper(pr->trl ? "trl_output" : "axolotl_output", args);
        Py_XDECREF(args);
        if (!checked)
            rc = py_error_set("rollout function %s returned an unusable result", pr->spec);
    }
    if (rc == 0) {
        out->comp = xcalloc((size_t)(rows ? rows : 1), sizeof *out->comp);
        rc = pr->trl ? read_trl(pr, checked, rows, out) : read_axolotl(pr, checked, rows, out);
    }
    Py_XDECREF(prompts), Py_XDECREF(result), Py_XDECREF(checked);
    py_embed_leave(gil);
    if (rc != 0) rollout_output_free(out, rows);
    return rc;
}
