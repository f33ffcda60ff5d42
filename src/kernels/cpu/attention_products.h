/* The products of training attention (kernels/cpu/attention.c), on operands that are never
 * packed: a query block's rows, probabilities and gradients are read where they lie, and the
 * keys/values a block meets are gathered once per block (attention.c) for all the query heads
 * that share their kv head.
 *
 * Why not gemm_f32: at attention's shapes (64 query rows, head dim 64, a few hundred keys) a
 * blocked GEMM spends a third of its time packing its operands, again for every head and block
 * (perf, SmolLM2-135M's shape: packing 32%, the micro-kernel 45%). Here no operand is packed.
 *
 * Invariants:
 *  1. Every output element is one sum over l ascending, then scaled by alpha and (beta 1) added
 *     to C: the result does not depend on the thread count or on where the element's tile lies.
 *  2. With beta == 0, C is written without being read (it may hold garbage), as BLAS. */
#ifndef RLHF_KERNELS_CPU_ATTENTION_PRODUCTS_H
#define RLHF_KERNELS_CPU_ATTENTION_PRODUCTS_H

#include <stdbool.h>

/* C (m x n, row stride ldc) = alpha op(A) B + beta C, beta 0 or 1: op(A) is m x k, stored m x k
 * with row stride lda, or (trans_a) stored k x m with row stride lda; B is k x n, row stride ldb.
 * AVX-512 (cpuid) runs an unpacked 8 x 32 register tile; other CPUs run gemm_f32. Single-threaded
 * on our AVX-512 tile (attention calls it from its own parallel tasks). Never fails. */
void attention_product(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc);

#endif
