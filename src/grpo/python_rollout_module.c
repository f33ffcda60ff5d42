/* The Python side of trl.rollout_func (python_rollout.h): the C module _rlhf_engine, which
 * gives the call in progress this run's tokenizer, chat template and generation, and the module
 * _rlhf_rollout, Python classes over it shaped as the objects rollout functions are written
 * against (a transformers model and tokenizer, TRL's trainer). */
#include "grpo/python_rollout_internal.h"

#include "common/error.h"
#include "data/template_choice.h"
#include "grpo/vllm_server.h"
#include "python/py_error.h"
#include "python/py_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROLLOUT_MODULE "_rlhf_rollout"
#define ENGINE_MODULE  "_rlhf_engine"

/* The call in progress (pr NULL outside one). */
static struct {
    PythonRollout *pr;
    GrpoRollout *engine;
    uint64_t seed;       /* the generation batch's: engine seed and stream */
    uint64_t next_first; /* the stream number of the next completion this call generates */
    int64_t version;     /* the optimizer step whose weights a server must hold */
} bound;

void rollout_engine_bind(PythonRollout *pr, GrpoRollout *engine, uint64_t stream, int64_t version) {
    bound.pr = pr, bound.engine = engine, bound.next_first = 0, bound.version = version;
    bound.seed = engine->seed * 0x9E3779B97F4A7C15ull + stream;
}

void rollout_engine_unbind(void) {
    memset(&bound, 0, sizeof bound);
}

static int need_bound(void) {
    if (bound.pr) return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    "rlhf.c's model and tokenizer work only while the rollout function runs "
                    "(they were kept past the call)");
    return -1;
}

/* Our error message as a Python RuntimeError (it reaches the rollout function). */
static PyObject *raise_err(void) {
    PyErr_SetString(PyExc_RuntimeError, err_msg());
    return NULL;
}

static PyObject *ids_to_list(const int32_t *ids, size_t n) {
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++)
        PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromLong(ids[i]));
    return list;
}

/* A list of ints as ids (malloc'd; never NULL on success). -1 with a Python exception. */
static int list_to_ids(PyObject *seq, const char *what, int32_t **ids, size_t *n) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *ids = xmalloc((size_t)(len ? len : 1) * sizeof **ids);
    *n = (size_t)len;
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            free(*ids);
            Py_DECREF(fast);
            return -1;
        }
        if (v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%s: token id %ld out of range", what, v);
            free(*ids);
            Py_DECREF(fast);
            return -1;
        }
        (*ids)[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *engine_encode(PyObject *self, PyObject *args) {
    (void)self;
    const char *text;
    Py_ssize_t len;
    int add;
    if (!PyArg_ParseTuple(args, "s#p", &text, &len, &add) || need_bound()) return NULL;
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(bound.pr->tok, text, (size_t)len, add, &ids, &n) != 0) return raise_err();
    PyObject *list = ids_to_list(ids, n);
    free(ids);
    return list;
}

static PyObject *engine_decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *seq;
    int skip;
    if (!PyArg_ParseTuple(args, "Op", &seq, &skip) || need_bound()) return NULL;
    int32_t *ids;
    size_t n;
    if (list_to_ids(seq, "decode", &ids, &n) != 0) return NULL;
    char *text;
    size_t len;
    int rc = tokenizer_decode(bound.pr->tok, ids, n, skip, &text, &len);
    free(ids);
    if (rc != 0) return raise_err();
    PyObject *s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
    free(text);
    return s;
}

/* The run's chat template (chat_template / chat_template_jinja, else the tokenizer's), compiled
 * on first use. */
static int load_template(PythonRollout *pr) {
    if (pr->tpl) return 0;
    ChatTemplateSource src = {0};
    char *text = NULL;
    int rc = chat_template_source_load(pr->cfg->tokenizer_config, &src);
    if (rc == 0) pr->special_tokens = json_incref(src.special_tokens);
    const char *choice = pr->cfg->chat_template ? pr->cfg->chat_template : "tokenizer_default";
    if (rc == 0) rc = template_choice_text(choice, pr->cfg->chat_template_jinja, &src, &text);
    if (rc == 0) rc = chat_template_compile(text, strlen(text), &pr->tpl);
    free(text);
    chat_template_source_free(&src);
    return rc;
}

