/* The value types that the kernels of every backend share (kernels/backend.h): how a weight is
 * stored, how rows attend, what the lm_head reports per row, one AdamW step's constants. Plain
 * data, no pointers into a particular kind of memory. */
#ifndef RLHF_KERNELS_TENSOR_TYPES_H
#define RLHF_KERNELS_TENSOR_TYPES_H

#include <stdint.h>

struct Nf4Weight; /* kernels/cpu/nf4.h: bitsandbytes' NF4 blocks (host struct) */

/* A weight matrix (out_dim, in_dim), row-major: fp32, or bf16 for a frozen model kept in bf16
 * (model_store_bf16), or NF4 for a frozen base quantised as QLoRA does (model_store_nf4).
 * Exactly one of the three is set. */
typedef struct {
    const float *f32;
    const uint16_t *bf16;
    const struct Nf4Weight *nf4;
} WeightRef;

/* One of several linears of the same input (backend.h's linears): out (N, out_dim) written =
 * in · W^T (+ bias (out_dim) when not NULL). */
typedef struct {
    float *out;
    WeightRef w;
    const float *bias;
    int out_dim;
} LinearPart;

/* One of several linears' weight gradients over the same input (backend.h's
 * linear_weight_grads): dw (out_dim, in_dim) accumulated += dout^T · in, dbias (out_dim)
 * accumulated += the column sums of dout (N, out_dim); either may be NULL, dw only with W in
 * fp32. */
typedef struct {
    float *dw, *dbias;
    const float *dout;
    WeightRef w;
    int out_dim;
} LinearGradPart;

/* Rows of q/k/v that attend as one sequence. Its own rows start .. start+len-1 are queries and
 * keys; before them every query sees the prefix rows prefix_start .. prefix_start+prefix_len-1:
 * the rows of a prefix this sequence shares with another (a prompt that both responses of a
 * preference pair, or all completions of a GRPO group, continue), computed once. Keys are
 * numbered prefix first, then own rows: own row i is key prefix_len + i and sees keys up to it. */
typedef struct {
    int start, len;
    int prefix_start, prefix_len;
} AttnSegment;

/* The rows n segments name, own and prefix: 1 + the highest (0 for none). */
static inline int attn_segments_rows(const AttnSegment *segs, int n) {
    int rows = 0;
    for (int s = 0; s < n; s++) {
        if (segs[s].start + segs[s].len > rows) rows = segs[s].start + segs[s].len;
        if (segs[s].prefix_start + segs[s].prefix_len > rows)
            rows = segs[s].prefix_start + segs[s].prefix_len;
    }
    return rows;
}

/* The longest segment's own length (0 for none): the query rows a kernel grid must cover. */
static inline int attn_segments_longest(const AttnSegment *segs, int n) {
    int longest = 0;
    for (int s = 0; s < n; s++)
        if (segs[s].len > longest) longest = segs[s].len;
    return longest;
}

/* How attention turns q·k into the scores its softmax takes: s = scale * q·k, then, with
 * softcap > 0, s = softcap * tanh(s / softcap) (Gemma 2's attn_logit_softcapping), before the
 * mask. */
typedef struct {
    float scale, softcap;
} AttnScores;

/* How the lm_head's logits z are finished before the log-softmax: with softcap > 0,
 * z = softcap * tanh(z / softcap) (Gemma 2's final_logit_softcapping); then z *= post_scale
 * (1 / the sampling temperature, or 1). */
typedef struct {
    float softcap, post_scale;
} LogitCap;

/* Per-row statistics of the logits the fused log-prob computes anyway (TRL's DPO metrics): the
 * mean logit over the vocabulary, the entropy of the softmax, and the first index of the
 * largest logit. */
typedef struct {
    float mean_logit, entropy;
    int32_t argmax;
} LogitStats;

/* One AdamW step's constants, as bitsandbytes' CPU kernel uses them (and the fp32 update too). */
typedef struct {
    float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float shrink;   /* 1 - lr * weight_decay, or 1 for a span without decay */
    float neg_step; /* -lr / (1 - beta1^t) */
    float bc2_sqrt; /* sqrt(1 - beta2^t) */
    /* What each gradient is multiplied by as it is read: clip_grad_norm_'s coefficient, or 1
     * (exact: g * 1 = g). The product is rounded to fp32 before it is used, so the update sees
     * the bits a separate scaling pass would have stored. Every constructor must set it. */
    float grad_scale;
} AdamWStepCoefs;

#endif
