/* The products of kernels/backend.h's dense ops (linear, linear_backward, lora, lora_backward,
 * the lm_head of logprob/logprob_backward), row-major as backend.h lays them out, expressed on
 * kernels/cuda/gemm.h. They only pass pointers on, so the same functions run on the host
 * reference (the emulated backend) and on cuBLASLt (the CUDA backend): every pointer is the
 * GemmLt's memory (gemm.h rule 7).
 *
 * Types: `t` is the type of every input (activations, weights, upstream gradients, and the LoRA
 * intermediates, which feed the next product); `out_t` that of every output (forward outputs,
 * gradients, bias). A bias has out_t (gemm.h rule 3). Products sum in fp32 (gemm.h rule 3).
 *
 * Each returns 0, or gemm_lt's error (its err_set message names the product). n == 0 (no rows)
 * does nothing and returns 0. Arguments are otherwise as backend.h's op of the same name. */
#ifndef RLHF_KERNELS_CUDA_GEMM_OPS_H
#define RLHF_KERNELS_CUDA_GEMM_OPS_H

#include "kernels/cuda/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (n, out_dim) written = in (n, in_dim) W^T (+ bias (out_dim) when not NULL), W
 * (out_dim, in_dim). */
int gemm_linear(GemmLt *g, void *out, const void *in, const void *w, const void *bias, int n,
                int in_dim, int out_dim, GemmType t, GemmType out_t);

/* din (n, in_dim) written = dout W; dw (out_dim, in_dim) accumulated += dout^T in; dbias
 * (out_dim) accumulated += column sums of dout, summed over the rows in order (a product with
 * gemm_lt_ones). Any of din, dw, dbias may be NULL. */
int gemm_linear_backward(GemmLt *g, void *din, void *dw, void *dbias, const void *dout,
                         const void *in, const void *w, int n, int in_dim, int out_dim, GemmType t,
                         GemmType out_t);

/* LoRA's products, accumulated: out (n, out_dim) += scaling (x A^T) B^T, A (r, in_dim), B
 * (out_dim, r). x is the branch's input after dropout (the caller applies the mask: an
 * elementwise kernel, not a product). tmp: scratch of n * r values of type t, written (x A^T). */
int gemm_lora(GemmLt *g, void *out, const void *x, const void *A, const void *B, void *tmp, int n,
              int in_dim, int out_dim, int r, float scaling, GemmType t, GemmType out_t);

/* Its backward, with tmp = x A^T recomputed: dB (out_dim, r) += scaling dout^T tmp; dtmp =
 * scaling dout B; dA (r, in_dim) += dtmp^T x; dx (n, in_dim) += dtmp A, the gradient of the
 * dropped input (with dropout the caller passes zeroed scratch here and applies the mask).
 * tmp, dtmp: scratch of n * r values of type t, written. dA, dB, dx may each be NULL. */
int gemm_lora_backward(GemmLt *g, void *dx, void *dA, void *dB, const void *dout, const void *x,
                       const void *A, const void *B, void *tmp, void *dtmp, int n, int in_dim,
                       int out_dim, int r, float scaling, GemmType t, GemmType out_t);

/* One chunk of the lm_head product: logits (rows, cols), row stride ld_logits >= cols, written
 * = hidden (rows, h) w^T, w (cols, h): the lm_head's rows c0 .. c0+cols-1 (the caller offsets
 * the pointer). */
int gemm_lm_head_logits(GemmLt *g, void *logits, int ld_logits, const void *hidden, const void *w,
                        int rows, int cols, int h, GemmType t, GemmType out_t);

/* Its backward for that chunk, with dlogits (rows, cols) of row stride ld_dlogits: dhidden
 * (rows, h) accumulated += dlogits w (the chunks of the vocabulary add up); dw (cols, h)
 * accumulated += dlogits^T hidden (NULL: a frozen lm_head). */
int gemm_lm_head_backward(GemmLt *g, void *dhidden, void *dw, const void *dlogits, int ld_dlogits,
                          const void *hidden, const void *w, int rows, int cols, int h, GemmType t,
                          GemmType out_t);

#ifdef __cplusplus
}
#endif

#endif
