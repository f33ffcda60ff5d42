/* The decoder layer of the Llama family, written once: the attention block and the MLP block of
 * hf-formats.md §3.2, with the adapter's terms and the residual adds. Every forward runs it: the
 * batch forward and the training tape (forward.c), the recomputation of a checkpointed layer in
 * the backward, and the incremental forward over a KV cache (forward_cached.c). Those differ only
 * in how a layer's linear products are multiplied (the cached path may use prepacked weights)
 * and how attention finds its keys (the batch's segments, or the cache), which are the two hooks.
 * A new model family changes this file and backward.c's layer_backward, nothing else. */
#ifndef RLHF_MODEL_DECODER_LAYER_H
#define RLHF_MODEL_DECODER_LAYER_H

#include "model/activations.h"
#include "model/model.h"

typedef struct DecoderHooks DecoderHooks;
struct DecoderHooks {
    /* out (n, out_dim) written = in (n, in_dim) · W^T + bias for layer l's linear `mod`, W and
     * bias those of layer_linear (the layer adds the adapter's term after). */
    void (*linear)(const DecoderHooks *h, const Model *m, int l, LoraModule mod, float *out,
                   const float *in, int n);
    /* a->att (n, nh*hd) written: attention of a->q over a->k, a->v (RoPE applied), with the
     * sliding window `window` (0: none). */
    void (*attention)(const DecoderHooks *h, const Model *m, int l, LayerActs *a, int n,
                      int window);
    void *ctx; /* the hooks' own state */
    /* Optional (NULL: `linear` once per product): outs[i] written as `linear` writes the linear
     * mods[i] of the same input, i < count <= LORA_N_MODULES, each with the bits `linear` gives it
     * (the batch forward multiplies them together, packing `in` once). */
    void (*linears)(const DecoderHooks *h, const Model *m, int l, const LoraModule *mods,
                    float *const *outs, int count, const float *in, int n);
};

/* The rows a layer computes, in backend memory: RoPE position of each row (int32, or NULL when
 * the tables were built for these rows, row r's at r) and the (positions, hd/2) tables; Gemma
 * 3's sliding layers read cos_local/sin_local (rope_tables.h's second set; NULL otherwise). */
typedef struct {
    int n;
    const int32_t *positions;
    const float *cos_t, *sin_t;
    const float *cos_local, *sin_local;
} DecoderRows;

/* Whether layer l rotates with the local RoPE tables: a sliding layer of Gemma 3. */
bool layer_rope_local(const ModelConfig *c, int l);

/* The model's RMSNorm (w ⊙ x̂, Gemma's (1 + w) ⊙ x̂) over n rows of c, eps the config's; out may
 * be in. */
void model_rmsnorm(const Model *m, float *out, const float *in, const float *w, int n, int c);

/* Its backward (as backend.h's rmsnorm_backward): din written, dw accumulated (may be NULL). */
void model_rmsnorm_backward(const Model *m, float *din, float *dw, const float *dout,
                            const float *in, const float *w, int n, int c);

/* The MLP's gated activation: act(gate) ⊙ up with SiLU or GELU-tanh (n values); out may alias
 * gate. */
void model_gated_act(const Model *m, float *out, const float *gate, const float *up, size_t n);

/* How the model's attention forms its scores (its own scale, Gemma 2's soft cap), and whether
 * they differ from the backend's plain attention (1/sqrt(hd), no cap), which then serves. */
AttnScores model_attn_scores(const Model *m);
bool model_scores_own(const Model *m);

/* 0 when the model's backend has every op its family needs, else -1 with an error naming the
 * backend (Gemma 2 needs backend.h's Gemma 2 group, which a device backend may leave NULL). */
int model_check_backend_ops(const Model *m);

/* Layer l's matrix `mod` as it is stored, its bias (NULL when none) and its shape. */
void layer_linear(const Model *m, int l, LoraModule mod, WeightRef *w, const float **bias,
                  int *in_dim, int *out_dim);

/* One decoder layer: reads a->x_in, writes a->x_mid and x_out (which may all be one buffer) and
 * the activations of a the backward reads. Allowed aliases in a: q_pre == q, k_pre == k (the
 * q/k norm in place), act == gate (SwiGLU in place). All buffers are backend memory
 * (model_backend(m)). */
void decoder_layer_forward(const Model *m, int l, const DecoderRows *rows,
                           const DecoderHooks *hooks, LayerActs *a, float *x_out);

#endif
