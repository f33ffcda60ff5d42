// Small kernels that probe cuda-emu itself (tests/cuda/test_cuda_emu.c): shuffle semantics,
// the checks of cuda_emu.h's rules 3-5, and the random orders of rules 1-2. Each is launched
// by a C wrapper; the C side checks the results against CUDA's documented semantics.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/mma.cuh"
#include "probes.h"

// Per thread (64: two warps), PROBE_SLOTS results in out[thread * PROBE_SLOTS + k].
__global__ void shuffle_kernel(int *out) {
    int t = threadIdx.x, lane = t % 32, v = 1000 + t;
    int *o = out + t * PROBE_SLOTS;
    o[0] = __shfl_sync(0xffffffffu, v, 5);
    o[1] = __shfl_sync(0xffffffffu, v, 5, 8);
    o[2] = __shfl_xor_sync(0xffffffffu, v, 3);
    o[3] = __shfl_xor_sync(0xffffffffu, v, 12, 8); // lanes ^ 12 beyond the segment: own value
    o[4] = __shfl_down_sync(0xffffffffu, v, 3);
    o[5] = __shfl_down_sync(0xffffffffu, v, 3, 8);
    o[6] = __shfl_up_sync(0xffffffffu, v, 2, 8);
    o[7] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    // two halves of a warp at separate collectives, each over its own lanes
    unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    o[8] = __shfl_xor_sync(half, v, 1);
    // a source lane outside the mask: undefined on a GPU, poison (all ones) here
    o[9] = __shfl_xor_sync(half, v, 16);
}

// Thread 0 writes shared memory that the others read; `barrier` says whether a __syncthreads
// orders them. out[t] = what thread t read.
__global__ void race_kernel(float *out, int barrier) {
    __shared__ float cell;
    if (threadIdx.x == 0) cell = 42.0f;
    if (barrier) __syncthreads();
    out[threadIdx.x] = cell;
}

// Shared memory read before any write: the poison of rule 3.
__global__ void unwritten_shared_kernel(unsigned *out) {
    __shared__ unsigned cell[4];
    out[threadIdx.x] = cell[threadIdx.x % 4];
}

// The order blocks start in: a counter claimed by each block's thread 0 (rule 6 makes the
// plain atomicAdd exact).
__global__ void block_order_kernel(int *order, int *counter) {
    if (threadIdx.x == 0) order[atomicAdd(counter, 1)] = blockIdx.x;
}

// The order threads of one block run in: each claims a ticket.
__global__ void thread_order_kernel(int *order, int *counter) {
    order[atomicAdd(counter, 1)] = threadIdx.x;
}

// Rule 4: threads 64.. return, the others wait at a barrier.
__global__ void divergent_barrier_kernel(void) {
    if (threadIdx.x >= 64) return;
    __syncthreads();
}

