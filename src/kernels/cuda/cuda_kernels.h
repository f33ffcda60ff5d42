/* The CUDA backend's own kernels, callable from C (issue 29): the ops of kernels/backend.h's
 * table that are not cuBLASLt products. Built by nvcc for Hopper (sm_90a) into rlhf_cuda with
 * RLHF_WITH_CUDA, and from the same sources by the host compiler into rlhf_cuda_emu (cuda-emu,
 * emu/cuda_emu.h); tests/cuda/test_backend_ops.c checks each against backend_cpu on both.
 *
 * Common contract:
 *  1. Pointers are device memory; calls are asynchronous on `stream` (a cudaStream_t, NULL: the
 *     default stream). Each returns 0, or the cudaError_t of a failed launch.
 *  2. Semantics, shapes and aliasing are those of the backend.h op named; int32 index arrays are
 *     `const int *`.
 *  3. fp32 accumulation, every sum in a tree or order fixed by the shapes, no float atomics: two
 *     runs give the same bits. */
#ifndef RLHF_KERNELS_CUDA_CUDA_KERNELS_H
#define RLHF_KERNELS_CUDA_CUDA_KERNELS_H

#include "kernels/tensor_types.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* backend.h's rmsnorm: out (n, c) = w ⊙ in / sqrt(mean(in²) + eps) per row; out may be in. One
 * block per row. */
int cuda_rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps,
                         void *stream);
/* backend.h's rmsnorm_backward: din (n, c) written (may alias dout), dw (c) accumulated (may be
 * NULL). rstd_scratch: n floats of device memory the call may overwrite. */
int cuda_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                          int n, int c, float eps, float *rstd_scratch, void *stream);

/* backend.h's rope / rope_backward, in place on x (n, heads, hd), the first rot dims of a head
 * (rot even, <= hd; tables rot/2 wide); positions may be NULL. */
int cuda_rope_forward(float *x, const int *positions, const float *cos_table,
                      const float *sin_table, int n, int heads, int hd, int rot, void *stream);
int cuda_rope_backward(float *dx, const int *positions, const float *cos_table,
                       const float *sin_table, int n, int heads, int hd, int rot, void *stream);

/* backend.h's swiglu / swiglu_backward over n values. */
int cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n, void *stream);
int cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n, void *stream);

/* backend.h's embedding_gather: exactly one of table_f32, table_bf16 (bf16 bits) is set. */
int cuda_embedding_gather(float *out, const float *table_f32, const uint16_t *table_bf16,
                          const int *ids, int n, int h, void *stream);
/* backend.h's embedding_scatter_add (rows in order per column; skip_id -1: none). */
int cuda_embedding_scatter_add(float *dtable, const float *dx, const int *ids, int n, int h,
                               int skip_id, void *stream);

/* backend.h's rows_gather (dst row j = src row idx[j]) and rows_scatter_add (dst row idx[j] +=
 * src row j, j ascending per column). */
int cuda_rows_gather(float *dst, const float *src, const int *idx, int n, int width, void *stream);
int cuda_rows_scatter_add(float *dst, const float *src, const int *idx, int n, int width,
                          void *stream);

/* backend.h's add (out may alias a or b) and scale (in place) over n values. */
int cuda_add(float *out, const float *a, const float *b, size_t n, void *stream);
int cuda_scale(float *x, float f, size_t n, void *stream);

/* backend.h's attention forward: causal over the segments (segs: n_segs AttnSegment in device
 * memory; max_len: the longest segment's len, from the host), GQA, window > 0 a sliding window
 * over seq_index. hd <= CUDA_ATTENTION_MAX_HD, n_heads a multiple of n_kv_heads, else
 * cudaErrorInvalidValue. out written for the segments' rows only. */
#define CUDA_ATTENTION_MAX_HD 256
int cuda_attention_forward(float *out, const float *q, const float *k, const float *v,
                           const AttnSegment *segs, int n_segs, int max_len, const int *seq_index,
                           int n_heads, int n_kv_heads, int hd, int window, void *stream);
/* backend.h's attention_backward: dq written for the segments' rows, dk, dv (n_rows, nkv, hd)
 * written for every row (zero where no query looks). stats_scratch: 2 * n_rows * n_heads floats
 * of device memory the call may overwrite. Limits as cuda_attention_forward's. */
int cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const AttnSegment *segs, int n_segs,
                            int max_len, const int *seq_index, int n_rows, int n_heads,
                            int n_kv_heads, int hd, int window, float *stats_scratch, void *stream);
/* backend.h's attention_cached: query row r (q, out (n, nh, hd)) over positions
 * [max(0, pos[r] - window + 1) (window > 0) or 0, pos[r]] of KV cache slot slot[r]; k_cache,
 * v_cache (slots, max_len, nkv*hd). Limits as cuda_attention_forward's. */
int cuda_attention_cached(float *out, const float *q, const float *k_cache, const float *v_cache,
                          const int *slot, const int *pos, int n, int max_len, int n_heads,
                          int n_kv_heads, int hd, int window, void *stream);

/* backend.h's adamw: one torch AdamW step on numel values (c read on the host at the call). */
int cuda_adamw(float *p, float *m, float *v, const float *g, size_t numel, const AdamWStepCoefs *c,
               float step_size, float inv_bc2_sqrt, void *stream);

/* backend.h's sum_squares: *out (one device double) written = Σ g[i]². partials:
 * CUDA_SUM_SQUARES_PARTIALS floats of device memory the call may overwrite. */
#define CUDA_SUM_SQUARES_PARTIALS 128
int cuda_sum_squares(double *out, const float *g, size_t n, float *partials, void *stream);

/* ---- multi-tensor optimizer ops (backend.h's sum_squares_multi, adamw_multi): one table of
 * tensors in device memory, its launch plan filled on the host by the *_plan function. Every
 * tensor's result is the bits of the per-tensor kernel above, whatever the other tensors. ---- */

/* One tensor of cuda_sum_squares_multi: g, n set by the caller; first_block (its first partial)
 * and blocks (cuda_sum_squares' partition of n) by cuda_sum_squares_multi_plan. */
typedef struct {
    const float *g;
    size_t n;
    int first_block, blocks;
} CudaSumSqTensor;
/* Plans table[0 .. count) (host memory; count >= 1): returns the partials (blocks of the first
 * launch) the call needs, at most count * CUDA_SUM_SQUARES_PARTIALS. */
int cuda_sum_squares_multi_plan(CudaSumSqTensor *table, int count);
/* *out (one device double) written = Σ_t s_t over t ascending from 0.0 in double, s_t the value
 * cuda_sum_squares writes for tensor t: the bits of a host loop over cuda_sum_squares. Three
 * launches, no atomics. table: the planned count entries, in device memory; partials: the plan's
 * value of floats, tensor_sums: count doubles, both device memory the call may overwrite. */
int cuda_sum_squares_multi(double *out, const CudaSumSqTensor *table, int count, int partials_n,
                           float *partials, double *tensor_sums, void *stream);

/* One tensor of cuda_adamw_multi: p, m, v, g, numel, shrink (its c->shrink) set by the caller;
 * first_chunk by cuda_adamw_multi_plan. */
typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t numel;
    float shrink;
    size_t first_chunk;
} CudaAdamWTensor;
/* Plans table[0 .. count) (host memory): returns the chunks of CUDA_ADAMW_CHUNK values the
 * tensors split into (a tensor's last chunk may be short; an empty tensor has none). */
#define CUDA_ADAMW_CHUNK 4096
size_t cuda_adamw_multi_plan(CudaAdamWTensor *table, int count);
/* cuda_adamw on every tensor of table (the planned count entries, device memory; chunks the
 * plan's value) with its own shrink, in one launch: the same bits per value. */
int cuda_adamw_multi(const CudaAdamWTensor *table, int count, size_t chunks,
                     const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt, void *stream);

/* backend.h's rope_qk: cuda_rope_forward (backward != 0: cuda_rope_backward) on q (n, q_heads,
 * hd) and on k (n, k_heads, hd) in one launch, the bits of the two calls. */
int cuda_rope_qk(float *q, float *k, const int *positions, const float *cos_table,
                 const float *sin_table, int n, int q_heads, int k_heads, int hd, int rot,
                 int backward, void *stream);

