/* CPU kernels for the Llama family's forward and backward passes, fp32 arithmetic (weights may be
 * stored in bf16), OpenMP across rows and BLAS for matrix products. Shapes in comments: N =
 * number of token rows. All reductions run in a fixed order, so results are bitwise reproducible
 * for a given thread count. Each kernel's backward lives in the same file as its forward, so that
 * a change to one is made beside the other. */
#ifndef RLHF_KERNELS_CPU_KERNELS_H
#define RLHF_KERNELS_CPU_KERNELS_H

#include "kernels/tensor_types.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* out (N, out_dim) = in (N, in_dim) · W^T (+ bias), W is (out_dim, in_dim) row-major like
 * torch.nn.Linear.weight; bias may be NULL. `in` and `out` may use row strides. */
void matmul_forward(float *out, const float *in, const float *w, const float *bias, int n,
                    int in_dim, int out_dim);

/* matmul_forward with the weights stored in bf16: widened to fp32 as they are read, the
 * arithmetic fp32. */
void matmul_forward_bf16(float *out, const float *in, const uint16_t *w, const float *bias, int n,
                         int in_dim, int out_dim);

/* matmul_forward for a frozen W stored narrower (bf16 or NF4, matmul_frozen.c): widened to fp32
 * one ~8 MB panel of rows at a time, each panel one BLAS product. */
void frozen_linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n,
                           int in_dim, int out_dim);

/* matmul_forward, matmul_forward_bf16 or frozen_linear_forward, as w is stored. */
void linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n, int in_dim,
                    int out_dim);

/* out (N, out_dim) += bias, per row; nothing when bias is NULL. */
void bias_add_rows(float *out, const float *bias, int n, int out_dim);

/* A weight matrix copied into the layout packed_matmul_forward reads (see packed_matmul.c):
 * for a generate() call that multiplies the same weights by many rows at every decode step.
 * fp32 panels, or bf16 ones (packed_matmul_bf16.c) for a model kept in bf16, or (amx set) no
 * copy of its own: the products run on gemm_bf16's AMX tiles with the packing gemm_bf16's cache
 * keeps of W (packed_matmul_amx.c). Exactly one of the three. */
typedef struct PackedWeight {
    float *panels;
    uint16_t *panels16;
    WeightRef amx; /* f32 or bf16 set: W itself, whose cached packing the products read */
    int in_dim, out_dim;
} PackedWeight;

/* The row counts where packed_matmul_forward beats matmul_forward on the 0.5B shape here, the
 * packing done beforehand (per decode step of all the products, 2 threads): 6 rows 90 vs 162 ms
 * (the few-rows path), 16 rows 167 vs 276, 17 rows 161 vs 307 (BLAS from here), 64 rows 526 vs
 * 606, 128 rows 973 vs 1009. Beyond, BLAS's own copy of W is amortised over enough rows. */
#define PACKED_MATMUL_MIN_ROWS 6
#if defined(__AVX512F__)
/* With AVX-512 the packed kernel (8 x 32 tiles then; 12 x 32 now) outruns OpenBLAS's AVX2 kernels
 * at every size: 896 x 4864 products of 200-8192 rows 456-465 vs 215-243 GFLOP/s (AMD Zen 5, 2
 * threads; the AVX2 kernels are what this workplace's OPENBLAS_CORETYPE=Haswell gives, and
 * OpenBLAS's own AVX-512 ones reach ~467). So a prefill of many prompts multiplies packed weights
 * too. */
#define PACKED_MATMUL_MAX_ROWS INT_MAX
#else
#define PACKED_MATMUL_MAX_ROWS 128
#endif

/* Whether a product of n rows should use packed_matmul_forward. */
bool packed_matmul_suits(int n);

/* Floats a packed copy of an (out_dim, in_dim) matrix takes: a multiple of 16. */
size_t packed_weight_floats(int in_dim, int out_dim);

/* Copies w (out_dim, in_dim) into dst (packed_weight_floats of them, 64-byte aligned) and
 * describes it in p (which does not own dst). */
void packed_weight_fill(PackedWeight *p, float *dst, const float *w, int in_dim, int out_dim);

/* matmul_forward with a packed weight: out (N, out_dim) = in (N, in_dim) · W^T (+ bias), any N
 * (best where packed_matmul_suits). With bf16 panels, packed_matmul_bf16_forward. */
void packed_matmul_forward(float *out, const float *in, const PackedWeight *w, const float *bias,
                           int n);

