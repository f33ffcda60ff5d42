/* The products of one linear layer under bf16 autocast against fp32, on a model's shapes: what
 * kernels/cpu/matmul_autocast.c's choice of path rests on. For each (rows, in, out): fp32 sgemm
 * (matmul_forward, matmul_backward's dX and dW); autocast_linear_forward / _backward as built, on
 * each path this CPU has (sgemm over bf16-rounded copies, and gemm_bf16's avx2, avx512, amx: the
 * activations' rounding and packing included, W's packing cached as in training, where it is
 * packed once per optimizer step); the forward through the packed AVX512_BF16 kernel of the
 * decode path (packed_matmul_bf16_forward), W rounded and packed outside the timing ("pack" is
 * that packing's own time); and gemm_bf16 alone per path, both factors packed beforehand (its
 * kernel's rate; "pack x" and "pack W" are the two packings' times). Best of reps,
 * milliseconds and GFLOP/s. Nothing here is asserted; the machine's load shows in every figure. *
 * Usage: bench_autocast ROWS HIDDEN INTERMEDIATE [reps] [cpu|wall] [VOCAB]
 *   cpu: time by the process's CPU clock instead of the wall clock: with OMP_NUM_THREADS=1 on a
 *   machine shared with other jobs, the time this work took on its core, whatever else ran.
 *   VOCAB: the lm_head instead of the layer, fused with the log-softmax (ROWS x HIDDEN against
 *   VOCAB x HIDDEN, the backend table's logprob and logprob_backward): fp32, then autocast on
 *   the sgemm path (rounded fp32 copies) and on each bf16 GEMM path (fused_logprob_autocast.c),
 *   W's packings cached as in training ("pack W": both layouts, once per optimizer step). */
#include "kernels/backend.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool use_cpu_clock;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *random_floats(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return x;
}

typedef enum { FP32, AUTOCAST, PACKED_BF16 } Way;

static void forward(Way way, float *out, const float *x, const float *w, const PackedWeight *p,
                    int n, int in, int o) {
    if (way == FP32)
        matmul_forward(out, x, w, NULL, n, in, o);
    else if (way == AUTOCAST)
        autocast_linear_forward(out, x, (WeightRef){.f32 = w}, NULL, n, in, o);
    else
        packed_matmul_bf16_forward(out, x, p, NULL, n);
}

static void backward(Way way, float *din, float *dw, const float *g, const float *x, const float *w,
                     int n, int in, int o) {
    if (way == FP32)
        matmul_backward(din, dw, NULL, g, x, w, n, in, o);
    else if (way == AUTOCAST)
        autocast_linear_backward(din, dw, NULL, g, x, (WeightRef){.f32 = w}, n, in, o);
}

/* gemm_bf16 alone on each path, both factors packed beforehand (x (n x in) times W^T, the
 * forward's product): the kernel's own rate, without the rounding and packing autocast's
 * products pay per call. */
