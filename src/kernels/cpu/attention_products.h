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

/* Which entries a product may leave out, relative to a diagonal offset `diag` (causal attention:
 * query row i of a block sees its columns up to i + diag):
 *  ATTN_DENSE: none.
 *  ATTN_CAUSAL_OUTPUT: C(i, j) for j > i + diag is not computed; it is set to 0 (beta must be 0).
 *  ATTN_CAUSAL_DEPTH: op(A)(i, l) is 0 for l > i + diag (A not transposed: probabilities times
 *    values), or for l < i - diag (trans_a: keys' gradients, A's rows being the queries), and is
 *    skipped there (no NaN or inf may hide in those entries). */
typedef enum { ATTN_DENSE, ATTN_CAUSAL_OUTPUT, ATTN_CAUSAL_DEPTH } AttnShape;

/* C (m x n, row stride ldc) = alpha op(A) B + beta C, beta 0 or 1: op(A) is m x k, stored m x k
 * with row stride lda, or (trans_a) stored k x m with row stride lda; B is k x n, row stride ldb;
 * entries left out as `shape` and `diag` say. AVX-512 (cpuid) runs an unpacked 8 x 32 register
 * tile, whole tiles of the left-out part skipped; other CPUs run gemm_f32 on all of it (then
 * zero ATTN_CAUSAL_OUTPUT's part). Single-threaded on our tile (attention calls it from its own
 * parallel tasks). Never fails. */
void attention_product(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                       int diag);

/* attention_product as CPUs without AVX-512 run it (gemm_f32, then ATTN_CAUSAL_OUTPUT's part
 * zeroed), on any CPU: for tests. */
void attention_product_fallback(bool trans_a, int m, int n, int k, float alpha, const float *a,
                                int lda, const float *b, int ldb, float beta, float *c, int ldc,
                                AttnShape shape, int diag);

#endif
