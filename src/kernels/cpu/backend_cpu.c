/* The CPU backend: backend.h's table over the kernels of this room. Memory is malloc'd host
 * memory, every op runs to completion before it returns, so copy is memcpy and sync is nothing.
 * Each entry is a thin adapter: the arithmetic lives in the kernel files, unchanged, so a model
 * computed through the table gives the bits it gave before the table existed. */
#include "kernels/backend.h"

#include "common/error.h"
#include "kernels/cpu/adamw8bit.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <stdlib.h>
#include <string.h>

/* Buffers from this size up (the tape's layer blocks, the scored rows, the logits' tiles) come
 * on huge pages: a training step's activations are gigabytes touched once each, and GRPO frees
 * its tape for the rollout's KV cache every step, so every step first-touches them again; on 4
 * KiB pages that was a fault per page (~6 us each on our VMs: 7.5 s of system time for a 0.5B
 * step's 5 GB), on 2 MiB pages one per 512. */
#define CPU_ALLOC_HUGE_FROM ((size_t)8 << 20)

static void *cpu_alloc(const Backend *be, size_t bytes, const char *what) {
    (void)be;
    return bytes >= CPU_ALLOC_HUGE_FROM ? xmalloc_huge(bytes, what) : xmalloc_checked(bytes, what);
}

static void cpu_free(const Backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_copy(const Backend *be, void *dst, const void *src, size_t bytes, BackendCopy dir) {
    (void)be, (void)dir;
    if (bytes) memcpy(dst, src, bytes);
}

/* Spans from this size up are set by every thread (memset_threads): the step's gradient buffer is
 * zeroed every step (2 GB at 0.5B), 0.17 s on one thread in the step, 0.09-0.10 s on two. */
#define CPU_MEMSET_PARALLEL_FROM ((size_t)16 << 20)

static void cpu_memset(const Backend *be, void *dst, int value, size_t bytes) {
    (void)be;
    if (bytes >= CPU_MEMSET_PARALLEL_FROM)
        memset_threads(dst, value, bytes);
    else if (bytes)
        memset(dst, value, bytes);
}

static void cpu_sync(const Backend *be) {
    (void)be;
}

/* The packed product where the row count suits it (packed_matmul_suits), BLAS otherwise. */
static void cpu_linear(const Backend *be, float *out, const float *in, WeightRef w,
                       const PackedWeight *packed, const float *bias, int n, int in_dim,
                       int out_dim) {
    (void)be;
    if (packed && packed_matmul_suits(n))
        packed_matmul_forward(out, in, packed, bias, n);
    else
        linear_forward(out, in, w, bias, n, in_dim, out_dim);
}

static void cpu_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                                const float *dout, const float *in, WeightRef w, int n, int in_dim,
                                int out_dim) {
    (void)be;
    linear_backward(din, dw, dbias, dout, in, w, n, in_dim, out_dim);
}

static void cpu_linears(const Backend *be, const LinearPart *parts, int count, const float *in,
                        int n, int in_dim) {
    (void)be;
    linears_forward(parts, count, in, n, in_dim);
}

static void cpu_linear_weight_grads(const Backend *be, const LinearGradPart *parts, int count,
                                    const float *in, int n, int in_dim) {
    (void)be;
    linear_weight_grads(parts, count, in, n, in_dim);
}

static void cpu_lora(const Backend *be, float *out, const float *in, const float *A, const float *B,
                     int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                     uint64_t dropout_key) {
    (void)be;
    lora_forward_add(out, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p, dropout_key);
}

static void cpu_lora_backward(const Backend *be, float *din, float *dA, float *dB,
                              const float *dout, const float *in, const float *A, const float *B,
                              int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                              uint64_t dropout_key) {
    (void)be;
    lora_backward(din, dA, dB, dout, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p,
                  dropout_key);
}

static void cpu_rmsnorm(const Backend *be, float *out, const float *in, const float *w, int n,
                        int c, float eps) {
    (void)be;
    rmsnorm_forward(out, in, w, n, c, eps);
}

static void cpu_rmsnorm_backward(const Backend *be, float *din, float *dw, const float *dout,
                                 const float *in, const float *w, int n, int c, float eps) {
    (void)be;
    rmsnorm_backward(din, dw, dout, in, w, n, c, eps);
}

