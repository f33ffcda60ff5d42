// The elementwise half of the fused lm_head log-prob (backend.h's logprob / logprob_backward) on
// the device; the products are gemm_lm_head_logits / gemm_lm_head_backward (gemm_ops.h), and
// backend_cuda.cu drives both over chunks of the vocabulary, so (N, V) logits never exist.
//
// Per row the running log-sum-exp state CudaLseRow (cuda_kernels.h) follows the CPU's
// RunningLse (kernels/cpu/fused_logprob.c): a chunk's max, Σ exp(z - m), Σ exp(z - m)(z - m)
// and Σ z are fp32 block sums (tree fixed by the block size), merged into the row's fp64
// state by one thread in chunk order: no atomics, the same bits every run.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define LSE_THREADS     128
#define LSE_WARPS       (LSE_THREADS / 32)
#define DLOGITS_THREADS 256

__global__ void __launch_bounds__(LSE_THREADS) lse_init_kernel(CudaLseRow *st, int rows) {
    int r = blockIdx.x * LSE_THREADS + threadIdx.x;
    if (r < rows) {
        CudaLseRow s;
        s.max = -INFINITY;
        s.target_logit = 0.0f;
        s.sum = 0.0, s.zsum = 0.0, s.ez = 0.0;
        s.argmax = 0;
        st[r] = s;
    }
}

// One block per row of the chunk: logits row r (cols values from column c0 of the vocabulary).
__global__ void __launch_bounds__(LSE_THREADS)
    lse_chunk_kernel(CudaLseRow *st, const float *logits, int ld, int cols, int c0,
                     const int *target) {
    __shared__ float scratch[LSE_WARPS + 1];
    CudaLseRow *row = st + blockIdx.x;
    const float *z = logits + (size_t)blockIdx.x * ld;
    float prev_max = row->max;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += LSE_THREADS)
        m = z[j] > m ? z[j] : m;
    float chunk_max = block_max<LSE_THREADS>(m, scratch);
    // the first column holding the chunk's maximum (argmax's first index): the largest -j
    float first = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += LSE_THREADS)
        if (z[j] == chunk_max && -(float)j > first) first = -(float)j;
    first = block_max<LSE_THREADS>(first, scratch);
    float mm = chunk_max > prev_max ? chunk_max : prev_max;
    float s = 0.0f, ez = 0.0f, zs = 0.0f;
    for (int j = threadIdx.x; j < cols; j += LSE_THREADS) {
        float e = expf(z[j] - mm);
        s += e, ez += e * (z[j] - mm), zs += z[j];
    }
    s = block_sum<LSE_THREADS>(s, scratch);
    ez = block_sum<LSE_THREADS>(ez, scratch);
    zs = block_sum<LSE_THREADS>(zs, scratch);
    if (threadIdx.x == 0) { // the CPU's lse_update_stats merge, in fp64
        double scale = exp((double)prev_max - (double)mm);
        if (row->sum > 0) row->ez = scale * (row->ez + ((double)prev_max - (double)mm) * row->sum);
        row->ez += ez;
        row->sum = row->sum * scale + s;
        row->zsum += zs;
        if (chunk_max > prev_max) row->argmax = c0 + (int)(-first);
        row->max = mm;
        int t = target[blockIdx.x] - c0;
        if (t >= 0 && t < cols) row->target_logit = z[t];
    }
}

__global__ void __launch_bounds__(LSE_THREADS)
    lse_finish_kernel(float *logp, LogitStats *stats, const CudaLseRow *st, int rows, int vocab) {
    int r = blockIdx.x * LSE_THREADS + threadIdx.x;
    if (r >= rows) return;
    CudaLseRow a = st[r];
    double lse = (double)a.max + log(a.sum);
    logp[r] = (float)((double)a.target_logit - lse);
    if (stats) {
        LogitStats s;
        s.mean_logit = (float)(a.zsum / vocab);
        s.entropy = (float)(log(a.sum) - a.ez / a.sum);
        s.argmax = a.argmax;
        stats[r] = s;
    }
}

// In place: logits (rows, cols) of columns c0.. into dlogits = g ([j = target] - softmax_j).
__global__ void __launch_bounds__(DLOGITS_THREADS)
    dlogits_kernel(float *logits, int ld, const CudaLseRow *st, const float *dlogp,
                   const int *target, int cols, int c0) {
    int r = blockIdx.y;
    int j = blockIdx.x * DLOGITS_THREADS + threadIdx.x;
    if (j >= cols) return;
    float g = dlogp[r];
    float lse = (float)((double)st[r].max + log(st[r].sum));
    float *z = logits + (size_t)r * ld;
    float d = -g * expf(z[j] - lse);
    if (target[r] - c0 == j) d += g;
    z[j] = d;
}

extern "C" int cuda_lse_init(CudaLseRow *st, int rows, void *stream) {
    if (rows == 0) return 0;
    return (int)CUDA_LAUNCH(lse_init_kernel, (rows + LSE_THREADS - 1) / LSE_THREADS, LSE_THREADS, 0,
                            (cudaStream_t)stream, st, rows);
}

extern "C" int cuda_lse_chunk(CudaLseRow *st, const float *logits, int ld, int rows, int cols,
                              int c0, const int *target, void *stream) {
    if (rows == 0) return 0;
    return (int)CUDA_LAUNCH(lse_chunk_kernel, rows, LSE_THREADS, 0, (cudaStream_t)stream, st,
                            logits, ld, cols, c0, target);
}

extern "C" int cuda_lse_finish(float *logp, LogitStats *stats, const CudaLseRow *st, int rows,
                               int vocab, void *stream) {
    if (rows == 0) return 0;
    return (int)CUDA_LAUNCH(lse_finish_kernel, (rows + LSE_THREADS - 1) / LSE_THREADS, LSE_THREADS,
                            0, (cudaStream_t)stream, logp, stats, st, rows, vocab);
}

extern "C" int cuda_dlogits(float *logits, int ld, const CudaLseRow *st, const float *dlogp,
                            const int *target, int rows, int cols, int c0, void *stream) {
    if (rows == 0) return 0;
    dim3 grid((cols + DLOGITS_THREADS - 1) / DLOGITS_THREADS, rows);
    return (int)CUDA_LAUNCH(dlogits_kernel, grid, DLOGITS_THREADS, 0, (cudaStream_t)stream, logits,
                            ld, st, dlogp, target, cols, c0);
}
