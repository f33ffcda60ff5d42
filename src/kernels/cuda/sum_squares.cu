// Σ g² (the square of clip_grad_norm_'s norm) in two launches and a fixed tree: up to
// CUDA_SUM_SQUARES_PARTIALS blocks (fewer for a small n: a norm's weight is one block, not 128
// mostly idle ones) each sum a grid-stride slice in fp32 per thread and reduce it with block_sum,
// then one block adds the blocks' partials in double. The partition depends only on n: bitwise
// reproducible, no atomics.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define SUMSQ_THREADS 256

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_partial_kernel(float *partials, const float *g, size_t n, int blocks) {
    __shared__ float scratch[SUMSQ_THREADS / 32 + 1];
    float ss = 0.0f;
    for (size_t i = (size_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n;
         i += (size_t)blocks * SUMSQ_THREADS)
        ss += g[i] * g[i];
    float total = block_sum<SUMSQ_THREADS>(ss, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_final_kernel(double *out, const float *partials, int blocks) {
    __shared__ double scratch[SUMSQ_THREADS / 32 + 1];
    double s = 0.0;
    for (int i = threadIdx.x; i < blocks; i += SUMSQ_THREADS)
        s += (double)partials[i];
    double total = block_sum<SUMSQ_THREADS>(s, scratch);
    if (threadIdx.x == 0) *out = total;
}

extern "C" int cuda_sum_squares(double *out, const float *g, size_t n, float *partials,
                                void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t needed = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    int blocks =
        needed < CUDA_SUM_SQUARES_PARTIALS ? (needed ? (int)needed : 1) : CUDA_SUM_SQUARES_PARTIALS;
    int err = (int)CUDA_LAUNCH(sum_squares_partial_kernel, blocks, SUMSQ_THREADS, 0, s, partials, g,
                               n, blocks);
    if (!err)
        err = (int)CUDA_LAUNCH(sum_squares_final_kernel, 1, SUMSQ_THREADS, 0, s, out, partials,
                               blocks);
    return err;
}
