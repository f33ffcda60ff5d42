// One torch AdamW step in fp32, elementwise over a grid-stride loop, the CPU's formulas
// (kernels/cpu/adamw.c) in the same order and roundings, so the update is the CPU's, bit for bit.
//
// The multi-tensor form (torch's multi_tensor_apply in spirit) updates every tensor of a table in
// one launch: the tensors are cut into chunks of CUDA_ADAMW_CHUNK values, a block takes chunks in
// a grid-stride loop and finds each one's tensor by a binary search over the first chunks. The
// update of a value is adamw_value in both forms: the same bits whichever launch runs it.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ADAMW_THREADS 256
#define ADAMW_BLOCKS  1024

// Value i of p, m, v from g[i], with the tensor's shrink. Every operation is a correctly rounded
// intrinsic, in the CPU's order (adamw_f32_update, C11: no contraction), so nvcc cannot fuse a
// product into an FMA: it fused p * shrink into the final subtraction in one of the two kernels
// and not in the other (an H200, 2026-11-28: the multi-tensor update's p was not the per-tensor
// kernel's), and either fusion would leave the CPU's bits.
__device__ __forceinline__ void adamw_value(float *p, float *m, float *v, const float *g, size_t i,
                                            const AdamWStepCoefs &c, float shrink, float step_size,
                                            float inv_bc2_sqrt) {
    float gi = __fmul_rn(g[i], c.grad_scale), mi = m[i], vi = v[i];
    float pi = __fmul_rn(p[i], shrink);
    mi = __fadd_rn(mi, __fmul_rn(__fsub_rn(1.0f, c.beta1), __fsub_rn(gi, mi)));
    vi = __fadd_rn(__fmul_rn(c.beta2, vi), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, c.beta2), gi), gi));
    float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_bc2_sqrt), c.eps);
    p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
}

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(float *p, float *m, float *v, const float *g, size_t numel, AdamWStepCoefs c,
                 float step_size, float inv_bc2_sqrt) {
    for (size_t i = (size_t)blockIdx.x * ADAMW_THREADS + threadIdx.x; i < numel;
         i += (size_t)gridDim.x * ADAMW_THREADS)
        adamw_value(p, m, v, g, i, c, c.shrink, step_size, inv_bc2_sqrt);
}

extern "C" int cuda_adamw(float *p, float *m, float *v, const float *g, size_t numel,
                          const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt,
                          void *stream) {
    if (numel == 0) return 0;
    size_t blocks = (numel + ADAMW_THREADS - 1) / ADAMW_THREADS;
    return (int)CUDA_LAUNCH(adamw_kernel, blocks < ADAMW_BLOCKS ? (int)blocks : ADAMW_BLOCKS,
                            ADAMW_THREADS, 0, (cudaStream_t)stream, p, m, v, g, numel, *c,
                            step_size, inv_bc2_sqrt);
}

// ---- multi-tensor ----

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_multi_kernel(const CudaAdamWTensor *table, int count, size_t chunks, AdamWStepCoefs c,
                       float step_size, float inv_bc2_sqrt) {
    for (size_t k = blockIdx.x; k < chunks; k += gridDim.x) {
        // the last tensor whose first chunk is <= k: an empty tensor shares its first chunk with
        // the next one and is passed over
        int lo = 0, hi = count - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (table[mid].first_chunk <= k)
                lo = mid;
            else
                hi = mid - 1;
        }
        const CudaAdamWTensor t = table[lo];
        size_t begin = (k - t.first_chunk) * CUDA_ADAMW_CHUNK;
        size_t end = begin + CUDA_ADAMW_CHUNK < t.numel ? begin + CUDA_ADAMW_CHUNK : t.numel;
        for (size_t i = begin + threadIdx.x; i < end; i += ADAMW_THREADS)
            adamw_value(t.p, t.m, t.v, t.g, i, c, t.shrink, step_size, inv_bc2_sqrt);
    }
}

extern "C" size_t cuda_adamw_multi_plan(CudaAdamWTensor *table, int count) {
    size_t chunks = 0;
    for (int t = 0; t < count; t++) {
        table[t].first_chunk = chunks;
        chunks += (table[t].numel + CUDA_ADAMW_CHUNK - 1) / CUDA_ADAMW_CHUNK;
    }
    return chunks;
}

extern "C" int cuda_adamw_multi(const CudaAdamWTensor *table, int count, size_t chunks,
                                const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt,
                                void *stream) {
    if (chunks == 0 || count == 0) return 0;
    int blocks = chunks < ADAMW_BLOCKS ? (int)chunks : ADAMW_BLOCKS;
    return (int)CUDA_LAUNCH(adamw_multi_kernel, blocks, ADAMW_THREADS, 0, (cudaStream_t)stream,
                            table, count, chunks, *c, step_size, inv_bc2_sqrt);
}