/* LoRA's dropout (kernels/cpu/lora.c's mask, bit for bit): y = in[i] * (u(key, i) < p ? 0 :
 * 1/(1-p)); out[i] written = y, or with accumulate out[i] += y. */
int cuda_lora_dropout(float *out, const float *in, size_t n, float p, uint64_t key, int accumulate,
                      void *stream);

/* out (n) written = the bf16 bits of in widened to fp32. */
int cuda_bf16_widen(float *out, const uint16_t *in, size_t n, void *stream);

/* QLoRA's NF4 base (nf4.cu; kernels/cpu/nf4.h's layout, its arrays in device memory): values
 * first .. first+count-1 of the flattened matrix dequantised into out32 (fp32, bit for bit
 * nf4_dequantize's) or, when out32 is NULL, out16 (those values rounded to bf16, nearest even).
 * map: the 256 values of the signed dynamic map the absmax codes index (q8_map_dynamic);
 * codebook: nf4_values (16 floats, host memory, passed by value). */
int cuda_nf4_dequantize(float *out32, uint16_t *out16, const uint8_t *packed,
                        const uint8_t *qabsmax, const float *absmax2, float offset,
                        const float *map, const float *codebook, size_t first, size_t count,
                        void *stream);

/* bf16 autocast's roundings (narrow.cu), each value to the nearest bf16 with ties to even, a NaN
 * to the quiet NaN 0x7fc0, bit for bit as kernels/cpu/autocast.h's bf16_narrow and
 * bf16_round_copy:
 *  cuda_bf16_narrow: out (n) written = the bf16 bits of in;
 *  cuda_bf16_round:  out (n) written = in rounded, as fp32; out may be in;
 *  cuda_bf16_split:  part (n) written = the bf16 bits of rest, and rest (n) -= their value
 *                    (exact), so that calling it j times writes j bf16 parts whose sum plus the
 *                    remaining rest is the original rest: three parts hold an fp32 value to
 *                    within 2^-24 of it, the lm_head backward's fp32 dlogits as bf16 operands. */
int cuda_bf16_narrow(uint16_t *out, const float *in, size_t n, void *stream);
int cuda_bf16_round(float *out, const float *in, size_t n, void *stream);
int cuda_bf16_split(uint16_t *part, float *rest, size_t n, void *stream);

/* The running log-sum-exp of one row of the fused lm_head over the vocabulary chunks seen so far
 * (kernels/cpu/fused_logprob.c's RunningLse): max m, sum = Σ exp(z - m), ez = Σ exp(z - m)(z - m),
 * zsum = Σ z, argmax the first index of the largest logit, target_logit the target's logit once
 * its chunk was seen. */
typedef struct {
    float max, target_logit;
    double sum, zsum, ez;
    int argmax;
} CudaLseRow;
/* st (rows) written: the state before any chunk. */
int cuda_lse_init(CudaLseRow *st, int rows, void *stream);
/* Folds one chunk into st: logits (rows, cols) of row stride ld hold vocabulary columns
 * c0 .. c0+cols-1; target (rows) the rows' target ids. Chunks come in ascending c0. */
int cuda_lse_chunk(CudaLseRow *st, const float *logits, int ld, int rows, int cols, int c0,
                   const int *target, void *stream);
/* logp (rows) written = target_logit - logsumexp; stats (rows, may be NULL) written, as
 * backend.h's logprob. */
int cuda_lse_finish(float *logp, LogitStats *stats, const CudaLseRow *st, int rows, int vocab,
                    void *stream);
/* In place on one chunk (as cuda_lse_chunk's) after every chunk was folded into st: logits into
 * dlogits = dlogp[r] ([j = target[r]] - softmax_j). */
int cuda_dlogits(float *logits, int ld, const CudaLseRow *st, const float *dlogp, const int *target,
                 int rows, int cols, int c0, void *stream);

/* backend.h's kv_cache_write: row r of k and v (n, kvd) written at position pos[r] of slot
 * slot[r] of one layer's caches (slots, max_len, kvd). One launch for both. */
int cuda_kv_cache_write(float *k_cache, float *v_cache, const float *k, const float *v,
                        const int *slot, const int *pos, int n, int max_len, int kvd, void *stream);

#ifdef __cplusplus
}
#endif

#endif
