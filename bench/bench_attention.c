/* Training attention's CPU time on one layer's shape: attention_forward and attention_backward
 * over a preference pair's layout (model/token_layout.h): the chosen row's prompt + response as
 * one segment, the rejected response as a second segment continuing the chosen row's prompt.
 * Random q, k, v, dO. Prints one JSON line: CPU seconds (user + system, all threads) per call,
 * best of reps, the figure a loaded shared machine inflates least; and the wall seconds.
 *
 * Usage: bench_attention [n_heads n_kv_heads head_dim prompt response [pairs [reps [path]]]]
 *   defaults: 9 3 64 128 384 1 5 fp32 (SmolLM2-135M's attention, bench_dpo_step's batch);
 *   Qwen2.5-0.5B's: 14 2 64. path: fp32 (attention_forward / attention_backward, fp32
 *   training's), amx (attention_forward_amx / attention_backward_amx, bf16 autocast's products on
 *   AMX tiles; backend_autocast.c's rounding of the inputs and outputs not included), or both
 *   (one line each, alternated rep by rep in one process: an A/B on the same machine state). */
#include "common/error.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *random_floats(size_t n, unsigned *seed) {
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
    return x;
}

/* Best CPU and wall seconds of the forward and the backward. */
typedef struct {
    double fwd_cpu, bwd_cpu, fwd_wall, bwd_wall;
} Timing;

/* One forward and backward on path amx (or fp32), kept in t if `count`. */
static void time_once(Timing *t, bool amx, bool count, float *out, float *dq, float *dk, float *dv,
                      const float *q, const float *k, const float *v, const float *dout,
                      const AttnSegment *segs, int n_segs, const int32_t *seq_index, int n, int nh,
                      int nkv, int hd) {
    AttnScores sc = {1.0f / sqrtf((float)hd), 0.0f};
    double c0 = now_seconds(CLOCK_PROCESS_CPUTIME_ID), w0 = now_seconds(CLOCK_MONOTONIC);
    if (amx)
        attention_forward_amx(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, 0, sc);
    else
        attention_forward(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, 0);
    double c1 = now_seconds(CLOCK_PROCESS_CPUTIME_ID), w1 = now_seconds(CLOCK_MONOTONIC);
    if (amx)
        attention_backward_amx(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n, nh, nkv, hd,
                               0, sc);
    else
        attention_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n, nh, nkv, hd, 0);
    double c2 = now_seconds(CLOCK_PROCESS_CPUTIME_ID), w2 = now_seconds(CLOCK_MONOTONIC);
    if (!count) return;
    t->fwd_cpu = c1 - c0 < t->fwd_cpu ? c1 - c0 : t->fwd_cpu;
    t->bwd_cpu = c2 - c1 < t->bwd_cpu ? c2 - c1 : t->bwd_cpu;
    t->fwd_wall = w1 - w0 < t->fwd_wall ? w1 - w0 : t->fwd_wall;
    t->bwd_wall = w2 - w1 < t->bwd_wall ? w2 - w1 : t->bwd_wall;
}

int main(int argc, char **argv) {
    int nh = argc > 1 ? atoi(argv[1]) : 9, nkv = argc > 2 ? atoi(argv[2]) : 3;
    int hd = argc > 3 ? atoi(argv[3]) : 64, prompt = argc > 4 ? atoi(argv[4]) : 128;
    int response = argc > 5 ? atoi(argv[5]) : 384, pairs = argc > 6 ? atoi(argv[6]) : 1;
    int reps = argc > 7 ? atoi(argv[7]) : 5;
    const char *path = argc > 8 ? argv[8] : "fp32";
    bool amx = strcmp(path, "amx") == 0 || strcmp(path, "both") == 0;
    bool fp32 = strcmp(path, "fp32") == 0 || strcmp(path, "both") == 0;
    if (nh < 1 || nkv < 1 || nh % nkv || hd < 1 || prompt < 0 || response < 1 || pairs < 1 ||
        reps < 1 || !(amx || fp32)) {
        fprintf(stderr,
                "usage: %s [n_heads n_kv_heads head_dim prompt response [pairs [reps [path]]]]\n"
                "(n_heads a multiple of n_kv_heads, response and pairs >= 1; path fp32, amx or "
                "both)\n",
                argv[0]);
        return 2;
    }
    if (amx && !attention_amx_usable()) {
        fprintf(stderr, "%s: path %s: no AMX here (or another gemm_bf16 path forced)\n", argv[0],
                path);
        return 2;
    }
    /* pair p: rows [base, base + prompt + response) chosen, then `response` rejected rows */
    int n_segs = 2 * pairs, per_pair = prompt + 2 * response, n = pairs * per_pair;
    AttnSegment *segs = xmalloc((size_t)n_segs * sizeof *segs);
    int32_t *seq_index = xmalloc((size_t)n * sizeof *seq_index);
    for (int p = 0; p < pairs; p++) {
        int base = p * per_pair;
        segs[2 * p] = (AttnSegment){base, prompt + response, 0, 0};
        segs[2 * p + 1] = (AttnSegment){base + prompt + response, response, base, prompt};
        for (int t = 0; t < prompt + response; t++)
            seq_index[base + t] = t;
        for (int t = 0; t < response; t++)
            seq_index[base + prompt + response + t] = prompt + t;
    }
    unsigned seed = 7;
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = random_floats(nq, &seed), *k = random_floats(nk, &seed);
    float *v = random_floats(nk, &seed), *dout = random_floats(nq, &seed);
    float *out = xmalloc(nq * sizeof *out), *dq = xmalloc(nq * sizeof *dq);
    float *dk = xmalloc(nk * sizeof *dk), *dv = xmalloc(nk * sizeof *dv);

    Timing t[2] = {{1e30, 1e30, 1e30, 1e30}, {1e30, 1e30, 1e30, 1e30}};
    for (int r = 0; r <= reps; r++) /* r == 0: warm-up */
        for (int a = 0; a < 2; a++)
            if (a ? amx : fp32)
                time_once(&t[a], a, r > 0, out, dq, dk, dv, q, k, v, dout, segs, n_segs, seq_index,
                          n, nh, nkv, hd);
    for (int a = 0; a < 2; a++) {
        if (!(a ? amx : fp32)) continue;
        /* a checksum, so that two builds' outputs can be compared at a glance (the last path
         * run's outputs: run one path for it) */
        double sum_out = 0, sum_dq = 0, sum_dk = 0;
        for (size_t i = 0; i < nq; i++)
            sum_out += out[i], sum_dq += dq[i];
        for (size_t i = 0; i < nk; i++)
            sum_dk += dk[i];
        printf("{\"path\": \"%s\", \"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, "
               "\"prompt\": %d, \"response\": %d, \"pairs\": %d, \"threads\": %d, \"reps\": %d, "
               "\"fwd_cpu_s\": %.5f, \"bwd_cpu_s\": %.5f, \"fwd_wall_s\": %.5f, "
               "\"bwd_wall_s\": %.5f, \"sum_out\": %.9g, \"sum_dq\": %.9g, \"sum_dk\": %.9g}\n",
               a ? "amx" : "fp32", nh, nkv, hd, prompt, response, pairs, omp_get_max_threads(),
               reps, t[a].fwd_cpu, t[a].bwd_cpu, t[a].fwd_wall, t[a].bwd_wall, sum_out, sum_dq,
               sum_dk);
    }
    free(segs), free(seq_index), free(q), free(k), free(v), free(dout), free(out), free(dq);
    free(dk), free(dv);
    return 0;
}