/* A Python value as JSON, None as NULL. -1 with a Python exception. */
static int optional_json(PyObject *o, const char *what, json_t **out) {
    *out = NULL;
    if (o == Py_None) return 0;
    *out = py_to_json(o, what);
    if (*out) return 0;
    PyErr_SetString(PyExc_TypeError, err_msg());
    return -1;
}

static PyObject *engine_apply_chat_template(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *messages, *tools, *documents, *kwargs;
    int add_generation_prompt, continue_final;
    if (!PyArg_ParseTuple(args, "OOOppO", &messages, &tools, &documents, &add_generation_prompt,
                          &continue_final, &kwargs) ||
        need_bound())
        return NULL;
    if (load_template(bound.pr) != 0) return raise_err();
    json_t *m = NULL, *t = NULL, *d = NULL, *k = NULL;
    PyObject *result = NULL;
    if (optional_json(messages, "conversation", &m) == 0 &&
        optional_json(tools, "tools", &t) == 0 && optional_json(documents, "documents", &d) == 0 &&
        optional_json(kwargs, "kwargs", &k) == 0) {
        ChatApplyArgs a = {.messages = m,
                           .tools = t,
                           .documents = d,
                           .add_generation_prompt = add_generation_prompt,
                           .continue_final_message = continue_final,
                           .special_tokens = bound.pr->special_tokens,
                           .kwargs = k};
        ChatRenderResult res;
        if (!json_is_array(m))
            PyErr_SetString(PyExc_TypeError, "apply_chat_template: expected a list of messages");
        else if (chat_template_apply(bound.pr->tpl, &a, &res) != 0)
            raise_err();
        else {
            result = PyUnicode_DecodeUTF8(res.text, (Py_ssize_t)res.len, "replace");
            chat_render_result_free(&res);
        }
    }
    json_decref(m), json_decref(t), json_decref(d), json_decref(k);
    return result;
}

