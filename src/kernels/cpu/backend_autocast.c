/* The CPU backend under bf16 autocast (bf16: true): backend_cpu's table with the products that
 * torch's CPU autocast runs in bf16 replaced. Settled against torch 2.15 / transformers 5.23
 * (tools/reference/make_autocast_fixtures.py records what a TRL step sees):
 *  - in bf16 (both inputs rounded, fp32 sums, a bf16 result): every nn.Linear (q/k/v/o, gate,
 *    up, down, lm_head), and the attention's q·k^T and p·v products (matmul / sdpa are on
 *    autocast's lower-precision list);
 *  - in fp32: the residual stream (fp32 + bf16 promotes), RMSNorm (transformers upcasts), RoPE
 *    (its cos/sin are fp32, so q and k leave it fp32), the softmax of the attention (eager
 *    attention asks for dtype=float32), the embedding, the losses; weights, gradients and the
 *    optimizer state are fp32 master copies throughout.
 * How closely this follows torch, and why:
 *  1. A linear rounds its input and weight to bf16, sums in fp32, adds the bf16 bias and rounds
 *     the output to bf16: the output is a bf16 tensor in torch, and what later ops read.
 *  2. Its backward rounds the incoming gradient (a bf16 tensor's gradient is bf16) and the
 *     product dX; dW's fp32 sums go into the fp32 gradient unrounded (autocast_linear_backward).
 *  3. Attention rounds q, k and v and its output; its backward rounds dout, q, k, v and the
 *     gradients it writes (dq, dk, dv). Inside, its products round as torch's do where torch
 *     has bf16 tensors: the probabilities P (normalised first) before P·V and P^T·dO, and dS
 *     before dS·K and dS^T·Q (torch's P is the bf16 input of its p·v matmul, dS the gradient of
 *     its bf16 q·k^T output). The scores, the softmax and its statistics, dP = dO·V^T and the
 *     softmax backward stay fp32 (torch rounds the scores and dP too: neither is an operand of
 *     a product here). Where the CPU has AMX (attention_amx.h, when gemm_bf16's path is AMX)
 *     the products run on bf16 tiles; elsewhere on fp32 products of rounded copies
 *     (attention_rounded.c): the same values rounded on every CPU; the sums' order differs, and
 *     AMX's softmax (attention_softmax_avx512.h) has exponentials of its own (last bits).
 *     autocast_attention_exact (autocast.h) keeps P and dS exact instead, as the CUDA backend
 *     does, for the tests that compare the two.
 *  4. The lm_head rounds hidden states and weight, but its logits and the log-softmax stay fp32:
 *     log-probs are fp32 (the rule; torch's own bf16 logits are what make its log-probs
 *     coarse). Its backward rounds hidden, weight and dhidden; dlogp stays fp32. The logits'
 *     gradient is rounded to bf16 before both products, as torch's is (its logits are bf16), on
 *     gemm_bf16 (fused_logprob_autocast.c) and on the sgemm path alike
 *     (fused_logprob_backward_bf16_dz): while the sgemm path kept it fp32, a CPU without AMX
 *     trained other gradients (tiny model, SFT under bf16: 2.9e-3 from AMX's loss and grad_norm,
 *     6e-3 of a gradient's largest) and parted from the device, which rounds it (issue 29).
 *     Each row's log-sum-exp is handed from the forward to the backward (logprob_lse), which
 *     then skips its first pass over the lm_head: the same bits as finding it again.
 *  5. LoRA's branch stays fp32 (its A and B are small; torch would run them in bf16 too).
 * Everything else is backend_cpu's own entry. */
#include "kernels/backend.h"

#include "common/error.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_train.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A rounded copy of n values (the caller frees it). */
static float *rounded(const float *x, size_t n) {
    float *r = xmalloc((n ? n : 1) * sizeof *r);
    bf16_round_copy(r, x, n);
    return r;
}

