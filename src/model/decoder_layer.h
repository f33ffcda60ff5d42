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

/* sum = a + b, then out = the model's RMSNorm of sum (n rows of c), in one pass where the backend
 * has add_rmsnorm (not for Gemma's (1 + w) norm), else be->add then model_rmsnorm: the same
 * bits either way. sum may alias a or b; out overlaps none of them. */
void model_add_rmsnorm(const Model *m, float *sum, float *out, const float *a, const float *b,
                       const float *w, int n, int c);

/* dres += the din model_rmsnorm_backward would write (dw accumulated as there): one pass where
 * the backend has rmsnorm_backward_add (not for Gemma's norm), else that backward into tmp (n, c,
 * overwritten) and be->add; the same bits either way. dres and tmp overlap neither dout nor in. */
void model_rmsnorm_backward_add(const Model *m, float *dres, float *tmp, float *dw,
                                const float *dout, const float *in, const float *w, int n, int c);

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

/* How a layer meets the norms either side of it in a forward over all the layers. The residual
 * add that ends a layer writes the rows the next layer's input RMSNorm (or the model's final
 * norm) reads at once, so the layer computes that norm in the add's pass (model_add_rmsnorm)
 * and the next layer starts from it:
 *  1. input_normed: a->xn already holds the input norm of a->x_in (the layer before wrote it
 *     as its next_out); the layer does not compute it again.
 *  2. next_norm non-NULL: the layer also writes next_out (n, H) = the model's RMSNorm of x_out
 *     with gain next_norm; next_out is the next layer's xn (or the final hidden states) and
 *     overlaps none of the layer's other buffers but xn, which it may be (xn is dead by then).
 * A NULL chain is a layer on its own: it norms its input and writes x_out alone. */
typedef struct {
    bool input_normed;
    const float *next_norm;
    float *next_out;
} LayerChain;

/* One decoder layer: reads a->x_in (and a->xn, chain rule 1), writes a->x_mid and x_out (which
 * may all be one buffer), the activations of a the backward reads, and chain->next_out (rule 2).
 * Allowed aliases in a: q_pre == q, k_pre == k (the q/k norm in place), act == gate (SwiGLU in
 * place). All buffers are backend memory (model_backend(m)). */
void decoder_layer_forward(const Model *m, int l, const DecoderRows *rows,
                           const DecoderHooks *hooks, const LayerChain *chain, LayerActs *a,
                           float *x_out);

#endif
