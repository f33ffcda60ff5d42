/* The fp32 decode products (packed_matmul_forward over weights packed beforehand) on one
 * shape: GFLOP per CPU-second of the process (getrusage: on a machine shared with other jobs,
 * what this work cost on its cores, whatever else ran) and per wall second, plus a hash of the
 * output bits, so two builds of the kernel can be compared for speed and for bit-identical
 * results on the same inputs (a fixed-seed fill). Nothing is asserted.
 * Usage: bench_packed_matmul ROWS IN_DIM OUT_DIM [reps]
 *   e.g. the 135M shape's products at 64 rows: 64 576 1536, 64 1536 576, 64 576 49152. */
#include "kernels/cpu/kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + (double)r.ru_stime.tv_sec +
           1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* a fixed xorshift stream in [-0.5, 0.5): the same inputs for every build */
static float next_value(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ROWS IN_DIM OUT_DIM [reps]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), in_dim = atoi(argv[2]), out_dim = atoi(argv[3]);
    int reps = argc > 4 ? atoi(argv[4]) : 20;
    if (n < 1 || in_dim < 1 || out_dim < 1 || reps < 1) {
        fprintf(stderr, "ROWS, IN_DIM, OUT_DIM and reps must be positive\n");
        return 2;
    }
    size_t wn = (size_t)in_dim * out_dim, xn = (size_t)n * in_dim, on = (size_t)n * out_dim;
    size_t pn = packed_weight_floats(in_dim, out_dim);
    float *w = malloc(wn * sizeof *w), *x = malloc(xn * sizeof *x), *out = malloc(on * sizeof *out);
    float *panels = aligned_alloc(64, (pn * sizeof(float) + 63) / 64 * 64);
    if (!w || !x || !out || !panels) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint32_t seed = 12345;
    for (size_t i = 0; i < wn; i++)
        w[i] = next_value(&seed);
    for (size_t i = 0; i < xn; i++)
        x[i] = next_value(&seed);
    PackedWeight p;
    memset(&p, 0, sizeof p);
    packed_weight_fill(&p, panels, w, in_dim, out_dim);
    packed_matmul_forward(out, x, &p, NULL, n); /* warm: caches, thread pool */
    double c0 = cpu_seconds(), t0 = wall_seconds();
    for (int r = 0; r < reps; r++)
        packed_matmul_forward(out, x, &p, NULL, n);
    double cpu = cpu_seconds() - c0, wall = wall_seconds() - t0;
    double gflop = 2.0 * n * in_dim * out_dim * reps / 1e9;
    uint32_t hash = 2166136261u; /* FNV-1a over the output's bits */
    for (size_t i = 0; i < on; i++) {
        uint32_t u;
        memcpy(&u, &out[i], sizeof u);
        hash = (hash ^ u) * 16777619u;
    }
    printf("%d x %d -> %d  %d reps  %.1f GFLOP/CPU-s  %.1f GFLOP/s wall  output hash %08x\n", n,
           in_dim, out_dim, reps, gflop / cpu, gflop / wall, hash);
    free(w), free(x), free(out), free(panels);
    return 0;
}
