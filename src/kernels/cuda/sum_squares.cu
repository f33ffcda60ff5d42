// Σ g² (the square of clip_grad_norm_'s norm) in two launches and a fixed tree: SUMSQ_BLOCKS
// blocks each sum a grid-stride slice in fp32 per thread and reduce it with block_sum, then one
// block adds the blocks' partials in double. The partition depends only on n: bitwise
// reproducible, no atomics.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define SUMSQ_THREADS 256

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_partial_kernel(float *partials, const float *g, size_t n) {
    __shared__ float scratch[SUMSQ_THREADS / 32 + 1];
    float ss = 0.0f;
    for (size_t i = (size_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n;
         i += (size_t)CUDA_SUM_SQUARES_PARTIALS * SUMSQ_THREADS)
        ss += g[i] * g[i];
    float total = block_sum<SUMSQ_THREADS>(ss, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_final_kernel(double *out, const float *partials) {
    __shared__ double scratch[SUMSQ_THREADS / 32 + 1];
    double s = 0.0;
    for (int i = threadIdx.x; i < CUDA_SUM_SQUARES_PARTIALS; i += SUMSQ_THREADS)
        s += (double)partials[i];
    double total = block_sum<SUMSQ_THREADS>(s, scratch);
    if (threadIdx.x == 0) *out = total;
}

extern "C" int cuda_sum_squares(double *out, const float *g, size_t n, float *partials,
                                void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int err = (int)CUDA_LAUNCH(sum_squares_partial_kernel, CUDA_SUM_SQUARES_PARTIALS, SUMSQ_THREADS,
                               0, s, partials, g, n);
    if (!err)
        err = (int)CUDA_LAUNCH(sum_squares_final_kernel, 1, SUMSQ_THREADS, 0, s, out, partials);
    return err;
}