// Rule 5: lanes 16.. return, the others shuffle with the full mask.
__global__ void missing_lane_kernel(void) {
    if (threadIdx.x % 32 >= 16) return;
    (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Rule 5: the caller is outside its own mask.
__global__ void caller_outside_mask_kernel(void) {
    (void)__shfl_down_sync(0xfffffffeu, 1.0f, 1);
}

// Rule 5: lanes disagree about the mask.
__global__ void mask_disagreement_kernel(void) {
    unsigned mask = threadIdx.x == 3 ? 0x0000ffffu : 0xffffffffu;
    (void)__shfl_xor_sync(mask, 1.0f, 1);
}

// Rule 5: a block of 48 threads, whose second warp has 16 lanes, shuffles with the full mask.
__global__ void partial_warp_kernel(void) {
    (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// A block of any size up to 1024 sums v = 1000 * block + thread: a shuffle reduction per warp,
// the warp sums through shared memory behind a barrier, then warp 0 reduces them. Each thread
// also reports the sum of its neighbouring warp (read after the barrier), so the barrier and the
// shuffles of every warp of a full-size block are exercised. sums[block], neighbour[global thread].
__global__ void block_sum_kernel(long long *sums, long long *neighbour) {
    __shared__ long long warp_sums[32];
    int t = threadIdx.x, lane = t % 32, warp = t / 32, warps = (blockDim.x + 31) / 32;
    long long v = 1000LL * blockIdx.x + t;
    for (int d = 16; d > 0; d /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    neighbour[blockIdx.x * blockDim.x + t] = warp_sums[(warp + 1) % warps];
    if (warp == 0) {
        long long s = lane < warps ? warp_sums[lane] : 0;
        for (int d = 16; d > 0; d /= 2)
            s += __shfl_down_sync(0xffffffffu, s, d);
        if (lane == 0) sums[blockIdx.x] = s;
    }
}

extern "C" int probe_block_sum(long long *sums, long long *neighbour, int blocks, int threads) {
    return (int)CUDA_LAUNCH(block_sum_kernel, blocks, threads, 0, (cudaStream_t)0, sums, neighbour);
}
extern "C" int probe_shuffles(int *out) {
    return (int)CUDA_LAUNCH(shuffle_kernel, 1, 64, 0, (cudaStream_t)0, out);
}
extern "C" int probe_race(float *out, int threads, int barrier) {
    return (int)CUDA_LAUNCH(race_kernel, 1, threads, 0, (cudaStream_t)0, out, barrier);
}
extern "C" int probe_unwritten_shared(unsigned *out, int threads) {
    return (int)CUDA_LAUNCH(unwritten_shared_kernel, 1, threads, 0, (cudaStream_t)0, out);
}
extern "C" int probe_block_order(int *order, int *counter, int blocks) {
    return (int)CUDA_LAUNCH(block_order_kernel, blocks, 32, 0, (cudaStream_t)0, order, counter);
}
extern "C" int probe_thread_order(int *order, int *counter, int threads) {
    return (int)CUDA_LAUNCH(thread_order_kernel, 1, threads, 0, (cudaStream_t)0, order, counter);
}
extern "C" int probe_bad_block(void) {
    return (int)CUDA_LAUNCH(block_order_kernel, 1, 1025, 0, (cudaStream_t)0, (int *)0, (int *)0);
}
extern "C" int probe_divergent_barrier(void) {
    return (int)CUDA_LAUNCH(divergent_barrier_kernel, 1, 128, 0, (cudaStream_t)0);
}
extern "C" int probe_missing_lane(void) {
    return (int)CUDA_LAUNCH(missing_lane_kernel, 1, 32, 0, (cudaStream_t)0);
}
extern "C" int probe_caller_outside_mask(void) {
    return (int)CUDA_LAUNCH(caller_outside_mask_kernel, 1, 32, 0, (cudaStream_t)0);
}
extern "C" int probe_mask_disagreement(void) {
    return (int)CUDA_LAUNCH(mask_disagreement_kernel, 1, 32, 0, (cudaStream_t)0);
}
extern "C" int probe_partial_warp(void) {
    return (int)CUDA_LAUNCH(partial_warp_kernel, 1, 48, 0, (cudaStream_t)0);
}
extern "C" int probe_dynamic_shared(void) {
    return (int)CUDA_LAUNCH(partial_warp_kernel, 1, 32, 1024, (cudaStream_t)0);
}

// One warp: each lane loads its fragments of a, b, c by mma.cuh's helpers, multiplies, and
// stores its part of d by the same helpers.
__global__ void mma_kernel(float *d, const uint16_t *a, const uint16_t *b, const float *c) {
    int lane = threadIdx.x;
    unsigned ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
    float cr[4], dr[4];
    for (int i = 0; i < 8; i++) {
        MmaCoord at = mma_a_coord(lane, i);
        ar[i >> 1] |= (unsigned)a[at.row * 16 + at.col] << ((i & 1) * 16);
    }
    for (int i = 0; i < 4; i++) {
        MmaCoord at = mma_b_coord(lane, i);
        br[i >> 1] |= (unsigned)b[at.row * 8 + at.col] << ((i & 1) * 16);
    }
    for (int i = 0; i < 4; i++) {
        MmaCoord at = mma_c_coord(lane, i);
        cr[i] = c[at.row * 8 + at.col];
    }
    mma_bf16_16816(dr, ar, br, cr);
    for (int i = 0; i < 4; i++) {
        MmaCoord at = mma_c_coord(lane, i);
        d[at.row * 8 + at.col] = dr[i];
    }
}

extern "C" int probe_mma(float *d, const uint16_t *a, const uint16_t *b, const float *c) {
    return (int)CUDA_LAUNCH(mma_kernel, 1, 32, 0, (cudaStream_t)0, d, a, b, c);
}

extern "C" void probe_mma_coord(char which, int lane, int i, int *row, int *col) {
    MmaCoord at = which == 'a'   ? mma_a_coord(lane, i)
                  : which == 'b' ? mma_b_coord(lane, i)
                                 : mma_c_coord(lane, i);
    *row = at.row, *col = at.col;
}

// Lanes 16-31 return before the mma: .aligned needs the whole warp, so cuda-emu aborts.
__global__ void mma_missing_lane_kernel(float *d) {
    if (threadIdx.x >= 16) return;
    unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    mma_bf16_16816(c, a, b, c);
    d[threadIdx.x] = c[0];
}

extern "C" int probe_mma_missing_lane(void) {
    float *d;
    cudaMalloc((void **)&d, 32 * sizeof *d);
    return (int)CUDA_LAUNCH(mma_missing_lane_kernel, 1, 32, 0, (cudaStream_t)0, d);
}
