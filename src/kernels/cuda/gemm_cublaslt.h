/* The cuBLASLt implementation of kernels/cuda/gemm.h (gemm_cublaslt.cu), in rlhf_cuda: built only
 * with RLHF_WITH_CUDA. */
#ifndef RLHF_KERNELS_CUDA_GEMM_CUBLASLT_H
#define RLHF_KERNELS_CUDA_GEMM_CUBLASLT_H

#include "kernels/cuda/gemm.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A GemmLt over cuBLASLt on the current device: matmuls run asynchronously on `stream` (a
 * cudaStream_t; NULL: the default stream) with a workspace of workspace_bytes of device memory
 * (0: 32 MiB, what cuBLAS recommends on Hopper). The matmul descriptor, the four layouts and the
 * heuristic's algorithm are made once per distinct call shape (ops, m, n, k, leading dimensions,
 * types, bias or not, pointer alignments) and cached, which also keeps each shape on one
 * algorithm (gemm.h rule 6). NULL with `why` (why_len bytes) filled when no device, cuBLASLt or
 * workspace can be had. */
GemmLt *gemm_lt_cublaslt_new(void *stream, size_t workspace_bytes, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
