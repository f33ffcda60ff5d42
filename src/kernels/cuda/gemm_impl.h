/* What an implementation of kernels/cuda/gemm.h provides (gemm_ref.c, gemm_cublaslt.cu); callers
 * use gemm.h only. Plain C with no dependency on the rest of the project, so that rlhf_cuda
 * (nvcc) implements it without linking rlhf_core: errors travel as text in GemmLt.error, and
 * gemm.c reports them through err_set. */
#ifndef RLHF_KERNELS_CUDA_GEMM_IMPL_H
#define RLHF_KERNELS_CUDA_GEMM_IMPL_H

#include "kernels/cuda/gemm.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One call, as gemm.c checked it (gemm.h rules 2-5 hold; bias may be NULL). */
typedef struct {
    GemmOp op_a, op_b;
    int m, n, k;
    float alpha, beta;
    const void *A, *B;
    GemmType ab_type; /* A's and B's */
    int lda, ldb;
    void *C;
    GemmType c_type; /* C's, D's and bias's */
    int ldc;
    const void *bias;
} GemmCall;

struct GemmLt {
    const char *name;
    /* Runs a checked call: 0, or GEMM_FAILED with error[] filled. */
    int (*run)(GemmLt *g, const GemmCall *call);
    /* n ones of type t in the implementation's memory (gemm_lt_ones), or NULL with error[]. */
    const void *(*ones)(GemmLt *g, int n, GemmType t);
    /* Frees g itself and what it holds. */
    void (*destroy)(GemmLt *g);
    char error[256];
};

#ifdef __cplusplus
}
#endif

#endif