static void cpu_add_rmsnorm(const Backend *be, float *sum, float *out, const float *a,
                            const float *b, const float *w, int n, int c, float eps) {
    (void)be;
    add_rmsnorm_forward(sum, out, a, b, w, n, c, eps);
}

static void cpu_rmsnorm_backward_add(const Backend *be, float *dres, float *dw, const float *dout,
                                     const float *in, const float *w, int n, int c, float eps) {
    (void)be;
    rmsnorm_backward_add(dres, dw, dout, in, w, n, c, eps);
}

static void cpu_rope(const Backend *be, float *x, const int32_t *positions, const float *cos_t,
                     const float *sin_t, int n, int heads, int hd, int rot) {
    (void)be;
    rope_forward(x, positions, cos_t, sin_t, n, heads, hd, rot);
}

static void cpu_rope_backward(const Backend *be, float *dx, const int32_t *positions,
                              const float *cos_t, const float *sin_t, int n, int heads, int hd,
                              int rot) {
    (void)be;
    rope_backward(dx, positions, cos_t, sin_t, n, heads, hd, rot);
}

static void cpu_swiglu(const Backend *be, float *out, const float *gate, const float *up,
                       size_t n) {
    (void)be;
    swiglu_forward(out, gate, up, n);
}

static void cpu_swiglu_backward(const Backend *be, float *dgate, float *dup, const float *dout,
                                const float *gate, const float *up, size_t n) {
    (void)be;
    swiglu_backward(dgate, dup, dout, gate, up, n);
}

static void cpu_swiglu_backward_act(const Backend *be, float *act, float *dgate, float *dup,
                                    const float *dout, const float *gate, const float *up,
                                    size_t n) {
    (void)be;
    swiglu_backward_act(act, dgate, dup, dout, gate, up, n);
}

static void cpu_add(const Backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
    /* simd: out may be a or b (dx += tmp), the same element, which vector lanes keep; without
     * it -O2 (whose cheap cost model adds no run-time overlap check) left this loop scalar */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

static void cpu_scale(const Backend *be, float *x, float f, size_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] *= f;
}

static void cpu_attention(const Backend *be, float *out, const float *q, const float *k,
                          const float *v, const AttnSegment *segs, int n_segs,
                          const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                          int window) {
    (void)be;
    attention_forward(out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads, hd, window);
}

static void cpu_attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const AttnSegment *segs, int n_segs,
                                   const int32_t *seq_index, int n_rows, int n_heads,
                                   int n_kv_heads, int hd, int window) {
    (void)be;
    attention_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, n_heads,
                       n_kv_heads, hd, window);
}

static void cpu_attention_cached(const Backend *be, float *out, const float *q,
                                 const float *k_cache, const float *v_cache, const int32_t *slot,
                                 const int32_t *pos, int n, int max_len, int n_heads,
                                 int n_kv_heads, int hd, int window) {
    (void)be;
    attention_cached_rows(out, q, k_cache, v_cache, slot, pos, n, max_len, n_heads, n_kv_heads, hd,
                          window);
}

static void cpu_logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                        const int32_t *target, WeightRef lm_head, int n, int h, int vocab) {
    (void)be;
    fused_logprob_forward_weights(logp, stats, hidden, target, lm_head, n, h, vocab);
}

static void cpu_logprob_backward(const Backend *be, float *dhidden, float *dlm_head,
                                 const float *dlogp, const float *hidden, const int32_t *target,
                                 WeightRef lm_head, int n, int h, int vocab) {
    (void)be;
    fused_logprob_backward_weights(dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h, vocab);
}

static void cpu_logprob_lse(const Backend *be, float *logp, LogitStats *stats, float *lse,
                            const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                            int h, int vocab) {
    (void)be;
    fused_logprob_forward_lse(logp, stats, lse, hidden, target, lm_head, n, h, vocab);
}

static void cpu_logprob_backward_lse(const Backend *be, float *dhidden, float *dlm_head,
                                     const float *dlogp, const float *lse, const float *hidden,
                                     const int32_t *target, WeightRef lm_head, int n, int h,
                                     int vocab) {
    (void)be;
    fused_logprob_backward_lse(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n, h, vocab);
}

