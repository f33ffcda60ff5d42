// Row gathers and scatter-adds of the table (rows_gather, rows_scatter_add: the shared-prefix
// layout's copies). The gather is one element per thread; the scatter-add gives each column one
// thread that walks j in order, so repeated target rows sum in the CPU's order, without atomics.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ROWS_THREADS 256
#define ROWS_BLOCKS  1024

__global__ void __launch_bounds__(ROWS_THREADS)
    rows_gather_kernel(float *dst, const float *src, const int *idx, int n, int width) {
    size_t total = (size_t)n * width;
    for (size_t i = (size_t)blockIdx.x * ROWS_THREADS + threadIdx.x; i < total;
         i += (size_t)gridDim.x * ROWS_THREADS)
        dst[i] = src[(size_t)idx[i / width] * width + i % width];
}

__global__ void __launch_bounds__(ROWS_THREADS)
    rows_scatter_add_kernel(float *dst, const float *src, const int *idx, int n, int width) {
    int c = blockIdx.x * ROWS_THREADS + threadIdx.x;
    if (c >= width) return;
    for (int j = 0; j < n; j++)
        dst[(size_t)idx[j] * width + c] += src[(size_t)j * width + c];
}

extern "C" int cuda_rows_gather(float *dst, const float *src, const int *idx, int n, int width,
                                void *stream) {
    size_t total = (size_t)n * width;
    if (total == 0) return 0;
    size_t blocks = (total + ROWS_THREADS - 1) / ROWS_THREADS;
    return (int)CUDA_LAUNCH(rows_gather_kernel, blocks < ROWS_BLOCKS ? (int)blocks : ROWS_BLOCKS,
                            ROWS_THREADS, 0, (cudaStream_t)stream, dst, src, idx, n, width);
}

extern "C" int cuda_rows_scatter_add(float *dst, const float *src, const int *idx, int n, int width,
                                     void *stream) {
    if (n <= 0 || width <= 0) return 0;
    return (int)CUDA_LAUNCH(rows_scatter_add_kernel, (width + ROWS_THREADS - 1) / ROWS_THREADS,
                            ROWS_THREADS, 0, (cudaStream_t)stream, dst, src, idx, n, width);
}