static void ac_linear(const Backend *be, float *out, const float *in, WeightRef w,
                      const PackedWeight *packed, const float *bias, int n, int in_dim,
                      int out_dim) {
    (void)be;
    if (packed && packed_weight_is_amx(packed) && packed_matmul_suits(n)) {
        /* decoding on AMX tiles (the cache's packing of W, which autocast_linear_forward would
         * read too): the bf16 bias added and the output rounded as each block is stored, the
         * bits of the passes below without their reads and writes of out */
        float *rb = bias ? rounded(bias, (size_t)out_dim) : NULL;
        packed_matmul_amx_forward_rounded(out, in, packed, rb, n);
        free(rb);
        return;
    }
    if (packed && packed->panels16 && packed_matmul_suits(n)) {
        /* decoding with bf16 panels (a model kept in bf16): this very product */
        packed_matmul_forward(out, in, packed, NULL, n);
        if (bias) {
            float *rb = rounded(bias, (size_t)out_dim);
            bias_add_rows(out, rb, n, out_dim);
            free(rb);
        }
        bf16_round_inplace(out, (size_t)n * out_dim);
        return;
    }
    autocast_linear_forward(out, in, w, bias, n, in_dim, out_dim);
}

static void ac_linears(const Backend *be, const LinearPart *parts, int count, const float *in,
                       int n, int in_dim) {
    (void)be;
    autocast_linears_forward(parts, count, in, n, in_dim);
}

static void ac_linear_weight_grads(const Backend *be, const LinearGradPart *parts, int count,
                                   const float *in, int n, int in_dim) {
    (void)be;
    autocast_linear_weight_grads(parts, count, in, n, in_dim);
}

/* Each dout packed once, for its dX product and its dW product (AutocastDout). */
static void ac_linears_backward(const Backend *be, const LinearGradPart *parts, int count,
                                const float *in, float *din, float *tmp, int n, int in_dim) {
    AutocastDout *kept = xmalloc((size_t)(count > 0 ? count : 1) * sizeof *kept);
    for (int i = 0; i < count; i++) {
        autocast_linear_din_kept(i == 0 ? din : tmp, parts[i].dout, parts[i].w, n, in_dim,
                                 parts[i].out_dim, &kept[i]);
        if (i > 0) be->add(be, din, din, tmp, (size_t)n * in_dim);
    }
    autocast_linear_weight_grads_kept(parts, kept, count, in, n, in_dim);
    free(kept);
}

static void ac_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                               const float *dout, const float *in, WeightRef w, int n, int in_dim,
                               int out_dim) {
    (void)be;
    autocast_linear_backward(din, dw, dbias, dout, in, w, n, in_dim, out_dim);
}

/* The attention's rounded copies of q, k, v and (backward) dout, kept between calls: every
 * layer's attention makes them, forward and backward, and fresh buffers of a few MB each cost
 * page faults every time. One set is kept; a call that finds it taken (another thread's
 * attention) makes its own, freed when done. */
enum { COPY_Q, COPY_K, COPY_V, COPY_G, COPIES };

typedef struct {
    float *p[COPIES];
    size_t cap[COPIES]; /* floats each holds */
} AttnCopies;

static AttnCopies kept_copies; /* valid while kept_copies_full */
static bool kept_copies_full;
static pthread_mutex_t kept_copies_lock = PTHREAD_MUTEX_INITIALIZER;

/* Copies holding want[i] floats each (want[i] 0: that one unused). */
static AttnCopies copies_take(const size_t want[COPIES]) {
    AttnCopies c = {0};
    pthread_mutex_lock(&kept_copies_lock);
    if (kept_copies_full) c = kept_copies, kept_copies_full = false;
    pthread_mutex_unlock(&kept_copies_lock);
    for (int i = 0; i < COPIES; i++)
        if (c.cap[i] < want[i]) {
            free(c.p[i]);
            c.p[i] = xmalloc(want[i] * sizeof *c.p[i]);
            c.cap[i] = want[i];
        }
    return c;
}