/* Whether this build multiplies bf16 panels with the CPU's bf16 dot products (AVX512_BF16).
 * Without them packing a bf16 model does not pay: it then multiplies its bf16 weights widened. */
bool packed_bf16_available(void);

/* Values a bf16 packed copy of an (out_dim, in_dim) matrix takes: a multiple of 64. */
size_t packed_weight_bf16_count(int in_dim, int out_dim);

/* packed_weight_fill for a matrix kept in bf16: dst holds packed_weight_bf16_count values,
 * 64-byte aligned. */
void packed_weight_fill_bf16(PackedWeight *p, uint16_t *dst, const uint16_t *w, int in_dim,
                             int out_dim);

/* packed_matmul_forward with bf16 panels: each input rounded to bf16 (nearest, ties to even),
 * each product exact, the sums fp32. */
void packed_matmul_bf16_forward(float *out, const float *in, const PackedWeight *w,
                                const float *bias, int n);

/* Whether the rollout multiplies bf16 products on AMX tiles: gemm_bf16's path is AMX (the
 * default where cpuid finds it; RLHF_GEMM_BF16 or gemm_bf16_force choose another, and then the
 * AVX512_BF16 panels of packed_matmul_bf16.c serve). */
bool packed_amx_available(void);

/* p = the AMX form of W (out_dim, in_dim), fp32 or bf16 (w.nf4 is not taken): p keeps w and
 * makes sure gemm_bf16's cache holds W's packing now (bf16_weight_packed, the forward's W^T),
 * so that the copy's cost falls here and not on the first product. Requires
 * packed_amx_available(). */
void packed_weight_amx(PackedWeight *p, WeightRef w, int in_dim, int out_dim);

/* Whether p is the AMX form (packed_weight_amx). */
bool packed_weight_is_amx(const PackedWeight *p);

/* packed_matmul_forward with the AMX form: each input rounded to bf16 (nearest, ties to even),
 * W's values rounded likewise (bf16 ones as they are), each product exact, the sums fp32 in the
 * AMX tiles' order (32 depth values at a time); fp32 bias added, the output not rounded. */
void packed_matmul_amx_forward(float *out, const float *in, const PackedWeight *w,
                               const float *bias, int n);

/* packed_matmul_amx_forward's product, then out = bf16(out + bias) (bias NULL or out_dim values)
 * as each block is stored (gemm_bf16_rounded): the bits of packed_matmul_amx_forward without its
 * bias, then the bias added and the sum rounded to bf16 in passes of their own, as bf16
 * autocast's linear rounds its output. */
void packed_matmul_amx_forward_rounded(float *out, const float *in, const PackedWeight *w,
                                       const float *bias, int n);

/* dst[i] = the fp32 value of the bf16 src[i] (exact). */
void bf16_widen(float *dst, const uint16_t *src, size_t n);

/* out (N, C) = w ⊙ (in / sqrt(mean(in²) + eps)), per row; in == out is allowed. */
void rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps);

/* out (n) = silu(gate) ⊙ up; out may alias gate. */
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);

/* Rotates, in place, the first half of the first `rot` dims of each head vector against their
 * second half (transformers' rotate_half convention; rot < hd: partial rotary, the other dims
 * pass). x is (N, n_heads, hd); row r uses cos/sin rows positions[r] of the (max_pos, rot/2)
 * tables, or row r itself when positions is NULL (tables built for these rows,
 * rope_build_rows). rope_backward alike. */
void rope_forward(float *x, const int32_t *positions, const float *cos_table,
                  const float *sin_table, int n, int n_heads, int hd, int rot);

/* Causal self-attention over segments of rows. q (N, nh, hd), k/v (N, nkv, hd), out (N, nh, hd).
 * Query head h reads kv head h / (nh/nkv). A query sees its segment's prefix and its own rows up
 * to itself; with window > 0 only the keys whose seq_index (each row's index in its sequence, so
 * that a window counts the padding a packed row no longer holds) is > its own - window. Scores use
 * scale 1/sqrt(hd); softmax in fp32. Rows in no segment are not written. */
void attention_forward(float *out, const float *q, const float *k, const float *v,
                       const AttnSegment *segs, int n_segs, const int32_t *seq_index, int n_heads,
                       int n_kv_heads, int hd, int window);

/* attention_forward with the scores as sc says (scale, Gemma 2's soft cap). */
void attention_forward_scored(float *out, const float *q, const float *k, const float *v,
                              const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                              int n_heads, int n_kv_heads, int hd, int window, AttnScores sc);

