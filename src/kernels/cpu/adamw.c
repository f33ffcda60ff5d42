/* The fp32 AdamW update and the gradient's sum of squares, for backend_cpu (backend.h). */
#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* One value's update: every caller's loop runs this expression, so the bits are the same
 * whether a step runs whole or row block by row block (adamw_f32_update_serial). */
static inline void adamw_value(float *p, float *m, float *v, float g, const AdamWStepCoefs *c,
                               float step_size, float inv_bc2_sqrt) {
    /* the clip's scaling, rounded as the separate pass stored it (C11: no contraction) */
    float gi = g * c->grad_scale;
    *p *= c->shrink;
    *m += (1.0f - c->beta1) * (gi - *m);
    *v = c->beta2 * *v + (1.0f - c->beta2) * gi * gi;
    *p -= step_size * *m / (sqrtf(*v) * inv_bc2_sqrt + c->eps);
}

void adamw_f32_update(float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *coefs, float step_size, float inv_bc2_sqrt) {
#pragma omp parallel
    { /* each thread one contiguous run (static's split): its prefetches run ahead within it */
        size_t threads = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t begin = numel * t / threads, end = numel * (t + 1) / threads;
        adamw_f32_update_serial(p + begin, m + begin, v + begin, g + begin, end - begin, coefs,
                                step_size, inv_bc2_sqrt);
    }
}

/* Values ahead of the update that its four streams are fetched from: each stream's line 4 KB
 * ahead. The hardware's prefetchers alone left the update at 33-36 GB/s on this project's VMs,
 * 39-42 GB/s with these (2 threads, a 135M model's p, m, v and g, 2026-11-29); 2 and 8 KB ahead
 * were no better. A prefetch past an array's end does not fault. */
#define ADAMW_FETCH_AHEAD 1024

void adamw_f32_update_serial(float *p, float *m, float *v, const float *g, size_t numel,
                             const AdamWStepCoefs *coefs, float step_size, float inv_bc2_sqrt) {
    const AdamWStepCoefs c = *coefs;
    enum { LINE = 16 }; /* values in a 64-byte line */
    size_t i = 0;
    for (; i + LINE <= numel; i += LINE) {
        __builtin_prefetch(p + i + ADAMW_FETCH_AHEAD, 1);
        __builtin_prefetch(m + i + ADAMW_FETCH_AHEAD, 1);
        __builtin_prefetch(v + i + ADAMW_FETCH_AHEAD, 1);
        __builtin_prefetch(g + i + ADAMW_FETCH_AHEAD, 0);
#pragma omp simd
        for (size_t k = i; k < i + LINE; k++)
            adamw_value(&p[k], &m[k], &v[k], g[k], &c, step_size, inv_bc2_sqrt);
    }
    for (; i < numel; i++)
        adamw_value(&p[i], &m[i], &v[i], g[i], &c, step_size, inv_bc2_sqrt);
}

/* Σ g² in a fixed order that depends on n alone (not on the thread count, not on the vector
 * width): blocks of SS_BLOCK values, each summed in SS_LANES double lanes (lane k takes the
 * values at k mod SS_LANES, in order) folded pairwise, then the blocks' sums added in order.
 * Each square is exact in double (a float's 24-bit significand squared), so only the additions
 * round, and the lanes keep every vector unit busy where one chain of dependent adds waited
 * on each add's latency (the loop this replaced ran at one value per add latency). */
#define SS_LANES        16
#define SS_BLOCK        8192
#define SS_STACK_BLOCKS 64
/* Whole blocks are summed SS_WAYS side by side, each in lanes of its own (the same sums): one
 * stream of reads a thread left the gradient norm's pass at 12.5 GB/s on our VMs, where 8
 * streams read 29-31 (a 2 GB gradient, 2 threads). */
#define SS_WAYS 8

static double lanes_folded(double lane[SS_LANES]) {
    for (int width = SS_LANES / 2; width >= 1; width /= 2)
        for (int k = 0; k < width; k++)
            lane[k] += lane[k + width];
    return lane[0];
}

static double block_sum_squares(const float *g, size_t n) {
    double lane[SS_LANES] = {0};
    size_t i = 0;
    for (; i + SS_LANES <= n; i += SS_LANES)
#pragma omp simd
        for (int k = 0; k < SS_LANES; k++)
            lane[k] += (double)g[i + k] * g[i + k];
    for (int k = 0; i < n; i++, k++)
        lane[k] += (double)g[i] * g[i];
    return lanes_folded(lane);
}

/* out[w] = block_sum_squares(g + w * SS_BLOCK, SS_BLOCK) for w < SS_WAYS, the blocks read side
 * by side. */
static void whole_blocks_sum_squares(const float *g, double out[SS_WAYS]) {
    double lane[SS_WAYS][SS_LANES] = {{0}};
    for (size_t i = 0; i < SS_BLOCK; i += SS_LANES)
        for (int w = 0; w < SS_WAYS; w++) {
            const float *x = g + (size_t)w * SS_BLOCK + i;
#pragma omp simd
            for (int k = 0; k < SS_LANES; k++)
                lane[w][k] += (double)x[k] * x[k];
        }
    for (int w = 0; w < SS_WAYS; w++)
        out[w] = lanes_folded(lane[w]);
}

double sum_squares(const float *g, size_t n) {
    size_t blocks = (n + SS_BLOCK - 1) / SS_BLOCK;
    if (blocks <= 1) return block_sum_squares(g, n); /* no parallel region for a small span */
    double stack[SS_STACK_BLOCKS];
    double *part = blocks <= SS_STACK_BLOCKS ? stack : xmalloc(blocks * sizeof *part);
    size_t groups = (blocks + SS_WAYS - 1) / SS_WAYS;
#pragma omp parallel for schedule(static)
    for (size_t grp = 0; grp < groups; grp++) {
        size_t b0 = grp * SS_WAYS;
        if ((b0 + SS_WAYS) * SS_BLOCK <= n) {
            whole_blocks_sum_squares(g + b0 * SS_BLOCK, part + b0);
            continue;
        }
        for (size_t b = b0; b < blocks; b++) { /* the last group: blocks one at a time */
            size_t at = b * SS_BLOCK;
            part[b] = block_sum_squares(g + at, n - at < SS_BLOCK ? n - at : SS_BLOCK);
        }
    }
    double ss = 0.0;
    for (size_t b = 0; b < blocks; b++)
        ss += part[b];
    if (part != stack) free(part);
    return ss;
}
