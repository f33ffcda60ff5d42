/* What python_rollout.c and python_rollout_module.c share: the opened function, and the engine
 * the Python objects run on while a call is in progress. */
#ifndef RLHF_GRPO_PYTHON_ROLLOUT_INTERNAL_H
#define RLHF_GRPO_PYTHON_ROLLOUT_INTERNAL_H

#include "chat/chat_template.h"
#include "grpo/grpo_rollout.h"
#include "grpo/python_rollout.h"
#include "python/py_embed.h"

#include <stdbool.h>

struct PythonRollout {
    char *spec;      /* "module.fn", for messages */
    PyObject *fn;    /* the user's function */
    bool trl;        /* TRL's contract (else Axolotl's guide) */
    PyObject *model; /* _rlhf_rollout.Model */
    PyObject *processing_class;
    PyObject *trainer; /* _rlhf_rollout.Trainer (TRL's contract) */
    const TrainConfig *cfg;
    const Tokenizer *tok;
    int32_t eos_id, pad_id;
    ChatTemplate *tpl;      /* compiled on the first apply_chat_template */
    json_t *special_tokens; /* what templates see as bos_token, eos_token, ... */
};

/* The module _rlhf_rollout (its Python classes) with the C module _rlhf_engine it imports,
 * made on first use and kept in sys.modules; borrowed. NULL with an error. GIL held. */
PyObject *rollout_module(void);

/* Lends the engine to _rlhf_engine's functions for the call in progress: generation on
 * engine's model and packed weights, or on its generation server (vllm_mode: server; the
 * weights of optimizer step `version` pushed first when the server does not hold them yet; a
 * negative version always pushes), draws from (engine seed, stream) numbered in the order of
 * the calls. Outside bind/unbind they raise RuntimeError. */
void rollout_engine_bind(PythonRollout *pr, GrpoRollout *engine, uint64_t stream, int64_t version);
void rollout_engine_unbind(void);

#endif