/* The n_q query heads that share one kv head, over `len` >= 1 cached positions (decoding): k and
 * v point at the first position's row of the kv head, consecutive positions `stride` floats
 * apart; q and out hold the n_q heads hd floats apart. For each head h,
 * out_h (hd) = softmax(q_h · k_t / sqrt(hd)) · v_t, in fp32. scores: scratch of n_q * len floats.
 */
void attention_over_cache(float *out, const float *q, const float *k, const float *v, int len,
                          size_t stride, int hd, int n_q, float *scores);

/* attention_over_cache with the scores as sc says. */
void attention_over_cache_scored(float *out, const float *q, const float *k, const float *v,
                                 int len, size_t stride, int hd, int n_q, float *scores,
                                 AttnScores sc);

/* attention_over_cache for N query rows (backend.h's attention_cached): row r's query heads
 * attend to positions [first, pos[r]] of slot slot[r] in one layer's cache k_cache / v_cache
 * (slots, max_len, nkv*hd), first = pos[r] - window + 1 when window > 0 (at least 0). */
void attention_cached_rows(float *out, const float *q, const float *k_cache, const float *v_cache,
                           const int32_t *slot, const int32_t *pos, int n, int max_len, int n_heads,
                           int n_kv_heads, int hd, int window);

/* attention_cached_rows with the scores as sc says. */
void attention_cached_rows_scored(float *out, const float *q, const float *k_cache,
                                  const float *v_cache, const int32_t *slot, const int32_t *pos,
                                  int n, int max_len, int n_heads, int n_kv_heads, int hd,
                                  int window, AttnScores sc);

/* attention_cached_rows_scored with row r's positions below prefix_len[r] read from slot
 * prefix_slot[r] (backend.h's attention_cached_prefixed); prefix_len NULL: none. The same bits
 * as with those rows copied into row r's slot. */
void attention_cached_rows_prefixed(float *out, const float *q, const float *k_cache,
                                    const float *v_cache, const int32_t *slot, const int32_t *pos,
                                    const int32_t *prefix_slot, const int32_t *prefix_len, int n,
                                    int max_len, int n_heads, int n_kv_heads, int hd, int window,
                                    AttnScores sc);

/* Fused lm_head + log-softmax + gather. For each of the n_rows rows of `hidden` (row stride
 * h), computes logits = row · lm_head^T (vocab V) and returns
 * logp[i] = logits[target[i]] - logsumexp(logits). Works in tiles of rows x vocabulary with a
 * running log-sum-exp, so a bounded tile of logits (8 MB) exists at a time, independent of
 * sequence length and vocabulary size. */
void fused_logprob_forward(float *logp, const float *hidden, const int32_t *target,
                           const float *lm_head, int n_rows, int h, int vocab);

/* fused_logprob_forward, also writing each row's LogitStats when stats is not NULL. */
void fused_logprob_forward_stats(float *logp, LogitStats *stats, const float *hidden,
                                 const int32_t *target, const float *lm_head, int n_rows, int h,
                                 int vocab);

/* fused_logprob_forward_stats with an lm_head stored in fp32 or bf16. */
void fused_logprob_forward_weights(float *logp, LogitStats *stats, const float *hidden,
                                   const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                   int vocab);

/* fused_logprob_forward_weights with the logits finished by cap (soft cap, 1/T) before the
 * log-softmax; the statistics are those of the finished logits. */
void fused_logprob_forward_capped(float *logp, LogitStats *stats, const float *hidden,
                                  const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                  int vocab, LogitCap cap);

/* fused_logprob_forward_weights (no cap) that also writes lse[i] (n_rows floats), row i's
 * log-sum-exp, for fused_logprob_backward_lse to take over instead of recomputing it. */
void fused_logprob_forward_lse(float *logp, LogitStats *stats, float *lse, const float *hidden,
                               const int32_t *target, WeightRef lm_head, int n_rows, int h,
                               int vocab);

/* Rows per tile used by fused_logprob_forward (tiles also split the vocabulary). */
int fused_logprob_chunk_rows(int vocab);

/* ---- backward passes: gradients are accumulated (+=) into the d* outputs for weights and
 * written (=) for inputs, unless stated otherwise ---- */

/* din (N, in_dim) = dout · W; dw (out_dim, in_dim) += dout^T · in; dbias (out_dim) += column
 * sums of dout. din, dw or dbias may be NULL when not wanted. */
void matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int n, int in_dim, int out_dim);

