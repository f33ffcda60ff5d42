/* A Llama-family causal LM held in fp32 (or, frozen, in bf16: model_store_bf16): one contiguous
 * parameter block in state-dict order (hf-formats.md §3.4) with named pointers into it, llm.c
 * style. The same table of (name, shape, offset) drives loading, saving and, later, gradients and
 * optimizer state. */
#ifndef RLHF_MODEL_MODEL_H
#define RLHF_MODEL_MODEL_H

#include "io/safetensors.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/lora.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float *input_norm;      /* (H) */
    float *wq, *bq;         /* (nh*hd, H), (nh*hd) or NULL */
    float *wk, *bk;         /* (nkv*hd, H), (nkv*hd) or NULL */
    float *wv, *bv;         /* (nkv*hd, H), (nkv*hd) or NULL */
    float *wo, *bo;         /* (H, nh*hd), (H) or NULL */
    float *q_norm, *k_norm; /* (hd), (hd); Qwen3 only */
    float *post_norm;       /* (H) the MLP's input norm (Gemma: pre_feedforward_layernorm) */
    /* Gemma 2: the norms of the attention block's and the MLP's outputs (post_attention_layernorm,
     * post_feedforward_layernorm), (H) each; NULL otherwise. */
    float *attn_out_norm, *mlp_out_norm;
    float *w_gate, *b_gate; /* (I, H), (I) or NULL */
    float *w_up, *b_up;     /* (I, H), (I) or NULL */
    float *w_down, *b_down; /* (H, I), (H) or NULL */
    /* A model kept in bf16 (model_store_bf16): its matrices, and the fp32 pointers above of the
     * matrices are NULL (norms and biases stay fp32 pointers). NULL otherwise. */
    const uint16_t *wq16, *wk16, *wv16, *wo16, *w_gate16, *w_up16, *w_down16;
    /* A base quantised to NF4 (model_store_nf4): its matrices (the fp32 and bf16 pointers of the
     * matrices are then NULL). NULL otherwise. */
    const struct Nf4Weight *wq4, *wk4, *wv4, *wo4, *w_gate4, *w_up4, *w_down4;
} LayerWeights;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    size_t numel;
    size_t offset; /* into Model.params, in floats */
} ParamInfo;

typedef struct {
    ModelConfig cfg;
    float *params; /* every parameter, contiguous, state-dict order */
    size_t n_params;
    ParamInfo *param_info; /* one entry per tensor, state-dict order */
    int n_param_tensors;
    float *embed;      /* (V, H) */
    float *final_norm; /* (H) */
    float *lm_head;    /* (V, H); the same memory as embed when tied */
    /* Kept in bf16 (model_store_bf16): every weight in params16 (laid out as params was, which
     * is then NULL), the embedding and lm_head read from there (embed/lm_head NULL) and the
     * norms and biases widened back into params_small. A frozen model only: nothing trains,
     * saves or merges it. */
    uint16_t *params16;
    float *params_small;
    /* Quantised to NF4 (model_store_nf4): the 7 matrices of every layer, layer by layer in
     * LoraModule order, owned; params16 then holds only the embedding and an untied lm_head.
     * NULL otherwise. */
    struct Nf4Weight *nf4;
    const uint16_t *embed16, *lm_head16;
    /* model_load_frozen's untied bf16 embedding left in its safetensors file (embed_map.c):
     * embed16 points into this read-only mapping, not into params16. NULL otherwise. */
    void *embed_map;
    size_t embed_map_len;
    LayerWeights *layers;    /* [L] */
    const LoraAdapter *lora; /* an adapter applied on top of the weights; NULL: none */
    /* The log-probs read off the model (model_token_logprobs, the training tape) are those of
     * softmax(logits / logit_temperature): GRPO scores completions at the temperature they were
     * sampled with, as TRL does. 0 or 1: the logits as they are. Sampling ignores it. */
    float logit_temperature;
    /* Where the model computes (kernels/backend.h); NULL: the CPU backend. The forward and
     * backward passes allocate their activations there and call only its table. */
    const Backend *backend;
} Model;

/* The backend m computes on: m->backend, or the CPU one. */
static inline const Backend *model_backend(const Model *m) {
    return m->backend ? m->backend : backend_cpu();
}

/* Gives back the resident pages of an embedding left in its file (Model.embed_map) once a
 * gather has copied its rows out: what stays resident is then one forward's rows, not every row
 * the run has touched. Nothing when the embedding is held in memory. Safe while other threads
 * read the table (a dropped page is read again from the file). */
void model_release_embedding(const Model *m);

/* Keeps the weights of a loaded model in bf16 (rounded to nearest even, as torch's
 * .to(torch.bfloat16)); computations stay fp32. Halves the model's memory; for a model that is
 * only read (a DPO reference with bf16: true, `rlhf generate --bf16`). An attached adapter stays
 * fp32. Returns 0, or -1 with an error (out of memory, already bf16); the model is unchanged
 * then. */
int model_store_bf16(Model *m);

/* Quantises the layer matrices of a loaded fp32 model to NF4 as bitsandbytes does for QLoRA
 * (kernels/cpu/nf4.h: blocks of 64, double quantisation), from their values rounded to bf16
 * first when round_bf16 (a model loaded with torch_dtype=bfloat16); the embedding, lm_head,
 * norms and biases are kept as model_store_bf16 keeps them. Frozen, like a bf16 model; the fp32
 * weights are freed. Returns 0, or -1 with an error (out of memory, not fp32); the model is
 * unchanged then. */
int model_store_nf4(Model *m, bool round_bf16);

