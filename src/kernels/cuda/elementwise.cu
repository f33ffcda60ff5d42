// The table's elementwise add and scale (the residual stream, gradient clipping's scale by
// max_norm / norm), over grid-stride loops.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ELEMENTWISE_THREADS 256
#define ELEMENTWISE_BLOCKS  1024

__global__ void __launch_bounds__(ELEMENTWISE_THREADS)
    add_kernel(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = (size_t)blockIdx.x * ELEMENTWISE_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * ELEMENTWISE_THREADS)
        out[i] = a[i] + b[i];
}

__global__ void __launch_bounds__(ELEMENTWISE_THREADS) scale_kernel(float *x, float f, size_t n) {
    for (size_t i = (size_t)blockIdx.x * ELEMENTWISE_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * ELEMENTWISE_THREADS)
        x[i] *= f;
}

static int grid_for(size_t n) {
    size_t blocks = (n + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS;
    return blocks < ELEMENTWISE_BLOCKS ? (int)blocks : ELEMENTWISE_BLOCKS;
}

extern "C" int cuda_add(float *out, const float *a, const float *b, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(add_kernel, grid_for(n), ELEMENTWISE_THREADS, 0, (cudaStream_t)stream,
                            out, a, b, n);
}

extern "C" int cuda_scale(float *x, float f, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(scale_kernel, grid_for(n), ELEMENTWISE_THREADS, 0, (cudaStream_t)stream,
                            x, f, n);
}