/* dbias (out_dim) += the column sums of dout (N, out_dim), each summed over the rows in order
 * (matmul_backward's dbias). */
void bias_grad_add(float *dbias, const float *dout, int n, int out_dim);

/* linear_forward of each part over one input (backend.h's linears): fp32 W over more rows than
 * the few-rows path takes are multiplied by one gemm_f32_shared, `in` packed once; each out has
 * the bits linear_forward gives it. */
void linears_forward(const LinearPart *parts, int count, const float *in, int n, int in_dim);

/* matmul_backward's dw and dbias of each part over one input (backend.h's
 * linear_weight_grads): the dw products by one gemm_f32_shared (`in` packed once); the bits of
 * matmul_backward(NULL, dw, dbias, ...) per part. */
void linear_weight_grads(const LinearGradPart *parts, int count, const float *in, int n,
                         int in_dim);

/* matmul_backward with W as it is stored (matmul_frozen.c): fp32, or frozen and narrower (bf16,
 * NF4),
 * then widened panel by panel and dw must be NULL. */
void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     WeightRef w, int n, int in_dim, int out_dim);

/* dst (rows, in_dim) written = rows row0 .. row0 + rows - 1 of W (out_dim, in_dim) in fp32,
 * widened from how W is stored. */
void weight_rows_widen(float *dst, WeightRef w, size_t row0, int rows, int in_dim);

/* din (N, C) = d/din of rmsnorm_forward; dw (C) += its weight gradient. din may alias dout. */
void rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                      int n, int c, float eps);

/* sum (N, C) = a + b, then out (N, C) = rmsnorm_forward(sum) in the same pass, each with the bits
 * of those two ops; sum may alias a or b, out overlaps none of them. */
void add_rmsnorm_forward(float *sum, float *out, const float *a, const float *b, const float *w,
                         int n, int c, float eps);

/* dres (N, C) += rmsnorm_backward's din, dw (C) += its weight gradient: the bits of
 * rmsnorm_backward into a scratch din followed by dres = dres + din. dres overlaps neither dout
 * nor in. */
void rmsnorm_backward_add(float *dres, float *dw, const float *dout, const float *in,
                          const float *w, int n, int c, float eps);

/* dgate, dup (n) from dout and the forward inputs. dgate may alias dout. */
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n);

/* swiglu_backward, and act (n) = swiglu_forward(gate, up) in the same pass, each with the bits of
 * those two. dgate may alias dout; act overlaps none of the others. */
void swiglu_backward_act(float *act, float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);

/* In place: turns the gradient with respect to rope_forward's output into the gradient with
 * respect to its input (the transposed rotation). */
void rope_backward(float *dx, const int32_t *positions, const float *cos_table,
                   const float *sin_table, int n, int n_heads, int hd, int rot);

/* LoRA on a linear layer: out (N, out_dim) += scaling * (drop(in) A^T) B^T, A (r, in_dim),
 * B (out_dim, r). drop() is inverted dropout with probability dropout_p (0: none) whose mask is a
 * pure function of dropout_key and the element's index, so the backward regenerates it. */
void lora_forward_add(float *out, const float *in, const float *A, const float *B, int n,
                      int in_dim, int out_dim, int r, float scaling, float dropout_p,
                      uint64_t dropout_key);

/* Its backward: din (N, in_dim) += the LoRA branch's input gradient; dA, dB accumulated (each
 * may be NULL). The base layer's gradient is the caller's (frozen weights need only din). */
void lora_backward(float *din, float *dA, float *dB, const float *dout, const float *in,
                   const float *A, const float *B, int n, int in_dim, int out_dim, int r,
                   float scaling, float dropout_p, uint64_t dropout_key);

/* Gradients of attention_forward over n_rows rows: dq (N, nh, hd) written for the segments'
 * rows, dk and dv (N, nkv, hd) for every row (zero where no query looks). The probabilities are
 * recomputed block by block (nothing is kept from the forward). Work is split by (segment, kv
 * head); a segment's share of its prefix's dk/dv is summed apart and added after, segment by
 * segment, so every sum runs in a fixed order: reproducible for any thread count. */
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const AttnSegment *segs, int n_segs,
                        const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads, int hd,
                        int window);

/* Gradient of sum_i dlogp[i] * logp[i] (logp as fused_logprob_forward computes it):
 * dhidden (n_rows, h) is written, dlm_head (V, h) accumulated. Recomputes the logits tile by
 * tile, so memory stays bounded as in the forward. */
