/* The peak microkernels (bench/peak_flops_kernels.h) did the arithmetic they are credited with:
 * for every kernel this CPU runs, each accumulator lane after iters iterations equals its closed
 * form j / 16 + iters * increment_per_iter * step, bit for bit (exact in fp32 for these steps
 * and counts), at several iteration counts, and the FLOPs returned are iters * flops_per_iter.
 * A kernel that skipped iterations, lanes or accumulators, or that the compiler had folded to
 * fewer operations per iteration than counted, would give other values. The fp32 FMA kernel of
 * an x86-64 machine with AVX2 (every machine this project builds on) must be among them. */
#include "harness.h"
#include "peak_flops_kernels.h"

#include <math.h>
#include <string.h>

/* Runs kernel k for iters iterations and compares every lane with its closed form. */
static void check_closed_form(PeakKernel k, long iters, float step) {
    const PeakKernelInfo *info = peak_kernel_info(k);
    float out[PEAK_MAX_LANES];
    memset(out, 0xff, sizeof out); /* NaN: a lane the kernel did not write fails */
    double flops = peak_kernel_run(k, iters, step, out);
    CHECK(flops == (double)iters * info->flops_per_iter, "%s: %.0f FLOPs for %ld iterations",
          info->name, flops, iters);
    int bad = 0, first = -1;
    for (int j = 0; j < info->lanes; j++) {
        float want =
            (float)j * PEAK_INIT_UNIT + (float)iters * (float)info->increment_per_iter * step;
        if (out[j] != want) {
            if (first < 0) first = j;
            bad++;
        }
    }
    if (first >= 0)
        CHECK(bad == 0,
              "%s, %ld iterations, step %g: %d of %d lanes wrong (lane %d: %.9g, closed form %.9g)",
              info->name, iters, step, bad, info->lanes, first, out[first],
              (float)first * PEAK_INIT_UNIT +
                  (float)iters * (float)info->increment_per_iter * step);
    else
        CHECK(bad == 0, "%s", info->name);
}

int main(void) {
    int ran = 0;
    for (int k = 0; k < PEAK_N_KERNELS; k++) {
        if (!peak_kernel_available((PeakKernel)k)) {
            printf("%s: not on this CPU, skipped\n", peak_kernel_info((PeakKernel)k)->name);
            continue;
        }
        ran++;
        check_closed_form((PeakKernel)k, 1, 1.0f / 4096.0f);
        check_closed_form((PeakKernel)k, 777, 1.0f / 4096.0f);
        check_closed_form((PeakKernel)k, PEAK_EXACT_ITERS, 1.0f / 4096.0f);
        check_closed_form((PeakKernel)k, 1000, 1.0f / 8192.0f);
    }
    CHECK(peak_kernel_available(PEAK_FMA_AVX2),
          "the AVX2 FMA kernel is available on x86-64 with AVX2");
    CHECK(ran > 0, "some kernel ran");
    return harness_finish("test_peak_flops");
}
