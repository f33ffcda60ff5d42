/* gemm_f32_shared against one gemm_f32 per product on a decoder layer's sibling products (issue
 * 33): the forward's x_n W_q^T, x_n W_k^T, x_n W_v^T and x_n W_gate^T, x_n W_up^T (A = x_n
 * shared), and their weight gradients dW += dY^T x_n (B = x_n shared). The two ways alternate,
 * each timed in CPU seconds of the whole process (all threads, CLOCK_PROCESS_CPUTIME_ID: a loaded
 * machine inflates it far less than wall time), best of reps; the results are compared bit for
 * bit (they must be equal: gemm_f32.h's gemm_f32_shared).
 *
 * Usage: bench_gemm_shared ROWS HIDDEN INTERMEDIATE QDIM KVDIM [reps]
 *   e.g. SmolLM2-135M, 1 pair x 512: bench_gemm_shared 1024 576 1536 576 192 */
#include "kernels/cpu/gemm_f32.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

/* One group: `count` products of the shared x_n (rows x hidden), outputs of lens[i]. forward:
 * out_i = x_n W_i^T (W_i lens[i] x hidden); else dW_i += dY_i^T x_n (dY_i rows x lens[i]). */
static int run_group(const char *name, bool forward, int rows, int hidden, const int *lens,
                     int count, int reps) {
    float *x = filled((size_t)rows * hidden, 7u), *own[GEMM_F32_MAX_PARTS];
    float *c_sep[GEMM_F32_MAX_PARTS], *c_shr[GEMM_F32_MAX_PARTS];
    GemmF32Part parts[GEMM_F32_MAX_PARTS];
    double flops = 0;
    for (int i = 0; i < count; i++) {
        size_t nx = (size_t)(forward ? lens[i] * hidden : rows * lens[i]);
        size_t nc = (size_t)(forward ? rows * lens[i] : lens[i] * hidden);
        own[i] = filled(nx, 11u + (unsigned)i);
        c_sep[i] = calloc(nc, sizeof(float)), c_shr[i] = calloc(nc, sizeof(float));
        parts[i] = forward ? (GemmF32Part){own[i], hidden, lens[i], 1.0f, 0.0f, c_shr[i], lens[i]}
                           : (GemmF32Part){own[i], lens[i], lens[i], 1.0f, 1.0f, c_shr[i], hidden};
        flops += 2.0 * rows * hidden * lens[i];
    }
    double best_sep = 1e30, best_shr = 1e30;
    for (int rep = 0; rep <= reps; rep++) { /* rep 0: warm-up */
        double t0 = cpu_seconds();
        for (int i = 0; i < count; i++)
            if (forward)
                gemm_f32(false, true, rows, lens[i], hidden, 1.0f, x, hidden, own[i], hidden, 0.0f,
                         c_sep[i], lens[i]);
            else
                gemm_f32(true, false, lens[i], hidden, rows, 1.0f, own[i], lens[i], x, hidden, 1.0f,
                         c_sep[i], hidden);
        double t1 = cpu_seconds();
        if (forward)
            gemm_f32_shared(true, false, true, rows, hidden, x, hidden, parts, count);
        else
            gemm_f32_shared(false, true, false, hidden, rows, x, hidden, parts, count);
        double t2 = cpu_seconds();
        if (rep > 0 && t1 - t0 < best_sep) best_sep = t1 - t0;
        if (rep > 0 && t2 - t1 < best_shr) best_shr = t2 - t1;
    }
    int same = 1;
    for (int i = 0; i < count; i++) {
        size_t nc = (size_t)(forward ? rows * lens[i] : lens[i] * hidden);
        same &= memcmp(c_sep[i], c_shr[i], nc * sizeof(float)) == 0;
        free(own[i]), free(c_sep[i]), free(c_shr[i]);
    }
    free(x);
    printf("{\"group\": \"%s\", \"one_by_one_cpu_ms\": %.3f, \"shared_cpu_ms\": %.3f, "
           "\"ratio\": %.3f, \"one_by_one_gflop_per_cpu_s\": %.1f, "
           "\"shared_gflop_per_cpu_s\": %.1f, \"bitwise_equal\": %s}\n",
           name, best_sep * 1e3, best_shr * 1e3, best_sep / best_shr, flops / best_sep * 1e-9,
           flops / best_shr * 1e-9, same ? "true" : "false");
    return same ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_gemm_shared ROWS HIDDEN INTERMEDIATE QDIM KVDIM [reps]\n");
        return 2;
    }
    int rows = atoi(argv[1]), hidden = atoi(argv[2]), inter = atoi(argv[3]);
    int qd = atoi(argv[4]), kvd = atoi(argv[5]), reps = argc > 6 ? atoi(argv[6]) : 10;
    if (rows <= 0 || hidden <= 0 || inter <= 0 || qd <= 0 || kvd <= 0 || reps <= 0) {
        fprintf(stderr, "bench_gemm_shared: every dimension and reps must be positive\n");
        return 2;
    }
    gemm_f32_describe(stdout);
    int qkv[3] = {qd, kvd, kvd}, gate_up[2] = {inter, inter}, bad = 0;
    bad |= run_group("qkv x_n W^T", true, rows, hidden, qkv, 3, reps);
    bad |= run_group("gate/up x_n W^T", true, rows, hidden, gate_up, 2, reps);
    bad |= run_group("qkv dW += dY^T x_n", false, rows, hidden, qkv, 3, reps);
    bad |= run_group("gate/up dW += dY^T x_n", false, rows, hidden, gate_up, 2, reps);
    return bad;
}
