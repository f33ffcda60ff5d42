/* One GEMM with cuBLASLt's semantics (issue 29), behind which either cuBLASLt itself
 * (gemm_cublaslt.cu, only with RLHF_WITH_CUDA) or a host reference (gemm_ref.c, always built: the
 * GEMM of the emulated CUDA backend) computes. The CUDA backend's products are written once, on
 * this interface (gemm_ops.h), so a layout mistake in them shows on the CPU.
 *
 * Semantics, those of cublasLtMatmul with CUBLAS_COMPUTE_32F and CUDA_R_32F scale:
 *  1. Column-major. Element (i, j) of a stored matrix X with leading dimension ldx is
 *     X[i + j * ldx]. op(X) is X (GEMM_OP_N) or its transpose (GEMM_OP_T).
 *  2. D = alpha * op(A) op(B) + beta * C (+ bias[i] on row i with gemm_lt_bias), with op(A)
 *     m x k, op(B) k x n, C m x n; D is C (in place), as in cublasLt's D == C with one layout.
 *     So A is stored (m x k, lda >= m) under GEMM_OP_N and (k x m, lda >= k) under GEMM_OP_T;
 *     B (k x n, ldb >= k) or (n x k, ldb >= n); C (m x n, ldc >= m). Rows i >= m of C's
 *     columns (the padding up to ldc) are never touched.
 *  3. Types. A and B are both fp32 or both bf16 (cuBLASLt has no mixed fp32 x bf16 product); C
 *     is fp32 or bf16, and a bias has C's type (cuBLASLt's default bias type, the type of D).
 *     Products and sums are fp32 (no TF32: fp32 inputs keep all 24 bits); alpha and beta fp32;
 *     a bf16 D is rounded from the fp32 result, nearest even.
 *  4. beta == 0 means C is not read (NaNs there do not propagate), as in cuBLAS.
 *  5. Arguments are checked before anything runs, as cuBLASLt checks its layouts: m, n, k >= 1,
 *     lda/ldb/ldc at least the stored rows (rule 2), no NULL matrix, types as in rule 3.
 *     A violation returns GEMM_INVALID_VALUE with err_set naming the argument, and C is left
 *     as it was. (cuBLAS accepts k == 0 as D = beta C; callers here never need it, so both
 *     implementations refuse it rather than differ on it.)
 *  6. Determinism. Each implementation sums in an order fixed by the call's shape: the reference
 *     over l = 0 .. k-1 with fused multiply-adds into one fp32 accumulator per element; cuBLASLt
 *     with the algorithm its heuristic chose the first time it saw the shape (cached), whose
 *     split-k reductions are sequential. Two runs of one call give the same bits; the two
 *     implementations agree to fp32 rounding, not bitwise.
 *  7. Memory. A, B, C and bias are the implementation's memory: host memory for the reference,
 *     device memory for cuBLASLt (which runs asynchronously on its context's stream).
 *
 * A GemmLt is used by one thread at a time. */
#ifndef RLHF_KERNELS_CUDA_GEMM_H
#define RLHF_KERNELS_CUDA_GEMM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GEMM_OP_N = 0, GEMM_OP_T = 1 } GemmOp;
typedef enum { GEMM_F32 = 0, GEMM_BF16 = 1 } GemmType;

/* Return values (cublasStatus_t's meaning): 0, or */
enum {
    GEMM_INVALID_VALUE = -1, /* rule 5 */
    GEMM_FAILED = -2,        /* the implementation failed (a cuBLASLt/CUDA error, no memory) */
};

typedef struct GemmLt GemmLt;

/* D = alpha op(A) op(B) + beta C, semantics 1-7 above. Returns 0, or GEMM_INVALID_VALUE /
 * GEMM_FAILED with err_set naming what. */
int gemm_lt(GemmLt *g, GemmOp op_a, GemmOp op_b, int m, int n, int k, float alpha, const void *A,
            GemmType a_type, int lda, const void *B, GemmType b_type, int ldb, float beta, void *C,
            GemmType c_type, int ldc);

/* gemm_lt with cuBLASLt's CUBLASLT_EPILOGUE_BIAS: bias (m values of c_type, packed) added to
 * every column after alpha/beta, before D is rounded to its type. bias NULL: plain gemm_lt. */
int gemm_lt_bias(GemmLt *g, GemmOp op_a, GemmOp op_b, int m, int n, int k, float alpha,
                 const void *A, GemmType a_type, int lda, const void *B, GemmType b_type, int ldb,
                 float beta, void *C, GemmType c_type, int ldc, const void *bias);

/* n ones of type t in g's memory (the column-sum products multiply by it), valid until the next
 * call on g that asks for more; NULL with err_set when it cannot be made. */
const void *gemm_lt_ones(GemmLt *g, int n, GemmType t);

/* "reference" or "cublaslt". */
const char *gemm_lt_name(const GemmLt *g);

/* The host reference (gemm_ref.c): host memory, OpenMP over the columns of D. Never NULL. */
GemmLt *gemm_lt_reference_new(void);

/* Frees g and what it holds; NULL is ignored. */
void gemm_lt_free(GemmLt *g);

#ifdef __cplusplus
}
#endif

#endif