static void cpu_embedding_gather(const Backend *be, float *out, WeightRef table, const int32_t *ids,
                                 int n, int h) {
    (void)be;
    for (int r = 0; r < n; r++) {
        float *dst = out + (size_t)r * h;
        if (table.bf16)
            bf16_widen(dst, table.bf16 + (size_t)ids[r] * h, (size_t)h);
        else
            memcpy(dst, table.f32 + (size_t)ids[r] * h, (size_t)h * sizeof *dst);
    }
}

static void cpu_embedding_scatter_add(const Backend *be, float *dtable, const float *dx,
                                      const int32_t *ids, int n, int h, int32_t skip_id) {
    (void)be;
    for (int r = 0; r < n; r++) {
        if (ids[r] == skip_id) continue;
        float *row = dtable + (size_t)ids[r] * h;
        const float *d = dx + (size_t)r * h;
        for (int j = 0; j < h; j++)
            row[j] += d[j];
    }
}

static void cpu_rows_gather(const Backend *be, float *dst, const float *src, const int32_t *idx,
                            int n, int width) {
    (void)be;
    for (int j = 0; j < n; j++)
        memcpy(dst + (size_t)j * width, src + (size_t)idx[j] * width, (size_t)width * sizeof *dst);
}

static void cpu_rows_scatter_add(const Backend *be, float *dst, const float *src,
                                 const int32_t *idx, int n, int width) {
    (void)be;
    for (int j = 0; j < n; j++) {
        float *d = dst + (size_t)idx[j] * width;
        const float *s = src + (size_t)j * width;
        for (int i = 0; i < width; i++)
            d[i] += s[i];
    }
}

static void cpu_adamw(const Backend *be, float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    (void)be; /* an autocast step's cached packings of p repacked on the way (same bits) */
    adamw_f32_update_repacking(p, m, v, g, numel, c, step_size, inv_bc2_sqrt);
}

static void cpu_adamw8bit(const Backend *be, Q8Moments *q, const Q8Map *m_map, const Q8Map *v_map,
                          float *p, const float *g, const AdamWStepCoefs *c) {
    (void)be;
    adamw8bit_update(q, m_map, v_map, p, g, c);
}

static double cpu_sum_squares(const Backend *be, const float *g, size_t n) {
    (void)be;
    return sum_squares(g, n);
}

/* ---- Gemma 2 ---- */

static void cpu_rmsnorm_1p(const Backend *be, float *out, const float *in, const float *w, int n,
                           int c, float eps) {
    (void)be;
    rmsnorm_1p_forward(out, in, w, n, c, eps);
}

static void cpu_rmsnorm_1p_backward(const Backend *be, float *din, float *dw, const float *dout,
                                    const float *in, const float *w, int n, int c, float eps) {
    (void)be;
    rmsnorm_1p_backward(din, dw, dout, in, w, n, c, eps);
}

static void cpu_geglu_tanh(const Backend *be, float *out, const float *gate, const float *up,
                           size_t n) {
    (void)be;
    geglu_tanh_forward(out, gate, up, n);
}

static void cpu_geglu_tanh_backward(const Backend *be, float *dgate, float *dup, const float *dout,
                                    const float *gate, const float *up, size_t n) {
    (void)be;
    geglu_tanh_backward(dgate, dup, dout, gate, up, n);
}

static void cpu_attention_scored(const Backend *be, float *out, const float *q, const float *k,
                                 const float *v, const AttnSegment *segs, int n_segs,
                                 const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                                 int window, AttnScores sc) {
    (void)be;
    attention_forward_scored(out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads, hd, window,
                             sc);
}

static void cpu_attention_scored_backward(const Backend *be, float *dq, float *dk, float *dv,
                                          const float *dout, const float *q, const float *k,
                                          const float *v, const AttnSegment *segs, int n_segs,
                                          const int32_t *seq_index, int n_rows, int n_heads,
                                          int n_kv_heads, int hd, int window, AttnScores sc) {
    (void)be;
    attention_backward_scored(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, n_heads,
                              n_kv_heads, hd, window, sc);
}

