/* Row-major fp32 GEMM for training's products (y = x W^T, dX = dY W, dW += dY^T X), our own
 * cache-blocked kernels beside OpenBLAS's sgemm (gemm_f32_choice.c decides which runs).
 *
 * Why: OpenBLAS's speed depends on which kernel a machine's OpenBLAS picks (OPENBLAS_CORETYPE,
 * its build's core list); ours pick the kernel from cpuid at run time, so the training speed of
 * a machine is what its vector units give, and a product's bits do not depend on the thread
 * count or on the OpenBLAS build.
 *
 * Which one runs (the default, GEMM_F32_AUTO): ours wherever the CPU has AVX2+FMA or AVX-512,
 * OpenBLAS elsewhere (our portable C kernel is the tests' reference, not a fast path). That rule
 * came from measurement (bench/README.md: ours 0.77x-1.33x OpenBLAS per training shape, even in
 * total, on an AVX-512 Xeon), not from timing inside each process: a choice timed at start-up
 * differs between runs on a loaded machine (8 of 18 shape classes flipped between two runs),
 * and a resumed run must repeat an uninterrupted one bit for bit (test_crash_resume).
 * GEMM_F32_MEASURED keeps the per-process measurement for the benches' side by side.
 *
 * Invariants:
 *  1. Every output element is summed in the same order on a path whatever the thread count
 *     and the other dimensions: k ascending within blocks of the path's KC, block after block
 *     in order, each block's sum added to C as it ends. Our paths are therefore deterministic,
 *     and bitwise independent of the number of threads.
 *  2. Under GEMM_F32_AUTO the path depends only on the CPU's instruction sets, so two runs on
 *     one machine multiply alike. Under GEMM_F32_MEASURED the path of a shape class is chosen
 *     once per process (first use) and never changes after.
 *  3. With beta == 0, C is written without being read (it may hold NaN or garbage), as BLAS. */
#ifndef RLHF_KERNELS_CPU_GEMM_F32_H
#define RLHF_KERNELS_CPU_GEMM_F32_H

#include <stdbool.h>
#include <stdio.h>

/* The ways a product can be computed. GEMM_F32_AUTO: the fixed rule above (invariant 2);
 * GEMM_F32_MEASURED: each shape class on the faster by measurement. */
typedef enum {
    GEMM_F32_AUTO = 0,
    GEMM_F32_OPENBLAS,
    GEMM_F32_OWN_AVX512,   /* 12 x 32 register tile, 24 zmm accumulators */
    GEMM_F32_OWN_AVX2,     /* 6 x 16 register tile, 12 ymm accumulators (AVX2 + FMA) */
    GEMM_F32_OWN_PORTABLE, /* 4 x 8 tile in plain C: any CPU, and the reference for the others */
    GEMM_F32_PATHS,        /* (the count of the paths above) */
    GEMM_F32_MEASURED      /* a policy, not a path: per-class measurement (benches) */
} GemmF32Path;

/* C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, row-major as cblas_sgemm with
 * CblasRowMajor: op(A) is m x k (A stored m x k, stride lda; or, trans_a, stored k x m), op(B)
 * is k x n (B stored k x n, stride ldb; or, trans_b, stored n x k). m, n or k of 0 is a no-op
 * except that k == 0 scales C by beta. Runs on the policy's path (gemm_f32_set_policy; the
 * default is GEMM_F32_AUTO's fixed rule). Uses OpenMP's threads. Never fails. */
void gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);

/* gemm_f32 on one named path (not AUTO). Returns false, touching nothing, when this CPU lacks
 * the path's instructions (gemm_f32_path_available). For tests and benches. */
bool gemm_f32_on(GemmF32Path path, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* The most products one gemm_f32_shared call takes (q, k and v are three). */
#define GEMM_F32_MAX_PARTS 8

/* One product of a group sharing an operand (gemm_f32_shared): its own operand x (B of a group
 * sharing A, A of one sharing B, stored as the group's trans_b / trans_a say, row stride ldx),
 * its length len (sharing A: op(B) is k x len, C is dim x len; sharing B: op(A) is len x k, C is
 * len x dim), and its C (row stride ldc) = alpha op(A) op(B) + beta C. */
typedef struct {
    const float *x;
    int ldx;
    int len;
    float alpha, beta;
    float *c;
    int ldc;
} GemmF32Part;

/* Several products with one operand in common, e.g. x_n W_q^T, x_n W_k^T, x_n W_v^T (shares_a,
 * shared = x_n) or dW_q += dq^T x_n, dW_k += dk^T x_n, ... (sharing B = x_n): shares_a: op(A)
 * (dim x k, stored as trans_a says, stride ld) is `shared`; else op(B) (k x dim) is. Each part's
 * C gets the bits gemm_f32 would give it alone (the same packed values, k blocks and sums:
 * invariant 1); on our paths each block of the shared operand is packed once for all parts
 * instead of once per product. On OpenBLAS's path (and per part under GEMM_F32_MEASURED) it is
 * one gemm_f32 per part. The parts' C must not overlap each other or any operand. n_parts <=
 * GEMM_F32_MAX_PARTS. Never fails. */
void gemm_f32_shared(bool shares_a, bool trans_a, bool trans_b, int dim, int k, const float *shared,
                     int ld, const GemmF32Part *parts, int n_parts);

/* gemm_f32_shared on one named path (not AUTO). Returns false, touching nothing, when this CPU
 * lacks the path's instructions or n_parts is out of range. For tests and benches. */
bool gemm_f32_shared_on(GemmF32Path path, bool shares_a, bool trans_a, bool trans_b, int dim, int k,
                        const float *shared, int ld, const GemmF32Part *parts, int n_parts);

/* Whether this CPU runs `path` (cpuid; OPENBLAS and PORTABLE: always). */
bool gemm_f32_path_available(GemmF32Path path);

/* The fastest of our own paths this CPU has (AVX512 > AVX2 > PORTABLE). */
GemmF32Path gemm_f32_own_path(void);

/* "openblas", "own-avx512", "own-avx2", "own-portable", "auto", "measured". */
const char *gemm_f32_path_name(GemmF32Path path);

/* What gemm_f32 does from now on: GEMM_F32_AUTO (the default: ours where the CPU has AVX2 or
 * AVX-512, else OpenBLAS), GEMM_F32_MEASURED (each shape class on the faster, timed at its first
 * product), or always one path (OPENBLAS, or our best own path for any GEMM_F32_OWN_*), for a
 * bench's side by side. Not a user setting and not read from the environment. Call before the
 * products. */
void gemm_f32_set_policy(GemmF32Path policy);

/* Writes one line per shape class measured so far (GEMM_F32_MEASURED): its dimensions, both paths'
 * measured GFLOP/s and the choice; then a summary line. Nothing but the summary when no class was
 * decided. */
void gemm_f32_report(FILE *fp);

/* One line naming our kernel for this CPU and the policy, for `rlhf --version`. */
void gemm_f32_describe(FILE *fp);

#endif