static void gemm_prepacked(int n, int in, int o, int reps) {
    float *x = random_floats((size_t)n * in), *w = random_floats((size_t)in * o),
          *out = malloc((size_t)n * o * sizeof *out);
    Bf16PackedA a;
    Bf16PackedB b;
    double t0 = now_seconds();
    bf16_pack_a(&a, (Bf16Source){.f32 = x, .row_stride = (size_t)in, .col_stride = 1}, n, in);
    double t1 = now_seconds();
    bf16_pack_b(&b, (Bf16Source){.f32 = w, .row_stride = 1, .col_stride = (size_t)in}, in, o);
    double t2 = now_seconds();
    for (int path = GEMM_BF16_AVX2; path < GEMM_BF16_PATH_COUNT; path++) {
        if (!gemm_bf16_force((GemmBf16Path)path)) continue;
        double best = 1e30;
        for (int r = 0; r <= reps; r++) {
            double s = now_seconds();
            gemm_bf16(out, (size_t)o, false, &a, &b);
            if (r > 0 && now_seconds() - s < best) best = now_seconds() - s;
        }
        printf("%5d x %5d -> %5d  gemm_bf16 %-14s prepacked %8.2f ms %6.1f GFLOP/s  (pack x %.2f "
               "ms, pack W %.2f ms)\n",
               n, in, o, gemm_bf16_path_name((GemmBf16Path)path), 1e3 * best,
               2.0 * n * in * o / best / 1e9, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
    }
    bf16_packed_a_free(&a), bf16_packed_b_free(&b);
    free(x), free(w), free(out);
}

/* The lm_head + log-softmax, forward and backward, fp32 and under autocast on every path. */
static void lm_head(int n, int h, int vocab, int reps) {
    float *hid = random_floats((size_t)n * h), *w = random_floats((size_t)vocab * h);
    float *dlogp = random_floats((size_t)n), *logp = malloc((size_t)n * sizeof *logp);
    float *dh = malloc((size_t)n * h * sizeof *dh), *dw = calloc((size_t)vocab * h, sizeof *dw);
    int32_t *target = malloc((size_t)n * sizeof *target);
    for (int i = 0; i < n; i++)
        target[i] = rand() % vocab;
    double flops = 2.0 * n * h * vocab; /* one product; the backward runs three */
    for (int run = 0; run <= GEMM_BF16_PATH_COUNT; run++) {
        const Backend *be = run == 0 ? backend_cpu() : backend_cpu_autocast();
        char name[64] = "fp32";
        if (run > 0) {
            GemmBf16Path path = (GemmBf16Path)(run - 1);
            if (!gemm_bf16_force(path)) continue;
            snprintf(name, sizeof name, "autocast, %s", gemm_bf16_path_name(path));
        }
        WeightRef wr = {.f32 = w};
        double best_f = 1e30, best_b = 1e30, pack = 0;
        if (run > 1) { /* the cache's packing of W, both layouts, as once per optimizer step */
            gemm_bf16_cache_clear();
            double t0 = now_seconds();
            bf16_weight_packed(w, NULL, vocab, h, true);
            bf16_weight_packed(w, NULL, vocab, h, false);
            pack = now_seconds() - t0;
        }
        for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
            double t0 = now_seconds();
            be->logprob(be, logp, NULL, hid, target, wr, n, h, vocab);
            double t1 = now_seconds();
            be->logprob_backward(be, dh, dw, dlogp, hid, target, wr, n, h, vocab);
            double t2 = now_seconds();
            if (r > 0 && t1 - t0 < best_f) best_f = t1 - t0;
            if (r > 0 && t2 - t1 < best_b) best_b = t2 - t1;
        }
        printf("lm_head %5d x %5d -> %6d  %-18s forward %8.2f ms %6.1f GFLOP/s  backward %8.2f ms "
               "%6.1f GFLOP/s",
               n, h, vocab, name, 1e3 * best_f, flops / best_f / 1e9, 1e3 * best_b,
               3 * flops / best_b / 1e9);
        if (run > 1) printf("  (pack W %.2f ms)", 1e3 * pack);
        printf("\n");
    }
    gemm_bf16_cache_clear();
    free(hid), free(w), free(dlogp), free(logp), free(dh), free(dw), free(target);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ROWS HIDDEN INTERMEDIATE [reps] [cpu|wall] [VOCAB]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), h = atoi(argv[2]), inter = atoi(argv[3]);
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    use_cpu_clock = argc > 5 && strcmp(argv[5], "cpu") == 0;
    if (argc > 6) { /* the lm_head only */
        lm_head(n, h, atoi(argv[6]), reps);
        return 0;
    }
    int shapes[2][2] = {{h, inter}, {inter, h}}; /* gate/up, then down */
    const char *names[] = {"fp32 sgemm", "autocast", "packed bf16 dot"};
    printf("rows %d, AVX512_BF16 packed kernel: %s, bf16 GEMM paths:", n,
           packed_bf16_available() ? "yes" : "no");
    for (int path = GEMM_BF16_AVX2; path < GEMM_BF16_PATH_COUNT; path++)
        if (gemm_bf16_supported((GemmBf16Path)path))
            printf(" %s", gemm_bf16_path_name((GemmBf16Path)path));
    printf("\n");
    for (int s = 0; s < 2; s++) {
        int in = shapes[s][0], o = shapes[s][1];
        float *x = random_floats((size_t)n * in), *w = random_floats((size_t)in * o),
              *g = random_floats((size_t)n * o), *out = malloc((size_t)n * o * 4),
              *din = malloc((size_t)n * in * 4), *dw = calloc((size_t)in * o, 4);
        uint16_t *w16 = malloc((size_t)in * o * 2);
        bf16_narrow(w16, w, (size_t)in * o);
        size_t count = packed_weight_bf16_count(in, o);
        uint16_t *panels = aligned_alloc(64, (count * 2 + 63) / 64 * 64);
        PackedWeight p;
        double t_pack = now_seconds();
        packed_weight_fill_bf16(&p, panels, w16, in, o);
        t_pack = now_seconds() - t_pack;
        double flops = 2.0 * n * in * o;
        /* fp32; autocast on the sgemm path and on each bf16 GEMM path this CPU has; packed */
        for (int run = 0; run < 2 + GEMM_BF16_PATH_COUNT; run++) {
            Way way = run == 0 ? FP32 : run <= GEMM_BF16_PATH_COUNT ? AUTOCAST : PACKED_BF16;
            if (way == PACKED_BF16 && !packed_bf16_available()) continue;
            char name[64];
            snprintf(name, sizeof name, "%s", names[way]);
            if (way == AUTOCAST) {
                GemmBf16Path path = (GemmBf16Path)(run - 1);
                if (!gemm_bf16_force(path)) continue;
                snprintf(name, sizeof name, "autocast, %s", gemm_bf16_path_name(path));
            }
            double best_f = 1e30, best_b = 1e30;
            for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
                double t0 = now_seconds();
                forward(way, out, x, w, &p, n, in, o);
                double t1 = now_seconds();
                backward(way, din, dw, g, x, w, n, in, o);
                double t2 = now_seconds();
                if (r > 0 && t1 - t0 < best_f) best_f = t1 - t0;
                if (r > 0 && t2 - t1 < best_b) best_b = t2 - t1;
            }
            printf("%5d x %5d -> %5d  %-24s forward %8.2f ms %6.1f GFLOP/s", n, in, o, name,
                   1e3 * best_f, flops / best_f / 1e9);
            if (way == PACKED_BF16)
                printf("  (pack %.2f ms)\n", 1e3 * t_pack);
            else
                printf("  backward %8.2f ms %6.1f GFLOP/s\n", 1e3 * best_b,
                       2 * flops / best_b / 1e9);
        }
        gemm_prepacked(n, in, o, reps);
        free(x), free(w), free(g), free(out), free(din), free(dw);
        free(w16), free(panels);
    }
    return 0;
}
