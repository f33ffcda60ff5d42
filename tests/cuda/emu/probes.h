/* The probe kernels of probes.cu, launched from C (tests/cuda/test_cuda_emu.c). Each returns
 * the launch's cudaError_t; pointers are (emulated) device memory. */
#ifndef RLHF_TESTS_CUDA_EMU_PROBES_H
#define RLHF_TESTS_CUDA_EMU_PROBES_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#define PROBE_SLOTS 10

/* 64 threads x PROBE_SLOTS shuffle results (see probes.cu's shuffle_kernel). */
int probe_shuffles(int *out);
/* out[t] = shared value thread 0 wrote, read with or without a barrier between. */
int probe_race(float *out, int threads, int barrier);
/* out[t] = bits of shared memory never written. */
int probe_unwritten_shared(unsigned *out, int threads);
/* order[k] = the block that started k-th; *counter must be 0. */
int probe_block_order(int *order, int *counter, int blocks);
/* order[k] = the thread of one block that ran k-th; *counter must be 0. */
int probe_thread_order(int *order, int *counter, int threads);
/* D = A B + C through kernels/cuda/mma.cuh's mma_bf16_16816, one warp: a (16x16) and b (16x8)
 * row-major bf16 bits, c and d (16x8) row-major fp32; each lane loads its fragments with the
 * mma_*_coord helpers. */
int probe_mma(float *d, const uint16_t *a, const uint16_t *b, const float *c);
/* mma.cuh's fragment helpers from C: which 'a', 'b' or 'c'; element i of lane's fragment. */
void probe_mma_coord(char which, int lane, int i, int *row, int *col);
/* sums[b] = sum over the block's threads t of 1000 * b + t; neighbour[b * threads + t] = the sum
 * of warp (t / 32 + 1) % warps of block b. threads: a multiple of 32, at most 1024. */
int probe_block_sum(long long *sums, long long *neighbour, int blocks, int threads);
/* A launch of 1025 threads per block (invalid). */
int probe_bad_block(void);
/* These abort the process with cuda-emu's message. */
int probe_divergent_barrier(void);
int probe_missing_lane(void);
int probe_caller_outside_mask(void);
int probe_mask_disagreement(void);
int probe_partial_warp(void);
int probe_dynamic_shared(void);
int probe_mma_missing_lane(void);

#ifdef __cplusplus
}
#endif

#endif