/* Loads a model directory (as model_load) straight into frozen storage: what model_load and
 * then model_store_bf16 (nf4 false) or model_store_nf4(m, round_bf16) (nf4 true) compute, the
 * same values bit for bit (params16 may be laid out more compactly), without ever holding the
 * fp32 weights: one layer matrix at a time in fp32 at most. Returns 0, or -1 with an error as
 * model_load's (the model then empty). */
int model_load_frozen(Model *m, const char *dir, bool nf4, bool round_bf16);

/* model_store_bf16 for all but the layer matrices, which the caller has moved elsewhere (their
 * fp32 pointers are set NULL): the embedding and an untied lm_head in a bf16 block of their own
 * (params16), norms and biases widened from bf16 into params_small; params freed. Returns 0, or
 * -1 with an error (out of memory; the model unchanged). */
int model_store_bf16_except_matrices(Model *m);

/* A layer's matrix `name` (wq, ..., w_down) as it is stored (fp32, bf16 or NF4). */
#define LAYER_WEIGHT(w, name) ((WeightRef){(w)->name, (w)->name##16, (w)->name##4})

/* The lm_head as it is stored (fp32 or bf16). */
static inline WeightRef model_lm_head(const Model *m) {
    return (WeightRef){.f32 = m->lm_head, .bf16 = m->lm_head16};
}

/* The factor the lm_head's input rows are multiplied by: logits / T = (row / T) · W^T. */
static inline float model_logit_scale(const Model *m) {
    return m->logit_temperature > 0 ? 1.0f / m->logit_temperature : 1.0f;
}

/* The lm_head's logit finish with a final soft cap (Gemma 2): the cap, then 1/T. */
static inline LogitCap model_logit_cap(const Model *m) {
    return (LogitCap){m->cfg.final_softcap, model_logit_scale(m)};
}

/* Gemma's embedding normalizer sqrt(H), in the embedding's dtype as transformers applies it
 * (embed_scale.to(weight.dtype)): fp32, or rounded to bf16 when the embedding is kept in bf16. */
float model_embed_scale(const Model *m);

/* Multiplies n rows of h floats (backend memory) by model_logit_scale (nothing to do when it is
 * 1). */
void model_scale_logit_rows(const Model *m, float *rows, size_t n, size_t h);

/* Loads config.json and the safetensors weights of a Hugging Face model directory,
 * converting to fp32. Every expected tensor must be present with the shape config.json
 * implies; unexpected tensors are errors (they mean the config does not describe the file),
 * except the ones transformers itself ignores (rotary inv_freq buffers, lm_head when tied).
 * Returns 0, or -1 with an error naming the file and tensor. */
int model_load(Model *m, const char *dir);

/* Allocates a model of the given configuration with zeroed parameters (takes ownership of
 * cfg's allocations). */
void model_init_empty(Model *m, ModelConfig *cfg);

void model_free(Model *m);

/* Points m->params and every weight pointer into it (embed, lm_head, final_norm, each layer's
 * matrices, biases and norms) at the same offsets of `params` instead, and returns the array
 * they pointed into before. Nothing is copied or freed: the caller fills `params` (n_params
 * floats, e.g. a device backend's copy of the weights) and owns both arrays; rebasing back to
 * the returned array undoes it. An fp32 model only (not model_store_bf16's). */
float *model_rebase_params(Model *m, float *params);

/* model_rebase_params for a model kept in bf16 by model_store_bf16 (not NF4, not
 * model_load_frozen's compact layout): params16 holds n_params values laid out as params was,
 * params_small the norms and biases (model_bf16_small_count floats). Points params16, embed16,
 * lm_head16 and each layer's matrices at the same offsets of `half`, and params_small and every
 * norm and bias pointer at the same offsets of `small`; returns the arrays they pointed into in
 * *old_half and *old_small. Nothing is copied or freed: the caller fills both arrays (a device
 * backend's copies) and owns all four; rebasing back to the old arrays undoes it. */
void model_rebase_bf16(Model *m, uint16_t *half, float *small, uint16_t **old_half,
                       float **old_small);
size_t model_bf16_small_count(const Model *m);

/* The parameter called `name`, or NULL. */
const ParamInfo *model_find_param(const Model *m, const char *name);

/* Writes every parameter as `dtype` (ST_F32, ST_BF16 or ST_F16) to one safetensors file at
 * `path`, named as transformers names them (no lm_head when tied), atomically.
 * Returns 0, or -1 with an error. */
int model_save_safetensors(const Model *m, const char *path, SafetensorsDtype dtype);

/* transformers' default max_shard_size, "5GB" (decimal). */
#define MODEL_DEFAULT_MAX_SHARD_BYTES 5000000000ull

/* Writes the weights into `dir` as transformers' save_pretrained does (hf-formats.md §1.6):
 * tensors taken in state-dict order and packed greedily into shards of at most max_shard_bytes
 * (a tensor larger than that gets a shard of its own); one shard is written as
 * model.safetensors, several as model-0000i-of-0000K.safetensors plus
 * model.safetensors.index.json. Weight files of an earlier save that the new one does not use
 * are removed. Returns 0, or -1 with an error. */
int model_save_weights(const Model *m, const char *dir, SafetensorsDtype dtype,
                       uint64_t max_shard_bytes);

/* Folds an adapter into the weights (W += scaling * B A, as PEFT's merge_and_unload) so that
 * the model computes alone what base + adapter computed. Returns 0, or -1 when the adapter was
 * made for another shape. */
int lora_merge(Model *m, const LoraAdapter *a);

#endif