static void cpu_attention_cached_prefixed(const Backend *be, float *out, const float *q,
                                          const float *k_cache, const float *v_cache,
                                          const int32_t *slot, const int32_t *pos,
                                          const int32_t *prefix_slot, const int32_t *prefix_len,
                                          int n, int max_len, int n_heads, int n_kv_heads, int hd,
                                          int window, AttnScores sc) {
    (void)be;
    attention_cached_rows_prefixed(out, q, k_cache, v_cache, slot, pos, prefix_slot, prefix_len, n,
                                   max_len, n_heads, n_kv_heads, hd, window, sc);
}

static void cpu_attention_cached_scored(const Backend *be, float *out, const float *q,
                                        const float *k_cache, const float *v_cache,
                                        const int32_t *slot, const int32_t *pos, int n, int max_len,
                                        int n_heads, int n_kv_heads, int hd, int window,
                                        AttnScores sc) {
    (void)be;
    attention_cached_rows_scored(out, q, k_cache, v_cache, slot, pos, n, max_len, n_heads,
                                 n_kv_heads, hd, window, sc);
}

static void cpu_logprob_capped(const Backend *be, float *logp, LogitStats *stats,
                               const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                               int h, int vocab, LogitCap cap) {
    (void)be;
    fused_logprob_forward_capped(logp, stats, hidden, target, lm_head, n, h, vocab, cap);
}

static void cpu_logprob_capped_backward(const Backend *be, float *dhidden, float *dlm_head,
                                        const float *dlogp, const float *hidden,
                                        const int32_t *target, WeightRef lm_head, int n, int h,
                                        int vocab, LogitCap cap) {
    (void)be;
    fused_logprob_backward_capped(dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h, vocab,
                                  cap);
}

static void cpu_softcap(const Backend *be, float *x, size_t n, float softcap) {
    (void)be;
    softcap_inplace(x, n, softcap);
}

/* A collective wrote weights (ZeRO-1's all-gather): their bf16 packings go, by
 * gemm_bf16_cache.c's invariant 2 rather than by its fingerprint guard. */
static void cpu_written(const Backend *be, const void *p, size_t bytes) {
    (void)be;
    gemm_bf16_weights_changed(p, bytes);
}

static const Backend cpu_backend = {
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .written = cpu_written,
    .sync = cpu_sync,
    .linear = cpu_linear,
    .linear_backward = cpu_linear_backward,
    .lora = cpu_lora,
    .lora_backward = cpu_lora_backward,
    .rmsnorm = cpu_rmsnorm,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope = cpu_rope,
    .rope_backward = cpu_rope_backward,
    .swiglu = cpu_swiglu,
    .swiglu_backward = cpu_swiglu_backward,
    .add = cpu_add,
    .scale = cpu_scale,
    .attention = cpu_attention,
    .attention_backward = cpu_attention_backward,
    .attention_cached = cpu_attention_cached,
    .logprob = cpu_logprob,
    .logprob_backward = cpu_logprob_backward,
    .embedding_gather = cpu_embedding_gather,
    .embedding_scatter_add = cpu_embedding_scatter_add,
    .rows_gather = cpu_rows_gather,
    .rows_scatter_add = cpu_rows_scatter_add,
    .adamw = cpu_adamw,
    .adamw8bit = cpu_adamw8bit,
    .sum_squares = cpu_sum_squares,
    .rmsnorm_1p = cpu_rmsnorm_1p,
    .rmsnorm_1p_backward = cpu_rmsnorm_1p_backward,
    .geglu_tanh = cpu_geglu_tanh,
    .geglu_tanh_backward = cpu_geglu_tanh_backward,
    .attention_scored = cpu_attention_scored,
    .attention_scored_backward = cpu_attention_scored_backward,
    .attention_cached_scored = cpu_attention_cached_scored,
    .attention_cached_prefixed = cpu_attention_cached_prefixed,
    .logprob_capped = cpu_logprob_capped,
    .logprob_capped_backward = cpu_logprob_capped_backward,
    .logprob_lse = cpu_logprob_lse,
    .logprob_backward_lse = cpu_logprob_backward_lse,
    .softcap = cpu_softcap,
    .linears = cpu_linears,
    .linear_weight_grads = cpu_linear_weight_grads,
    .add_rmsnorm = cpu_add_rmsnorm,
    .rmsnorm_backward_add = cpu_rmsnorm_backward_add,
    .swiglu_backward_act = cpu_swiglu_backward_act,
};

const Backend *backend_cpu(void) {
    return &cpu_backend;
}
