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
};

/* The rows a layer computes, in backend memory: RoPE position of each row (int32, or NULL when
 * the tables were built for these rows, row r's at r) and the (positions, hd/2) tables. */
typedef struct {
    int n;
    const int32_t *positions;
    const float *cos_t, *sin_t;
} DecoderRows;

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