static void copies_give(AttnCopies *c) {
    pthread_mutex_lock(&kept_copies_lock);
    bool keep = !kept_copies_full;
    if (keep) kept_copies = *c, kept_copies_full = true;
    pthread_mutex_unlock(&kept_copies_lock);
    if (!keep)
        for (int i = 0; i < COPIES; i++)
            free(c->p[i]);
}

/* autocast_attention_exact's setting: -1 until set or read from the environment. */
static _Atomic int attention_exact = -1;

void autocast_attention_exact(bool exact) {
    atomic_store(&attention_exact, exact ? 1 : 0);
}

static bool attention_keeps_p_exact(void) {
    int e = atomic_load(&attention_exact);
    if (e < 0) {
        const char *env = getenv("RLHF_AUTOCAST_ATTENTION");
        if (env && strcmp(env, "exact") != 0 && strcmp(env, "bf16") != 0) {
            /* the backend's ops have no error return; a typo must not train another rule */
            fprintf(stderr, "RLHF_AUTOCAST_ATTENTION=%s: expected exact or bf16\n", env);
            exit(2);
        }
        e = env && strcmp(env, "exact") == 0;
        atomic_store(&attention_exact, e);
    }
    return e == 1;
}

/* The products attention runs on rounded copies of q, k, v (and dout) where AMX does not. */
static const AttnKernel *copies_kernel(bool exact) {
    return exact ? &attention_kernel_fp32 : &attention_kernel_fp32_rounding_a;
}

static void ac_attention_scored(const Backend *be, float *out, const float *q, const float *k,
                                const float *v, const AttnSegment *segs, int n_segs,
                                const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                                int window, AttnScores sc) {
    (void)be;
    bool exact = attention_keeps_p_exact();
    if (!exact && attention_amx_usable()) { /* its products round q, k, v, P as they pack */
        attention_forward_amx(out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads, hd,
                              window, sc);
    } else {
        size_t rows = (size_t)attn_segments_rows(segs, n_segs);
        size_t qn = rows * n_heads * hd, kn = rows * n_kv_heads * hd;
        AttnCopies c = copies_take((size_t[COPIES]){qn + 1, kn + 1, kn + 1, 0});
        bf16_round_copy(c.p[COPY_Q], q, qn);
        bf16_round_copy(c.p[COPY_K], k, kn);
        bf16_round_copy(c.p[COPY_V], v, kn);
        attention_forward_with(copies_kernel(exact), out, c.p[COPY_Q], c.p[COPY_K], c.p[COPY_V],
                               segs, n_segs, seq_index, n_heads, n_kv_heads, hd, window, sc);
        copies_give(&c);
    }
    for (int s = 0; s < n_segs; s++) /* only the rows attention wrote */
        bf16_round_inplace(out + (size_t)segs[s].start * n_heads * hd,
                           (size_t)segs[s].len * n_heads * hd);
}

static void ac_attention(const Backend *be, float *out, const float *q, const float *k,
                         const float *v, const AttnSegment *segs, int n_segs,
                         const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                         int window) {
    ac_attention_scored(be, out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads, hd, window,
                        (AttnScores){1.0f / sqrtf((float)hd), 0.0f});
}

static void ac_attention_scored_backward(const Backend *be, float *dq, float *dk, float *dv,
                                         const float *dout, const float *q, const float *k,
                                         const float *v, const AttnSegment *segs, int n_segs,
                                         const int32_t *seq_index, int n_rows, int n_heads,
                                         int n_kv_heads, int hd, int window, AttnScores sc) {
    (void)be;
    size_t rows = (size_t)n_rows, qn = rows * n_heads * hd, kn = rows * n_kv_heads * hd;
    bool exact = attention_keeps_p_exact();
    if (!exact && attention_amx_usable()) { /* its products round dout, q, k, v, P, dS */
        attention_backward_amx(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, n_heads,
                               n_kv_heads, hd, window, sc);
    } else {
        AttnCopies c = copies_take((size_t[COPIES]){qn + 1, kn + 1, kn + 1, qn + 1});
        float *g = c.p[COPY_G];
        bf16_round_copy(c.p[COPY_Q], q, qn);
        bf16_round_copy(c.p[COPY_K], k, kn);
        bf16_round_copy(c.p[COPY_V], v, kn);
        memset(g, 0, qn * sizeof *g); /* rows in no segment are never read, but stay defined */
        for (int s = 0; s < n_segs; s++) {
            size_t at = (size_t)segs[s].start * n_heads * hd;
            bf16_round_copy(g + at, dout + at, (size_t)segs[s].len * n_heads * hd);
        }
        attention_backward_with(copies_kernel(exact), dq, dk, dv, g, c.p[COPY_Q], c.p[COPY_K],
                                c.p[COPY_V], segs, n_segs, seq_index, n_rows, n_heads, n_kv_heads,
                                hd, window, sc);
        copies_give(&c);
    }
    for (int s = 0; s < n_segs; s++)
        bf16_round_inplace(dq + (size_t)segs[s].start * n_heads * hd,
                           (size_t)segs[s].len * n_heads * hd);
    bf16_round_inplace(dk, kn);
    bf16_round_inplace(dv, kn);
}