/* settings[key] as a number when present and not None. -1 with a Python exception. */
static int setting(PyObject *settings, const char *key, double *out) {
    PyObject *v = PyDict_GetItemString(settings, key); /* borrowed */
    if (!v || v == Py_None) return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

/* The sampling settings generate() gets, checked as transformers checks them. */
static int sampling_from(PyObject *settings, SamplingParams *sp, int *max_new) {
    double do_sample = 1, temperature = 1, top_k = 0, top_p = 1, min_p = 0, penalty = 1,
           max_new_tokens = 0;
    if (!PyDict_Check(settings)) {
        PyErr_SetString(PyExc_TypeError, "generate: settings must be a dict");
        return -1;
    }
    PyObject *ds = PyDict_GetItemString(settings, "do_sample");
    if (ds && ds != Py_None) do_sample = PyObject_IsTrue(ds);
    if (setting(settings, "temperature", &temperature) || setting(settings, "top_k", &top_k) ||
        setting(settings, "top_p", &top_p) || setting(settings, "min_p", &min_p) ||
        setting(settings, "repetition_penalty", &penalty) ||
        setting(settings, "max_new_tokens", &max_new_tokens))
        return -1;
    const char *bad = NULL;
    if (!(max_new_tokens >= 1 && max_new_tokens <= 1 << 20)) bad = "max_new_tokens must be >= 1";
    if (do_sample && !(temperature > 0)) bad = "temperature must be > 0";
    if (!(top_p > 0 && top_p <= 1)) bad = "top_p must be in (0, 1]";
    if (!(min_p >= 0 && min_p <= 1)) bad = "min_p must be in [0, 1]";
    if (!(top_k >= 0 && top_k <= 1 << 30)) bad = "top_k must be >= 0";
    if (!(penalty > 0)) bad = "repetition_penalty must be > 0";
    if (bad) {
        PyErr_Format(PyExc_ValueError, "generate: %s", bad);
        return -1;
    }
    *sp = (SamplingParams){.do_sample = do_sample != 0,
                           .temperature = (float)temperature,
                           .top_k = (int)top_k,
                           .top_p = (float)top_p,
                           .min_p = (float)min_p,
                           .repetition_penalty = (float)penalty};
    *max_new = (int)max_new_tokens;
    return 0;
}

/* The completions as Python lists: ids alone, or (ids, logprobs) with_logprobs. */
static PyObject *completions_to_py(const Completion *comp, int rows, bool with_logprobs) {
    PyObject *ids = PyList_New(rows), *lps = with_logprobs ? PyList_New(rows) : NULL;
    for (int i = 0; ids && i < rows; i++)
        PyList_SET_ITEM(ids, i, ids_to_list(comp[i].ids, (size_t)comp[i].len));
    for (int i = 0; lps && i < rows; i++) {
        PyObject *row = PyList_New(comp[i].len);
        for (int t = 0; row && t < comp[i].len; t++)
            PyList_SET_ITEM(row, t,
                            PyFloat_FromDouble(comp[i].logprobs ? comp[i].logprobs[t] : NAN));
        PyList_SET_ITEM(lps, i, row);
    }
    if (!with_logprobs) return ids;
    return ids && lps ? Py_BuildValue("(NN)", ids, lps) : (Py_XDECREF(ids), Py_XDECREF(lps), NULL);
}

/* generate(prompts, n, settings, with_logprobs=False): n completions of each prompt (lists of
 * ids), the stopping EOS included, as lists; completion k of prompt i at i * n + k. With
 * with_logprobs, (completions, each token's log-probability). On the generation server in
 * vllm_mode: server (the same draws), in-process otherwise. */
static PyObject *engine_generate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *prompts, *settings;
    Py_ssize_t n_per;
    int with_logprobs = 0;
    if (!PyArg_ParseTuple(args, "OnO|p", &prompts, &n_per, &settings, &with_logprobs) ||
        need_bound())
        return NULL;
    SamplingParams sp;
    int max_new;
    if (sampling_from(settings, &sp, &max_new) != 0) return NULL;
    if (n_per < 1 || n_per > 1 << 16) {
        PyErr_SetString(PyExc_ValueError, "generate: num_return_sequences must be >= 1");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(prompts, "generate: input_ids must be a list of rows");
    if (!fast) return NULL;
    int n = (int)PySequence_Fast_GET_SIZE(fast), rc = 0;
    int32_t **ids = xcalloc((size_t)(n ? n : 1), sizeof *ids);
    int *lens = xcalloc((size_t)(n ? n : 1), sizeof *lens);
    for (int i = 0; i < n && rc == 0; i++) {
        size_t len;
        rc = list_to_ids(PySequence_Fast_GET_ITEM(fast, i), "generate: input_ids", &ids[i], &len);
        lens[i] = (int)len;
    }
    Py_DECREF(fast);
    PyObject *result = NULL;
    if (rc == 0) {
        GrpoRollout *e = bound.engine;
        int rows = n * (int)n_per;
        Completion *comp = xcalloc((size_t)(rows ? rows : 1), sizeof *comp);
        GenerateOptions opt = {.max_new_tokens = max_new,
                               .eos_ids = &e->eos_id,
                               .n_eos = e->eos_id >= 0,
                               .n_per_prompt = (int)n_per,
                               .sampling = sp,
                               .seed = bound.seed,
                               .first_stream = bound.next_first,
                               .packed = &e->packed};
        bound.next_first += (uint64_t)rows;
        int grc = 0;
        if (n == 0) {
            grc = 0;
        } else if (e->scripted) {
            generate_scripted(e->model->cfg.vocab_size, n, &opt, comp);
        } else if (e->cfg->vllm_server_url) { /* TRL: the rollout's generation on vLLM */
            grc = e->server ? 0 : err_set("vllm_mode: server: no connection to the server");
            if (grc == 0) grc = vllm_server_sync(e->server, e->model, bound.version);
            if (grc == 0)
                grc = vllm_server_generate(e->server, (const int32_t *const *)ids, lens, n, &opt,
                                           comp);
        } else {
            grc = generate(e->model, (const int32_t *const *)ids, lens, n, &opt, comp);
        }
        if (grc != 0) {
            err_prefix("generate");
            raise_err();
        } else {
            result = completions_to_py(comp, rows, with_logprobs);
        }
        completions_free(comp, rows);
        free(comp);
    }
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids), free(lens);
    return result;
}