void fused_logprob_backward(float *dhidden, float *dlm_head, const float *dlogp,
                            const float *hidden, const int32_t *target, const float *lm_head,
                            int n_rows, int h, int vocab);

/* fused_logprob_backward with an lm_head stored in fp32 or (frozen, dlm_head NULL) bf16. */
void fused_logprob_backward_weights(float *dhidden, float *dlm_head, const float *dlogp,
                                    const float *hidden, const int32_t *target, WeightRef lm_head,
                                    int n_rows, int h, int vocab);

/* fused_logprob_backward_weights of fused_logprob_forward_capped's log-probs. */
void fused_logprob_backward_capped(float *dhidden, float *dlm_head, const float *dlogp,
                                   const float *hidden, const int32_t *target, WeightRef lm_head,
                                   int n_rows, int h, int vocab, LogitCap cap);

/* fused_logprob_backward_capped with each logit's gradient dz (fp32) rounded to bf16 before both
 * products, which then multiply bf16 values in fp32: bf16 autocast's lm_head backward where no
 * bf16 GEMM runs (backend_autocast.c rule 4; torch's logits are bf16, so is their gradient), as
 * autocast_logprob_backward rounds it on gemm_bf16. hidden and lm_head as the caller rounded them.
 */
void fused_logprob_backward_bf16_dz(float *dhidden, float *dlm_head, const float *dlogp,
                                    const float *hidden, const int32_t *target, WeightRef lm_head,
                                    int n_rows, int h, int vocab, LogitCap cap);

/* fused_logprob_backward_bf16_dz without a cap, given lse as fused_logprob_backward_lse is. */
void fused_logprob_backward_bf16_dz_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                        const float *lse, const float *hidden,
                                        const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                        int vocab);

/* fused_logprob_backward_weights given lse, each row's log-sum-exp as fused_logprob_forward_lse
 * wrote it for the same hidden rows and lm_head: the first of the backward's three passes over
 * the lm_head (2 x n_rows x vocab x h FLOPs) is skipped. Bitwise the gradients
 * fused_logprob_backward_weights gives where its recomputed log-sum-exp equals lse (it does when
 * the forward ran without stats; with them, its sums may differ in the last bit). */
void fused_logprob_backward_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                const float *lse, const float *hidden, const int32_t *target,
                                WeightRef lm_head, int n_rows, int h, int vocab);

/* Gradients of attention_forward_scored (attention_backward with the scores as sc says). */
void attention_backward_scored(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const AttnSegment *segs, int n_segs,
                               const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads,
                               int hd, int window, AttnScores sc);

/* out (N, C) = (1 + w) ⊙ (in / sqrt(mean(in²) + eps)) (Gemma's RMSNorm, 1 + w in fp32); in ==
 * out is allowed. rmsnorm_1p_backward as rmsnorm_backward, with the same dw. */
void rmsnorm_1p_forward(float *out, const float *in, const float *w, int n, int c, float eps);
void rmsnorm_1p_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                         int n, int c, float eps);

/* out (n) = gelu_tanh(gate) ⊙ up (torch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh);
 * out may alias gate. The backward as swiglu_backward's. */
void geglu_tanh_forward(float *out, const float *gate, const float *up, size_t n);
void geglu_tanh_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);

/* x (n) = softcap * tanh(x / softcap) in place (Gemma 2's final logits when sampling). */
void softcap_inplace(float *x, size_t n, float softcap);

/* One torch AdamW step on numel fp32 values (backend.h's adamw). */
void adamw_f32_update(float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);

/* adamw_f32_update on the calling thread alone (no parallel region): a thread of its caller's
 * region updates its share. The same bits. */
void adamw_f32_update_serial(float *p, float *m, float *v, const float *g, size_t numel,
                             const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);

/* adamw_f32_update (the same bits) on the values [p, p + numel) of one tensor, which also packs
 * the tensor's cached bf16 packings again where it is a matrix gemm_bf16's cache holds
 * (gemm_bf16_cache.c, invariant 7): row block by row block, each packed while its updated values
 * are in the updating thread's cache, where a repack at the next product would read the whole
 * matrix again from memory (the bf16 step of the 0.5B shape repacks 2 GB of weights). */
void adamw_f32_update_repacking(float *p, float *m, float *v, const float *g, size_t numel,
                                const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);

/* Σ g[i]² over n values, in double, summed in an order fixed by n alone: the same bits for any
 * thread count and vector width. */
double sum_squares(const float *g, size_t n);

#endif
