/* The machine's fp32 FMA and bf16 dot-product peaks, measured now (peak_flops_kernels.h): each
 * kernel the CPU has, on one core and on all cores (one OpenMP thread per core, each running the
 * kernel on its own registers, timed from before the parallel region to after it). The model
 * benches (dpo_step_bench.py, grpo_step_bench.py) run this in the same run as the step and
 * report MFU against its figures next to the GEMM library's. Prints one JSON line:
 *   {"cpu": ..., "threads": N, "kernels": {NAME: {"precision", "gflops_1_thread",
 *    "gflops_all_threads", "gflops_per_cpu_second"}}, "unavailable": [...], "fp32_peak_gflops",
 * "fp32_peak_kernel", "bf16_peak_gflops", "bf16_peak_kernel"} where the peaks are the best
 * all-threads figure of each precision (0 and null when none), and gflops_per_cpu_second is one
 * thread's FLOPs over the CPU time it was given (a core's rate while it ran the kernel, whatever
 * share of the machine the process got).
 *
 * Usage: peak_flops [seconds per measurement, default 0.2] [repetitions, default 3]
 *   Each figure is the best of the repetitions: the machine may be shared, and the best is the
 *   closest to what the cores can do. */
#include "peak_flops_kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GFLOP/s of kernel k for iters iterations on `threads` threads at once (wall clock); *per_cpu_s
 * (when not NULL) gets GFLOP per second of CPU time the threads were given, summed over them:
 * on a shared machine the wall-clock figure is the share the scheduler gave, this one what
 * the cores did while running the kernel. */
static double measure(PeakKernel k, long iters, int threads, double *per_cpu_s) {
    double flops = 0, cpu = 0;
    double t0 = now_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : flops, cpu)
    {
        float out[PEAK_MAX_LANES]; /* each thread's own accumulators */
        double c0 = thread_cpu_seconds();
        flops += peak_kernel_run(k, iters, 1.0f / 4096.0f, out);
        cpu += thread_cpu_seconds() - c0;
    }
    double t = now_seconds() - t0;
    if (per_cpu_s) *per_cpu_s = flops / cpu * 1e-9;
    return flops / t * 1e-9;
}

/* Iterations that take about `seconds` on one thread. */
static long calibrate(PeakKernel k, double seconds) {
    long iters = 1 << 12;
    for (;;) {
        double gflops = measure(k, iters, 1, NULL);
        double t = iters * peak_kernel_info(k)->flops_per_iter / (gflops * 1e9);
        if (t >= seconds / 4 || iters > (1L << 40)) return (long)(iters * (seconds / t)) + 1;
        iters *= 4;
    }
}

static void cpu_model(char *name, size_t size) {
    snprintf(name, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(name, size, "%s", colon + 2);
            name[strcspn(name, "\n\"\\")] = '\0';
            break;
        }
    }
    fclose(f);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.2;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (seconds <= 0 || reps < 1) {
        fprintf(stderr, "usage: peak_flops [seconds per measurement > 0] [repetitions >= 1]\n");
        return 2;
    }
    int threads = omp_get_max_threads();
    char cpu_name[256];
    cpu_model(cpu_name, sizeof cpu_name);
    printf("{\"cpu\": \"%s\", \"threads\": %d, \"kernels\": {", cpu_name, threads);
    double peak[2] = {0, 0};
    const char *peak_name[2] = {NULL, NULL};
    const char *sep = "";
    for (int k = 0; k < PEAK_N_KERNELS; k++) {
        if (!peak_kernel_available((PeakKernel)k)) continue;
        const PeakKernelInfo *info = peak_kernel_info((PeakKernel)k);
        long iters = calibrate((PeakKernel)k, seconds);
        double one = 0, all = 0, cpu = 0;
        for (int r = 0; r < reps; r++) {
            double c1;
            double g1 = measure((PeakKernel)k, iters, 1, &c1);
            double gn = measure((PeakKernel)k, iters, threads, NULL);
            one = g1 > one ? g1 : one;
            all = gn > all ? gn : all;
            cpu = c1 > cpu ? c1 : cpu;
        }
        int p = strcmp(info->precision, "bf16") == 0;
        if (all > peak[p]) {
            peak[p] = all;
            peak_name[p] = info->name;
        }
        printf("%s\"%s\": {\"precision\": \"%s\", \"gflops_1_thread\": %.1f, "
               "\"gflops_all_threads\": %.1f, \"gflops_per_cpu_second\": %.1f}",
               sep, info->name, info->precision, one, all, cpu);
        sep = ", ";
    }
    printf("}, \"unavailable\": [");
    sep = "";
    for (int k = 0; k < PEAK_N_KERNELS; k++)
        if (!peak_kernel_available((PeakKernel)k)) {
            printf("%s\"%s\"", sep, peak_kernel_info((PeakKernel)k)->name);
            sep = ", ";
        }
    printf("]");
    for (int p = 0; p < 2; p++) {
        const char *label = p ? "bf16" : "fp32";
        printf(", \"%s_peak_gflops\": %.1f, \"%s_peak_kernel\": ", label, peak[p], label);
        if (peak_name[p])
            printf("\"%s\"", peak_name[p]);
        else
            printf("null");
    }
    printf("}\n");
    return 0;
}
