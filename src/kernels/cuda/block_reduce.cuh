// Block-wide reductions. block_sum: a sum in a tree fixed by the block size (bitwise reproducible,
// no atomics): each warp reduces with xor shuffles, lane 0 of every warp leaves its sum in
// `scratch`, and the first warp reduces those. Every thread of the block must call it (it holds
// __syncthreads) and gets the total. THREADS is the block size, a multiple of 32 up to 1024;
// scratch holds THREADS / 32 + 1 values of shared memory, free again when the call returns.
#ifndef RLHF_KERNELS_CUDA_BLOCK_REDUCE_CUH
#define RLHF_KERNELS_CUDA_BLOCK_REDUCE_CUH

#include "kernels/cuda/cuda_device.h"

#define FULL_WARP 0xffffffffu

template <class T> __device__ __forceinline__ T warp_sum(T v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(FULL_WARP, v, off);
    return v;
}

template <class T> __device__ __forceinline__ T warp_max(T v) {
    for (int off = 16; off > 0; off >>= 1) {
        T o = __shfl_xor_sync(FULL_WARP, v, off);
        v = o > v ? o : v;
    }
    return v;
}

template <int THREADS, class T> __device__ __forceinline__ T block_sum(T v, T *scratch) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block of whole warps");
    const int warps = THREADS / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads(); // every warp's sum is written before the first warp reads them
    if (warp == 0) {
        v = lane < warps ? scratch[lane] : (T)0;
        v = warp_sum(v);
        if (lane == 0) scratch[warps] = v;
    }
    __syncthreads(); // the total is written before anyone reads it
    // No third barrier: the next call writes scratch[warps] only after its first barrier, which
    // no thread passes before it has read this total.
    return scratch[warps];
}

// The block's maximum, as block_sum's contract says (-INFINITY is the identity).
template <int THREADS, class T> __device__ __forceinline__ T block_max(T v, T *scratch) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block of whole warps");
    const int warps = THREADS / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads(); // every warp's maximum is written before the first warp reads them
    if (warp == 0) {
        v = lane < warps ? scratch[lane] : (T)-INFINITY;
        v = warp_max(v);
        if (lane == 0) scratch[warps] = v;
    }
    __syncthreads(); // the maximum is written before anyone reads it
    return scratch[warps];
}

#endif