static void ac_attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                                  int n_rows, int n_heads, int n_kv_heads, int hd, int window) {
    ac_attention_scored_backward(be, dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows,
                                 n_heads, n_kv_heads, hd, window,
                                 (AttnScores){1.0f / sqrtf((float)hd), 0.0f});
}

/* The lm_head's log-probs (rule 4), and each row's log-sum-exp into lse if not NULL (the
 * hand-over of backend.h's logprob_lse, offered without a cap only). On gemm_bf16 the packing
 * rounds hidden and W; elsewhere rounded fp32 copies go to the sgemm kernels. */
static void logprob_forward(float *logp, LogitStats *stats, float *lse, const float *hidden,
                            const int32_t *target, WeightRef lm_head, int n, int h, int vocab,
                            LogitCap cap) {
    if (gemm_bf16_path() != GEMM_BF16_NONE) {
        if (lse)
            autocast_logprob_forward_lse(logp, stats, lse, hidden, target, lm_head, n, h, vocab);
        else
            autocast_logprob_forward(logp, stats, hidden, target, lm_head, n, h, vocab, cap);
        return;
    }
    float *hr = rounded(hidden, (size_t)n * h), *wr = NULL;
    if (!lm_head.bf16) {
        /* rounded once into an fp32 copy, which the fused kernel multiplies by sgemm directly
         * (a bf16 copy would be widened again tile by tile: a DPO step took 1.75x the fp32
         * step's time that way); the backward holds the same copy, so the peak is unchanged.
         * A frozen bf16 lm_head holds bf16 values already: widened tile by tile, no copy. */
        wr = rounded(lm_head.f32, (size_t)vocab * h);
        lm_head = (WeightRef){.f32 = wr};
    }
    if (lse)
        fused_logprob_forward_lse(logp, stats, lse, hr, target, lm_head, n, h, vocab);
    else
        fused_logprob_forward_capped(logp, stats, hr, target, lm_head, n, h, vocab, cap);
    free(wr);
    free(hr);
}

/* Its backward; lse: what logprob_forward wrote for the same rows, or NULL to find it again (the
 * same bits: the same products of the same rounded factors). dhidden is rounded, as the gradient
 * of a bf16 cast. */
static void logprob_backward(float *dhidden, float *dlm_head, const float *dlogp, const float *lse,
                             const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                             int h, int vocab, LogitCap cap) {
    if (gemm_bf16_path() != GEMM_BF16_NONE) {
        if (lse)
            autocast_logprob_backward_lse(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n,
                                          h, vocab);
        else
            autocast_logprob_backward(dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h,
                                      vocab, cap);
    } else {
        float *hr = rounded(hidden, (size_t)n * h), *wr = NULL;
        if (!lm_head.bf16) { /* as logprob_forward */
            wr = rounded(lm_head.f32, (size_t)vocab * h);
            lm_head = (WeightRef){.f32 = wr};
        }
        if (lse)
            fused_logprob_backward_bf16_dz_lse(dhidden, dlm_head, dlogp, lse, hr, target, lm_head,
                                               n, h, vocab);
        else
            fused_logprob_backward_bf16_dz(dhidden, dlm_head, dlogp, hr, target, lm_head, n, h,
                                           vocab, cap);
        free(wr);
        free(hr);
    }
    bf16_round_inplace(dhidden, (size_t)n * h);
}

