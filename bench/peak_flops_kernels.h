/* The machine's own arithmetic peak, measured by register-resident microkernels: chains of
 * independent multiply-adds (enough accumulators to cover the instruction's latency at its
 * throughput), no memory traffic inside the loop. MFU is credited against these figures, not
 * against whatever a GEMM library reaches (bench/peak_flops.c, bench/README.md).
 *
 * Every kernel computes something with a closed form, so that its work cannot be optimised away
 * and a test can check it did all of it (tests/test_peak_flops.c):
 *   accumulator lane j starts at j * PEAK_INIT_UNIT and gains increment_per_iter * step in each
 *   of the iters iterations (x * 1 + step for an FMA; the bf16 dot products of ones and step,
 *   two of them per lane for vdpbf16ps, 32 per element for an AMX tile product).
 * With step a power of two and iters up to PEAK_EXACT_ITERS the results are exact in fp32. */
#ifndef RLHF_BENCH_PEAK_FLOPS_KERNELS_H
#define RLHF_BENCH_PEAK_FLOPS_KERNELS_H

#include <stdbool.h>

typedef enum {
    PEAK_FMA_AVX2,       /* fp32 vfmadd on ymm (8 lanes, 16 FLOP an instruction) */
    PEAK_FMA_AVX512,     /* fp32 vfmadd on zmm (16 lanes, 32 FLOP) */
    PEAK_DOT_AVX512BF16, /* vdpbf16ps on zmm: 16 fp32 lanes, each 2 bf16 products (64 FLOP) */
    PEAK_DOT_AMXBF16,    /* tdpbf16ps: a 16x16 fp32 tile += 16x32 by 32x16 bf16 (16384 FLOP) */
    PEAK_N_KERNELS
} PeakKernel;

typedef struct {
    const char *name;       /* as the JSON reports it */
    const char *precision;  /* "fp32" or "bf16" (inputs; every kernel sums in fp32) */
    int lanes;              /* fp32 accumulator values the kernel writes back */
    int increment_per_iter; /* products of one and step added to a lane per iteration */
    double flops_per_iter;  /* FLOPs of one iteration (a multiply-add counts 2) */
} PeakKernelInfo;

#define PEAK_INIT_UNIT   (1.0f / 16.0f) /* lane j starts at j / 16 */
#define PEAK_MAX_LANES   1024
#define PEAK_EXACT_ITERS 4096 /* with step 2^-12: every partial sum stays exact (below 2^7) */

/* The kernel's description (k < PEAK_N_KERNELS). */
const PeakKernelInfo *peak_kernel_info(PeakKernel k);

/* Whether this CPU and OS can run kernel k: its cpuid feature bits, the register state the OS
 * saves (XCR0), and for AMX Linux's permission for tile data (asked for here, once a process). */
bool peak_kernel_available(PeakKernel k);

/* Runs kernel k (available) for iters >= 1 iterations on the calling thread and writes its
 * peak_kernel_info(k)->lanes accumulator values to out; returns the FLOPs executed
 * (iters * flops_per_iter). step must be exactly representable in bf16 (a power of two). */
double peak_kernel_run(PeakKernel k, long iters, float step, float *out);

#endif
