/* bf16 autocast on the CPU (bf16: true): the products of matmul_autocast.c and the backend
 * table of backend_autocast.c that uses them. What runs in bf16 and what stays fp32 follows
 * torch's CPU autocast under HF Trainer's bf16=True; docs/architecture.md, "Mixed precision". */
#ifndef RLHF_KERNELS_CPU_AUTOCAST_H
#define RLHF_KERNELS_CPU_AUTOCAST_H

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* dst[i] = src[i] rounded to the nearest bf16 (ties to even), as an fp32; dst may be src. */
void bf16_round_copy(float *dst, const float *src, size_t n);

/* Whether bf16 autocast's training attention (backend_autocast.c rule 3) keeps the
 * probabilities P and the scores' gradient dS exact in its products (fp32 products on rounded
 * q, k, v, dout), as the CUDA backend's attention does (attention_mma.h: three bf16 parts), instead
 * of rounding them to bf16 as torch's autocast does (the default, on every CPU). Process-wide.
 * Until this is called, RLHF_AUTOCAST_ATTENTION in the environment decides: "exact", or
 * "bf16" (the default; any other value is reported and exits 2). For tests that compare the
 * device with the CPU (their rank processes inherit the variable). */
void autocast_attention_exact(bool exact);

/* bf16_round_copy in place. */
void bf16_round_inplace(float *x, size_t n);

/* dst[i] = src[i] rounded to the nearest bf16 (ties to even), stored as bf16. */
void bf16_narrow(uint16_t *dst, const float *src, size_t n);

/* out (N, out_dim) written = bf16(bf16(in) · bf16(W)^T + bf16(bias)): torch's autocast linear.
 * W fp32, bf16 or (a frozen QLoRA base) NF4; bias may be NULL. */
void autocast_linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n,
                             int in_dim, int out_dim);

/* autocast_linear_forward for each part (parts[i].out, w, bias, out_dim) of the same in
 * (N, in_dim), each with the bits it gets alone; on gemm_bf16 in is packed once for them all
 * (q/k/v, gate/up: backend.h's linears). */
void autocast_linears_forward(const LinearPart *parts, int count, const float *in, int n,
                              int in_dim);

/* Its backward, W as the forward's. g = bf16(dout); din (N, in_dim) written = bf16(g · bf16(W));
 * dw (out_dim, in_dim) accumulated += g^T · bf16(in), fp32 sums not rounded; dbias accumulated
 * += column sums of g. Any of din, dw, dbias may be NULL; dw must be NULL for a frozen bf16 or
 * NF4 W (backend.h's linear_backward). */
void autocast_linear_backward(float *din, float *dw, float *dbias, const float *dout,
                              const float *in, WeightRef w, int n, int in_dim, int out_dim);

/* For each part, autocast_linear_backward's dw and dbias (din NULL) with its bits; on gemm_bf16
 * in is packed once as every dw product's B (backend.h's linear_weight_grads). */
void autocast_linear_weight_grads(const LinearGradPart *parts, int count, const float *in, int n,
                                  int in_dim);

/* A dout's bf16 packing kept from its dX product for its dW product (backend.h's
 * linears_backward): dW's A is then its transpose, built from the bf16 values (half the bytes of
 * the fp32 dout, no rounding, bf16_pack_a_transposed) with the bits of packing the fp32 dout. */
typedef struct {
    Bf16PackedA a; /* data NULL: nothing kept (n 0, or no gemm_bf16 path) */
} AutocastDout;

/* autocast_linear_backward's din alone (dw and dbias NULL) with its bits, dout's packing kept
 * in *kept for autocast_linear_weight_grads_kept, which frees it. */
void autocast_linear_din_kept(float *din, const float *dout, WeightRef w, int n, int in_dim,
                              int out_dim, AutocastDout *kept);

/* autocast_linear_weight_grads, part i's dout read from kept[i] (autocast_linear_din_kept of
 * parts[i].dout, which must not have been written since) where that holds a packing; kept may
 * be NULL. Frees kept's packings. */
void autocast_linear_weight_grads_kept(const LinearGradPart *parts, AutocastDout *kept, int count,
                                       const float *in, int n, int in_dim);

/* The lm_head's log-probs under autocast on gemm_bf16 (fused_logprob_autocast.c; only when
 * gemm_bf16_path() is not GEMM_BF16_NONE): as fused_logprob_forward_capped, with the logits
 * bf16(hidden) · bf16(W)^T in fp32 sums, not rounded; the log-softmax, stats and log-probs fp32.
 * W fp32 (packed once per optimizer step by gemm_bf16's cache), bf16 or NF4 (packed tile by
 * tile). n may be 0. */
void autocast_logprob_forward(float *logp, LogitStats *stats, const float *hidden,
                              const int32_t *target, WeightRef lm_head, int n, int h, int vocab,
                              LogitCap cap);

/* autocast_logprob_forward without a cap, and lse (n floats) written = each row's log-sum-exp, the
 * value autocast_logprob_backward_lse wants for the same rows (backend.h's logprob_lse). */
void autocast_logprob_forward_lse(float *logp, LogitStats *stats, float *lse, const float *hidden,
                                  const int32_t *target, WeightRef lm_head, int n, int h,
                                  int vocab);

/* Its backward, as fused_logprob_backward_capped: each logit's gradient dz fp32, then rounded to
 * bf16 for both products (torch's logits are bf16, so is their gradient); dhidden (n, h)
 * written = bf16(dz) · bf16(W) in fp32 sums, not rounded (the caller rounds it); dlm_head
 * (vocab, h) accumulated += bf16(dz)^T · bf16(hidden), fp32, or NULL for a frozen lm_head. */
void autocast_logprob_backward(float *dhidden, float *dlm_head, const float *dlogp,
                               const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                               int h, int vocab, LogitCap cap);

/* autocast_logprob_backward without a cap, given lse from autocast_logprob_forward_lse of the same
 * hidden rows, targets and lm_head: the same bits, one logits product and its exponentials fewer
 * (backend.h's logprob_backward_lse). */
void autocast_logprob_backward_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                   const float *lse, const float *hidden, const int32_t *target,
                                   WeightRef lm_head, int n, int h, int vocab);

#endif