static void ac_logprob_capped(const Backend *be, float *logp, LogitStats *stats,
                              const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                              int h, int vocab, LogitCap cap) {
    (void)be;
    logprob_forward(logp, stats, NULL, hidden, target, lm_head, n, h, vocab, cap);
}

static void ac_logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                       const int32_t *target, WeightRef lm_head, int n, int h, int vocab) {
    ac_logprob_capped(be, logp, stats, hidden, target, lm_head, n, h, vocab,
                      (LogitCap){0.0f, 1.0f});
}

static void ac_logprob_capped_backward(const Backend *be, float *dhidden, float *dlm_head,
                                       const float *dlogp, const float *hidden,
                                       const int32_t *target, WeightRef lm_head, int n, int h,
                                       int vocab, LogitCap cap) {
    (void)be;
    logprob_backward(dhidden, dlm_head, dlogp, NULL, hidden, target, lm_head, n, h, vocab, cap);
}

static void ac_logprob_backward(const Backend *be, float *dhidden, float *dlm_head,
                                const float *dlogp, const float *hidden, const int32_t *target,
                                WeightRef lm_head, int n, int h, int vocab) {
    ac_logprob_capped_backward(be, dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h, vocab,
                               (LogitCap){0.0f, 1.0f});
}

/* The lm_head's log-sum-exp handed from the forward to the backward (backend.h), as the CPU's fp32
 * backend hands it: the backward skips its first pass over the lm_head. */
static void ac_logprob_lse(const Backend *be, float *logp, LogitStats *stats, float *lse,
                           const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                           int h, int vocab) {
    (void)be;
    logprob_forward(logp, stats, lse, hidden, target, lm_head, n, h, vocab, (LogitCap){0.0f, 1.0f});
}

static void ac_logprob_backward_lse(const Backend *be, float *dhidden, float *dlm_head,
                                    const float *dlogp, const float *lse, const float *hidden,
                                    const int32_t *target, WeightRef lm_head, int n, int h,
                                    int vocab) {
    (void)be;
    logprob_backward(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n, h, vocab,
                     (LogitCap){0.0f, 1.0f});
}

static Backend autocast_backend;
static pthread_once_t autocast_once = PTHREAD_ONCE_INIT;

static void autocast_init(void) {
    autocast_backend = *backend_cpu();
    autocast_backend.name = "cpu-bf16-autocast";
    autocast_backend.linear = ac_linear;
    autocast_backend.linear_backward = ac_linear_backward;
    autocast_backend.attention = ac_attention;
    autocast_backend.attention_backward = ac_attention_backward;
    autocast_backend.logprob = ac_logprob;
    autocast_backend.logprob_backward = ac_logprob_backward;
    autocast_backend.attention_scored = ac_attention_scored;
    autocast_backend.attention_scored_backward = ac_attention_scored_backward;
    autocast_backend.logprob_capped = ac_logprob_capped;
    autocast_backend.logprob_capped_backward = ac_logprob_capped_backward;
    /* its lm_head multiplies in bf16: its own hand-over, not backend_cpu's fp32 one */
    autocast_backend.logprob_lse = ac_logprob_lse;
    autocast_backend.logprob_backward_lse = ac_logprob_backward_lse;
    /* its own products of one input, the CPU's being fp32: each product's bits as ac_linear
     * (packed NULL) and ac_linear_backward give it, the shared input packed once */
    autocast_backend.linears = ac_linears;
    autocast_backend.linear_weight_grads = ac_linear_weight_grads;
    autocast_backend.linears_backward = ac_linears_backward;
}

const Backend *backend_cpu_autocast(void) {
    pthread_once(&autocast_once, autocast_init);
    return &autocast_backend;
}
