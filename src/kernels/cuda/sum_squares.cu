// Σ g² (the square of clip_grad_norm_'s norm) in two launches and a fixed tree: up to
// CUDA_SUM_SQUARES_PARTIALS blocks (fewer for a small n: a norm's weight is one block, not 128
// mostly idle ones) each sum a grid-stride slice in fp32 per thread and reduce it with block_sum,
// then one block adds the blocks' partials in double. The partition depends only on n: bitwise
// reproducible, no atomics.
//
// The multi-tensor form runs the same two stages for every tensor of a table at once (one launch
// each: a block finds its tensor by a binary search over the tensors' first blocks), then a third
// launch adds the tensors' sums in ascending order in double, as a host loop over the per-tensor
// form does. The stages' bodies are shared (partial_of_block, total_of_partials), so each
// tensor's sum has the per-tensor kernel's bits.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define SUMSQ_THREADS 256

// The partition of n values: blocks of the first stage.
static int partial_blocks(size_t n) {
    size_t needed = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    return needed < CUDA_SUM_SQUARES_PARTIALS ? (needed ? (int)needed : 1)
                                              : CUDA_SUM_SQUARES_PARTIALS;
}

// Block b of `blocks`: the fp32 sum of squares of its grid-stride slice of g (every thread gets
// it). Every thread of the block calls it (block_sum's barriers).
__device__ __forceinline__ float partial_of_block(const float *g, size_t n, int b, int blocks,
                                                  float *scratch) {
    float ss = 0.0f;
    for (size_t i = (size_t)b * SUMSQ_THREADS + threadIdx.x; i < n;
         i += (size_t)blocks * SUMSQ_THREADS)
        ss += g[i] * g[i];
    return block_sum<SUMSQ_THREADS>(ss, scratch);
}

// The double sum of one tensor's `blocks` partials (every thread gets it).
__device__ __forceinline__ double total_of_partials(const float *partials, int blocks,
                                                    double *scratch) {
    double s = 0.0;
    for (int i = threadIdx.x; i < blocks; i += SUMSQ_THREADS)
        s += (double)partials[i];
    return block_sum<SUMSQ_THREADS>(s, scratch);
}

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_partial_kernel(float *partials, const float *g, size_t n, int blocks) {
    __shared__ float scratch[SUMSQ_THREADS / 32 + 1];
    float total = partial_of_block(g, n, blockIdx.x, blocks, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_final_kernel(double *out, const float *partials, int blocks) {
    __shared__ double scratch[SUMSQ_THREADS / 32 + 1];
    double total = total_of_partials(partials, blocks, scratch);
    if (threadIdx.x == 0) *out = total;
}

extern "C" int cuda_sum_squares(double *out, const float *g, size_t n, float *partials,
                                void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int blocks = partial_blocks(n);
    int err = (int)CUDA_LAUNCH(sum_squares_partial_kernel, blocks, SUMSQ_THREADS, 0, s, partials, g,
                               n, blocks);
    if (!err)
        err = (int)CUDA_LAUNCH(sum_squares_final_kernel, 1, SUMSQ_THREADS, 0, s, out, partials,
                               blocks);
    return err;
}

// ---- multi-tensor ----

// Block blockIdx.x of the first stage: partial `blockIdx.x - first_block` of the last tensor
// whose first_block is <= blockIdx.x (first blocks ascend strictly: every tensor has >= 1).
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_multi_partial_kernel(float *partials, const CudaSumSqTensor *table, int count) {
    __shared__ float scratch[SUMSQ_THREADS / 32 + 1];
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table[mid].first_block <= (int)blockIdx.x)
            lo = mid;
        else
            hi = mid - 1;
    }
    const CudaSumSqTensor t = table[lo];
    float total = partial_of_block(t.g, t.n, (int)blockIdx.x - t.first_block, t.blocks, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Block t: tensor t's sum, from its partials.
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_multi_final_kernel(double *tensor_sums, const float *partials,
                                   const CudaSumSqTensor *table) {
    __shared__ double scratch[SUMSQ_THREADS / 32 + 1];
    const CudaSumSqTensor t = table[blockIdx.x];
    double total = total_of_partials(partials + t.first_block, t.blocks, scratch);
    if (threadIdx.x == 0) tensor_sums[blockIdx.x] = total;
}

// One thread: the tensors' sums in ascending order, as the host loop adds them.
__global__ void __launch_bounds__(32)
    sum_squares_multi_total_kernel(double *out, const double *tensor_sums, int count) {
    if (threadIdx.x != 0) return;
    double total = 0.0;
    for (int t = 0; t < count; t++)
        total += tensor_sums[t];
    *out = total;
}

extern "C" int cuda_sum_squares_multi_plan(CudaSumSqTensor *table, int count) {
    int blocks = 0;
    for (int t = 0; t < count; t++) {
        table[t].first_block = blocks;
        table[t].blocks = partial_blocks(table[t].n);
        blocks += table[t].blocks;
    }
    return blocks;
}

extern "C" int cuda_sum_squares_multi(double *out, const CudaSumSqTensor *table, int count,
                                      int partials_n, float *partials, double *tensor_sums,
                                      void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int err = (int)CUDA_LAUNCH(sum_squares_multi_partial_kernel, partials_n, SUMSQ_THREADS, 0, s,
                               partials, table, count);
    if (!err)
        err = (int)CUDA_LAUNCH(sum_squares_multi_final_kernel, count, SUMSQ_THREADS, 0, s,
                               tensor_sums, partials, table);
    if (!err)
        err =
            (int)CUDA_LAUNCH(sum_squares_multi_total_kernel, 1, 32, 0, s, out, tensor_sums, count);
    return err;
}