static PyMethodDef engine_methods[] = {
    {"encode", engine_encode, METH_VARARGS, "encode(text, add_special_tokens) -> ids"},
    {"decode", engine_decode, METH_VARARGS, "decode(ids, skip_special_tokens) -> text"},
    {"apply_chat_template", engine_apply_chat_template, METH_VARARGS,
     "apply_chat_template(messages, tools, documents, add_generation_prompt, "
     "continue_final_message, kwargs) -> text"},
    {"generate", engine_generate, METH_VARARGS,
     "generate(prompts, num_return_sequences, settings, with_logprobs=False) -> completions"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef engine_module = {.m_base = PyModuleDef_HEAD_INIT,
                                           .m_name = ENGINE_MODULE,
                                           .m_doc = "rlhf.c's engine for trl.rollout_func",
                                           .m_size = -1,
                                           .m_methods = engine_methods};

/* Python, because these objects only need to look like transformers' and TRL's to the code
 * that uses them, which Python says in a line where the C API takes a page. */
static const char rollout_source[] =
    "import inspect\n"
    "import types\n"
    "\n"
    "import _rlhf_engine as engine\n"
    "\n"
    "\n"
    "class Ids(list):\n"
    "    \"\"\"Rows of token ids (a list of lists) with the tensor manners rollout code "
    "uses.\"\"\"\n"
    "\n"
    "    @property\n"
    "    def shape(self):\n"
    "        return (len(self), max((len(r) for r in self), default=0))\n"
    "\n"
    "    def tolist(self):\n"
    "        return [list(r) for r in self]\n"
    "\n"
    "    def to(self, *args, **kwargs):\n"
    "        return self\n"
    "\n"
    "    def cpu(self):\n"
    "        return self\n"
    "\n"
    "    def __getitem__(self, index):\n"
    "        item = list.__getitem__(self, index)\n"
    "        return Ids(item) if isinstance(index, slice) else item\n"
    "\n"
    "\n"
    "class BatchEncoding(dict):\n"
    "    \"\"\"transformers' BatchEncoding as rollout code uses it: keys as attributes, "
    ".to().\"\"\"\n"
    "\n"
    "    def __getattr__(self, name):\n"
    "        try:\n"
    "            return self[name]\n"
    "        except KeyError:\n"
    "            raise AttributeError(name) from None\n"
    "\n"
    "    def to(self, *args, **kwargs):\n"
    "        return self\n"
    "\n"
    "\n"
    "def _plain_ids(ids, what):\n"
    "    if hasattr(ids, \"tolist\"):\n"
    "        ids = ids.tolist()\n"
    "    try:\n"
    "        return [int(t) for t in ids]\n"
    "    except (TypeError, ValueError):\n"
    "        raise TypeError(f\"{what}: expected a list of token ids, got {type(ids).__name__}\") "
    "from None\n"
    "\n"
    "\n"
    "def _rows(ids, what):\n"
    "    if hasattr(ids, \"tolist\"):\n"
    "        ids = ids.tolist()\n"
    "    ids = list(ids)\n"
    "    if ids and not isinstance(ids[0], (list, tuple)) and not hasattr(ids[0], \"tolist\"):\n"
    "        return [_plain_ids(ids, what)]\n"
    "    return [_plain_ids(r, what) for r in ids]\n"
    "\n"
    "\n"
    "_SAMPLING = (\"do_sample\", \"temperature\", \"top_k\", \"top_p\", \"min_p\", "
    "\"repetition_penalty\",\n"
    "             \"max_new_tokens\")\n"
    "\n"
    "\n"
    "class GenerationConfig(types.SimpleNamespace):\n"
    "    \"\"\"The run's sampling settings (trl: temperature, top_p, top_k, min_p, "
    "repetition_penalty,\n"
    "    max_completion_length as max_new_tokens), as transformers' GenerationConfig names "
    "them.\"\"\"\n"
    "\n"
    "\n"
    "class ProcessingClass:\n"
    "    \"\"\"The run's tokenizer and chat template, as a transformers tokenizer is used.\"\"\"\n"
    "\n"
    "    padding_side = \"left\"\n"
    "\n"
    "    def __init__(self, special):\n"
    "        for key, value in special.items():\n"
    "            setattr(self, key, value)\n"
    "\n"
    "    def encode(self, text, add_special_tokens=True, **kwargs):\n"
    "        return engine.encode(str(text), bool(add_special_tokens))\n"
    "\n"
    "    def decode(self, token_ids, skip_special_tokens=False, **kwargs):\n"
    "        return engine.decode(_plain_ids(token_ids, \"decode\"), bool(skip_special_tokens))\n"
    "\n"
    "    def batch_decode(self, sequences, skip_special_tokens=False, **kwargs):\n"
    "        return [self.decode(r, skip_special_tokens) for r in _rows(sequences, "
    "\"batch_decode\")]\n"
    "\n"
    "    def __call__(self, text=None, add_special_tokens=True, return_tensors=None, **kwargs):\n"
    "        single = isinstance(text, str)\n"
    "        rows = [self.encode(t, add_special_tokens) for t in ([text] if single else "
    "list(text))]\n"
    "        if single and return_tensors is None:\n"
    "            return BatchEncoding(input_ids=rows[0], attention_mask=[1] * len(rows[0]))\n"
    "        width = max((len(r) for r in rows), default=0)\n"
    "        pad = self.pad_token_id if self.pad_token_id is not None else 0\n"
    "        return BatchEncoding(\n"
    "            input_ids=Ids([[pad] * (width - len(r)) + r for r in rows]),\n"
    "            attention_mask=Ids([[0] * (width - len(r)) + [1] * len(r) for r in rows]),\n"
    "        )\n"
    "\n"
    "    def apply_chat_template(self, conversation, tools=None, documents=None,\n"
    "                            add_generation_prompt=False, continue_final_message=False,\n"
    "                            tokenize=True, return_dict=False, **kwargs):\n"
    "        for key in (\"chat_template\", \"padding\", \"truncation\", \"max_length\", "
    "\"return_tensors\"):\n"
    "            if kwargs.pop(key, None) not in (None, False):\n"
    "                raise ValueError(f\"apply_chat_template: {key} is not supported by rlhf.c\")\n"
    "        text = engine.apply_chat_template(list(conversation), tools, documents,\n"
    "                                          bool(add_generation_prompt),\n"
    "                                          bool(continue_final_message), kwargs)\n"
    "        if not tokenize:\n"
    "            return text\n"
    "        ids = self.encode(text, add_special_tokens=False)\n"
    "        if return_dict:\n"
    "            return BatchEncoding(input_ids=ids, attention_mask=[1] * len(ids))\n"
    "        return ids\n"
    "\n"
    "\n"
    "class Model:\n"
    "    \"\"\"The policy being trained: generate() samples with the current weights.\"\"\"\n"
    "\n"
    "    device = \"cpu\"\n"
    "\n"
    "    def __init__(self, generation_config, pad_token_id):\n"
    "        self.generation_config = generation_config\n"
    "        self._pad = pad_token_id\n"
    "\n"
    "    def generate(self, input_ids=None, attention_mask=None, generation_config=None,\n"
    "                 num_return_sequences=1, **kwargs):\n"
    "        settings = dict(vars(self.generation_config))\n"
    "        if generation_config is not None:\n"
    "            given = generation_config if isinstance(generation_config, dict) else "
    "vars(generation_config)\n"
    "            settings.update({k: v for k, v in given.items() if k in _SAMPLING and v is not "
    "None})\n"
    "        for key in (\"pad_token_id\", \"eos_token_id\", \"use_cache\", \"synced_gpus\"):\n"
    "            kwargs.pop(key, None)\n"
    "        unknown = sorted(k for k in kwargs if k not in _SAMPLING)\n"
    "        if unknown:\n"
    "            raise ValueError(f\"generate: rlhf.c does not support {', '.join(unknown)}\")\n"
    "        settings.update({k: v for k, v in kwargs.items() if v is not None})\n"
    "        rows = _rows(input_ids, \"generate: input_ids\")\n"
    "        masks = _rows(attention_mask, \"generate: attention_mask\") if attention_mask is not "
    "None else None\n"
    "        # left padding (attention_mask 0) is not part of the prompt the engine continues\n"
    "        prompts = [[t for t, m in zip(r, masks[i]) if m] for i, r in enumerate(rows)] if "
    "masks else rows\n"
    "        n = int(num_return_sequences or 1)\n"
    "        new = engine.generate(prompts, n, {k: settings[k] for k in _SAMPLING})\n"
    "        out = [rows[i // n] + c for i, c in enumerate(new)]\n"
    "        width = max((len(r) for r in out), default=0)\n"
    "        return Ids([r + [self._pad] * (width - len(r)) for r in out])\n"
    "\n"
    "\n"
    "class VLLMClient:\n"
    "    \"\"\"TRL's VLLMClient.generate as a rollout function calls it in server mode\n"
    "    (trainer.vllm_client, trainer.vllm_generation.vllm_client): on the generation server,\n"
    "    through the trainer's connection, the policy's weights pushed first. Draws are seeded as\n"
    "    model.generate's (the run's seed, the generation batch, the order of the calls); each\n"
    "    completion ends after the run's EOS.\"\"\"\n"
    "\n"
    "    def __init__(self, base_url):\n"
    "        self.base_url = base_url\n"
    "\n"
    "    def generate(self, prompts, images=None, n=1, repetition_penalty=1.0, temperature=1.0,\n"
    "                 top_p=1.0, top_k=0, min_p=0.0, max_tokens=16, logprobs=0,\n"
    "                 structured_outputs_regex=None, generation_kwargs=None):\n"
    "        if images is not None and any(i is not None for i in images):\n"
    "            raise ValueError(\"vllm_client.generate: images are not supported by rlhf.c\")\n"
    "        if structured_outputs_regex is not None:\n"
    "            raise ValueError(\"vllm_client.generate: structured_outputs_regex is not \"\n"
    "                             \"supported by rlhf.c\")\n"
    "        if logprobs not in (None, 0):\n"
    "            raise ValueError(\"vllm_client.generate: logprobs > 0 (top alternatives) is not "
    "\"\n"
    "                             \"supported by rlhf.c; 0 gives each sampled token's\")\n"
    "        settings = {\"do_sample\": temperature > 0, \"temperature\": temperature,\n"
    "                    \"top_k\": max(int(top_k), 0), \"top_p\": top_p, \"min_p\": min_p,\n"
    "                    \"repetition_penalty\": repetition_penalty, \"max_new_tokens\": "
    "max_tokens}\n"
    "        unknown = sorted(set(generation_kwargs or {}) - set(settings) - {\"max_tokens\"})\n"
    "        if unknown:\n"
    "            raise ValueError(f\"vllm_client.generate: rlhf.c does not support \"\n"
    "                             f\"generation_kwargs {', '.join(unknown)}\")\n"
    "        for key, value in (generation_kwargs or {}).items():\n"
    "            settings[\"max_new_tokens\" if key == \"max_tokens\" else key] = value\n"
    "        # text prompts are tokenised with the special tokens, as vLLM's generate does\n"
    "        rows = [engine.encode(p, True) if isinstance(p, str) else _plain_ids(p, \"prompts\")\n"
    "                for p in prompts]\n"
    "        ids, lps = engine.generate(rows, int(n), settings, True)\n"
    "        with_lp = logprobs is not None\n"
    "        return {\"prompt_ids\": rows, \"completion_ids\": ids,\n"
    "                \"logprobs\": [[[lp] for lp in row] for row in lps] if with_lp else None,\n"
    "                \"logprob_token_ids\": [[[t] for t in row] for row in ids] if with_lp else "
    "None}\n"
    "\n"
    "\n"
    "class Trainer:\n"
    "    \"\"\"What TRL's rollout_func(prompts, trainer) reads of its GRPOTrainer; in vllm_mode:\n"
    "    server also use_vllm, vllm_mode and vllm_client (TRL 1.9 keeps it at\n"
    "    vllm_generation.vllm_client).\"\"\"\n"
    "\n"
    "    def __init__(self, model, processing_class, args, state, server_url=None):\n"
    "        self.model = model\n"
    "        self.processing_class = processing_class\n"
    "        self.args = args\n"
    "        self.state = state\n"
    "        self.num_generations = args.num_generations\n"
    "        self.max_completion_length = args.max_completion_length\n"
    "        self.generation_config = model.generation_config\n"
    "        self.use_vllm = server_url is not None\n"
    "        if server_url is not None:\n"
    "            self.vllm_mode = \"server\"\n"
    "            self.vllm_client = VLLMClient(server_url)\n"
    "            self.vllm_generation = types.SimpleNamespace(mode=\"server\",\n"
    "                                                         vllm_client=self.vllm_client)\n"
    "\n"
    "\n"
    "def contract(fn):\n"
    "    \"\"\"'trl' for fn(prompts, trainer), 'axolotl' for fn(model, processing_class, prompts,\n"
    "    generation_config=None), else TypeError.\"\"\"\n"
    "    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)\n"
    "    params = [p for p in inspect.signature(fn).parameters.values() if p.kind in kinds]\n"
    "    required = [p for p in params if p.default is inspect.Parameter.empty]\n"
    "    if len(required) == 2:\n"
    "        return \"trl\"\n"
    "    if len(required) == 3 or [p.name for p in params[:2]] == [\"model\", "
    "\"processing_class\"]:\n"
    "        return \"axolotl\"\n"
    "    names = \", \".join(p.name for p in params)\n"
    "    raise TypeError(\n"
    "        f\"takes ({names}): a rollout function is fn(prompts, trainer) (TRL) or fn(model, \"\n"
    "        \"processing_class, prompts, generation_config=None) (Axolotl's guide)\")\n"
    "\n"
    "\n"
    "def _row_lists(value, rows, name, what):\n"
    "    if hasattr(value, \"tolist\"):\n"
    "        value = value.tolist()\n"
    "    if not isinstance(value, (list, tuple)):\n"
    "        raise TypeError(f\"{name} must be a list of {rows} lists of {what}, got "
    "{type(value).__name__}\")\n"
    "    if len(value) != rows:\n"
    "        raise ValueError(\n"
    "            f\"{name} has {len(value)} rows for {rows} prompts (one per completion: each "
    "prompt \"\n"
    "            \"comes num_generations times)\")\n"
    "    out = []\n"
    "    for i, row in enumerate(value):\n"
    "        if hasattr(row, \"tolist\"):\n"
    "            row = row.tolist()\n"
    "        if not isinstance(row, (list, tuple)):\n"
    "            raise TypeError(f\"{name}[{i}] must be a list of {what}, got "
    "{type(row).__name__}\")\n"
    "        out.append(list(row))\n"
    "    return out\n"
    "\n"
    "\n"
    "def _token_rows(value, rows, name, vocab):\n"
    "    out = _row_lists(value, rows, name, \"token ids\")\n"
    "    for i, row in enumerate(out):\n"
    "        for t in row:\n"
    "            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:\n"
    "                raise ValueError(f\"{name}[{i}] holds {t!r}, not a token id in [0, "
    "{vocab})\")\n"
    "    return out\n"
    "\n"
    "\n"
    "def trl_output(out, rows, vocab):\n"
    "    \"\"\"TRL's contract: (prompt_ids, completion_ids, env_mask or None, extra "
    "fields).\"\"\"\n"
    "    if not isinstance(out, dict):\n"
    "        raise TypeError(f\"must return a dict (prompt_ids, completion_ids, logprobs, ...), "
    "got \"\n"
    "                        f\"{type(out).__name__}\")\n"
    "    missing = sorted({\"prompt_ids\", \"completion_ids\", \"logprobs\"} - out.keys())\n"
    "    if missing:\n"
    "        raise ValueError(f\"rollout_func must return keys {missing} in its output dict.\")\n"
    "    prompt_ids = _token_rows(out[\"prompt_ids\"], rows, \"prompt_ids\", vocab)\n"
    "    completion_ids = _token_rows(out[\"completion_ids\"], rows, \"completion_ids\", vocab)\n"
    "    for i in range(rows):\n"
    "        if not prompt_ids[i]:\n"
    "            raise ValueError(f\"prompt_ids[{i}] is empty\")\n"
    "        if not completion_ids[i]:\n"
    "            raise ValueError(f\"completion_ids[{i}] is empty\")\n"
    "    lengths = [len(c) for c in completion_ids]\n"
    "    if out[\"logprobs\"] is not None:\n"
    "        for i, row in enumerate(_row_lists(out[\"logprobs\"], rows, \"logprobs\", "
    "\"numbers\")):\n"
    "            if row is not None and len(row) != lengths[i]:\n"
    "                raise ValueError(f\"logprobs[{i}] has {len(row)} values for {lengths[i]} "
    "tokens\")\n"
    "    env_mask = None\n"
    "    extra = {k: v for k, v in out.items() if k not in (\"prompt_ids\", \"completion_ids\", "
    "\"logprobs\")}\n"
    "    if extra.get(\"env_mask\") is not None:\n"
    "        env_mask = _row_lists(extra.pop(\"env_mask\"), rows, \"env_mask\", \"0/1 values\")\n"
    "        for i, row in enumerate(env_mask):\n"
    "            if len(row) != lengths[i]:\n"
    "                raise ValueError(f\"env_mask[{i}] has {len(row)} values for {lengths[i]} "
    "tokens\")\n"
    "            if any(m not in (0, 1) for m in row):\n"
    "                raise ValueError(f\"env_mask[{i}] holds values other than 0 and 1\")\n"
    "            env_mask[i] = [int(m) for m in row]\n"
    "    else:\n"
    "        extra.pop(\"env_mask\", None)\n"
    "    for key, value in extra.items():\n"
    "        if isinstance(value, list) and len(value) != rows:\n"
    "            raise ValueError(f\"field {key!r} has {len(value)} values for {rows} "
    "completions\")\n"
    "        if not isinstance(value, list):\n"
    "            extra[key] = [value] * rows\n"
    "    return prompt_ids, completion_ids, env_mask, extra\n"
    "\n"
    "\n"
    "def axolotl_output(out, rows):\n"
    "    \"\"\"Axolotl's guide: one completion string per prompt row.\"\"\"\n"
    "    if isinstance(out, (str, bytes, dict)) or not hasattr(out, \"__len__\"):\n"
    "        raise TypeError(f\"must return a list of completion strings, got "
    "{type(out).__name__}\")\n"
    "    out = list(out)\n"
    "    if len(out) != rows:\n"
    "        raise ValueError(\n"
    "            f\"returned {len(out)} completions for {rows} prompts (one per prompt row: each "
    "\"\n"
    "            \"dataset prompt comes num_generations times)\")\n"
    "    for i, c in enumerate(out):\n"
    "        if not isinstance(c, str):\n"
    "            raise TypeError(f\"completion {i} is a {type(c).__name__}, not a string\")\n"
    "    return out\n";

PyObject *rollout_module(void) {
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *mod = PyDict_GetItemString(modules, ROLLOUT_MODULE);
    if (mod) return mod;
    if (!PyDict_GetItemString(modules, ENGINE_MODULE)) {
        PyObject *engine = PyModule_Create(&engine_module);
        if (!engine || PyDict_SetItemString(modules, ENGINE_MODULE, engine) != 0) {
            Py_XDECREF(engine);
            py_error_set("rlhf.c's rollout engine module does not load");
            return NULL;
        }
        Py_DECREF(engine);
    }
    PyObject *code = Py_CompileString(rollout_source, "<rlhf.c " ROLLOUT_MODULE ">", Py_file_input);
    if (!code) {
        py_error_set("rlhf.c's rollout objects do not compile");
        return NULL;
    }
    mod = PyImport_ExecCodeModule(ROLLOUT_MODULE, code); /* new; also put in sys.modules */
    Py_DECREF(code);
    if (!mod) {
        py_error_set("rlhf.c's rollout objects do not load");
        return NULL;
    }
    Py_DECREF(mod); /* sys.modules keeps it */
    return mod;
}
