/* The CUDA backend's kernels, callable from C (issue 29). Built only with RLHF_WITH_CUDA
 * (-DRLHF_CUDA=ON, or AUTO where nvcc and cuBLASLt are found), for Hopper (sm_90a). So far one
 * kernel, the first op of kernels/backend.h's table on the device; the rest of the table (and the
 * Backend that fills it, cuBLASLt for the products) come next, each checked against backend_cpu
 * as tests/cuda/test_cuda_rmsnorm.c checks this one.
 *
 * Pointers are device memory; calls are asynchronous on `stream` (a cudaStream_t, NULL: the
 * default stream). Each returns 0, or the cudaError_t of a failed launch. */
#ifndef RLHF_KERNELS_CUDA_CUDA_KERNELS_H
#define RLHF_KERNELS_CUDA_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* backend.h's rmsnorm: out (n, c) = w ⊙ in / sqrt(mean(in²) + eps) per row, the mean of squares
 * summed in fp32 in a fixed tree order (bitwise reproducible); out may be in. One block per row. */
int cuda_rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps,
                         void *stream);

#ifdef __cplusplus
}
#endif

#endif
