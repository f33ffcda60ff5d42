/* Row-major fp32 GEMM for training's products (y = x W^T, dX = dY W, dW += dY^T X), our own
 * cache-blocked kernels beside OpenBLAS's sgemm, the faster of the two for each shape class
 * chosen by measurement (gemm_f32_choice.c).
 *
 * Why: OpenBLAS's speed depends on which kernel a machine's OpenBLAS picks (OPENBLAS_CORETYPE,
 * its build's core list); ours pick the kernel from cpuid at run time, so the training speed of
 * a machine is what its vector units give. Where OpenBLAS is faster on a shape it stays.
 *
 * Invariants:
 *  1. Every output element is summed in the same order on a path whatever the thread count
 *     and the other dimensions: k ascending within blocks of the path's KC, block after block
 *     in order, each block's sum added to C as it ends. Our paths are therefore deterministic,
 *     and bitwise independent of the number of threads.
 *  2. The path used for a shape class is chosen once per process (first use) and never changes
 *     after, so a run's results do not flip between paths mid-run.
 *  3. With beta == 0, C is written without being read (it may hold NaN or garbage), as BLAS. */
#ifndef RLHF_KERNELS_CPU_GEMM_F32_H
#define RLHF_KERNELS_CPU_GEMM_F32_H

#include <stdbool.h>
#include <stdio.h>

/* The ways a product can be computed. GEMM_F32_AUTO: measure, then the faster (invariant 2). */
typedef enum {
    GEMM_F32_AUTO = 0,
    GEMM_F32_OPENBLAS,
    GEMM_F32_OWN_AVX512,   /* 12 x 32 register tile, 24 zmm accumulators */
    GEMM_F32_OWN_AVX2,     /* 6 x 16 register tile, 12 ymm accumulators (AVX2 + FMA) */
    GEMM_F32_OWN_PORTABLE, /* 4 x 8 tile in plain C: any CPU, and the reference for the others */
    GEMM_F32_PATHS
} GemmF32Path;

/* C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, row-major as cblas_sgemm with
 * CblasRowMajor: op(A) is m x k (A stored m x k, stride lda; or, trans_a, stored k x m), op(B)
 * is k x n (B stored k x n, stride ldb; or, trans_b, stored n x k). m, n or k of 0 is a no-op
 * except that k == 0 scales C by beta. Runs on the path chosen for the shape's class (AUTO
 * measures on first use; see gemm_f32_set_policy). Uses OpenMP's threads. Never fails. */
void gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);

/* gemm_f32 on one named path (not AUTO). Returns false, touching nothing, when this CPU lacks
 * the path's instructions (gemm_f32_path_available). For tests and benches. */
bool gemm_f32_on(GemmF32Path path, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Whether this CPU runs `path` (cpuid; OPENBLAS and PORTABLE: always). */
bool gemm_f32_path_available(GemmF32Path path);

/* The fastest of our own paths this CPU has (AVX512 > AVX2 > PORTABLE). */
GemmF32Path gemm_f32_own_path(void);

/* "openblas", "own-avx512", "own-avx2", "own-portable", "auto". */
const char *gemm_f32_path_name(GemmF32Path path);

/* What gemm_f32 does from now on: GEMM_F32_AUTO (the default: measured per shape class), or
 * always one path (OPENBLAS, or our best own path for any GEMM_F32_OWN_*), for a bench's side
 * by side. Not a user setting and not read from the environment. Call before the products. */
void gemm_f32_set_policy(GemmF32Path policy);

/* Writes one line per shape class decided so far: its dimensions, both paths' measured GFLOP/s
 * and the choice; then a summary line. Nothing but the summary when no class was decided. */
void gemm_f32_report(FILE *fp);

/* One line naming our kernel for this CPU and the policy, for `rlhf --version`. */
void gemm_f32_describe(FILE *fp);

#endif
