// Embedding rows: the gather widens a bf16 table (or copies an fp32 one) one element per thread;
// the scatter-add gives each column one thread that walks the rows in order, so repeated ids
// sum in the CPU's order (kernels/cpu/backend_cpu.c) without float atomics.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#include <stdint.h>

#define EMBED_THREADS 256
#define EMBED_BLOCKS  1024

__global__ void __launch_bounds__(EMBED_THREADS)
    embedding_gather_kernel(float *out, const float *table_f32, const uint16_t *table_bf16,
                            const int *ids, int n, int h) {
    size_t total = (size_t)n * h;
    for (size_t i = (size_t)blockIdx.x * EMBED_THREADS + threadIdx.x; i < total;
         i += (size_t)gridDim.x * EMBED_THREADS) {
        size_t r = i / h, j = i % h, src = (size_t)ids[r] * h + j;
        out[i] = table_f32 ? table_f32[src] : __uint_as_float((unsigned)table_bf16[src] << 16);
    }
}

__global__ void __launch_bounds__(EMBED_THREADS)
    embedding_scatter_add_kernel(float *dtable, const float *dx, const int *ids, int n, int h,
                                 int skip_id) {
    int j = blockIdx.x * EMBED_THREADS + threadIdx.x;
    if (j >= h) return;
    for (int r = 0; r < n; r++)
        if (ids[r] != skip_id) dtable[(size_t)ids[r] * h + j] += dx[(size_t)r * h + j];
}

extern "C" int cuda_embedding_gather(float *out, const float *table_f32, const uint16_t *table_bf16,
                                     const int *ids, int n, int h, void *stream) {
    size_t total = (size_t)n * h;
    if (total == 0) return 0;
    size_t blocks = (total + EMBED_THREADS - 1) / EMBED_THREADS;
    return (int)CUDA_LAUNCH(embedding_gather_kernel,
                            blocks < EMBED_BLOCKS ? (int)blocks : EMBED_BLOCKS, EMBED_THREADS, 0,
                            (cudaStream_t)stream, out, table_f32, table_bf16, ids, n, h);
}

extern "C" int cuda_embedding_scatter_add(float *dtable, const float *dx, const int *ids, int n,
                                          int h, int skip_id, void *stream) {
    if (n <= 0 || h <= 0) return 0;
    return (int)CUDA_LAUNCH(embedding_scatter_add_kernel, (h + EMBED_THREADS - 1) / EMBED_THREADS,
                            EMBED_THREADS, 0, (cudaStream_t)stream, dtable, dx, ids, n, h, skip_id);
}
