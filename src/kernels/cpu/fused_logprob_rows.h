/* The per-row arithmetic of the fused lm_head + log-softmax (fused_logprob.c, and its autocast
 * products in fused_logprob_autocast.c): a running log-sum-exp over vocabulary tiles, the logit
 * cap, and a row's logit gradients. Private to those two files. */
#ifndef RLHF_KERNELS_CPU_FUSED_LOGPROB_ROWS_H
#define RLHF_KERNELS_CPU_FUSED_LOGPROB_ROWS_H

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/tensor_types.h"

#include <math.h>
#include <stdbool.h>

/* Running log-sum-exp of one row: max m and s = sum exp(z - m) over the columns seen so far. */
typedef struct {
    float max;
    double sum;
    /* with statistics: the sum of the logits, sum exp(z - m) * (z - m) (relative to the running
     * max, so that the entropy log(s) - ez / s loses nothing to cancellation when the logits are
     * large), and the first index of the largest logit */
    double zsum, ez;
    int argmax;
} RunningLse;

/* The largest of m and z[0 .. n), by `>` (a NaN never wins, as in a scalar `z > m ? z : m`
 * walk): the walk's value whatever the order, so it runs one lane per vector slot, then folds the
 * lanes. Where the largest is a zero its sign may differ from the walk's (the walk keeps the first
 * zero it meets): every use subtracts the maximum or adds it to a log, where the sign is lost. The
 * walk it replaced was one dependent vmaxss per logit, ~60% of the log-sum-exp pass's samples. */
static inline float row_max(const float *z, int n, float m) {
    float lane[LANE_SUM_WIDTH];
    for (int l = 0; l < LANE_SUM_WIDTH; l++)
        lane[l] = m;
    int j = 0;
    for (; j + LANE_SUM_WIDTH <= n; j += LANE_SUM_WIDTH)
#pragma omp simd
        for (int l = 0; l < LANE_SUM_WIDTH; l++)
            lane[l] = z[j + l] > lane[l] ? z[j + l] : lane[l];
    for (; j < n; j++)
        m = z[j] > m ? z[j] : m;
    for (int l = 0; l < LANE_SUM_WIDTH; l++)
        m = lane[l] > m ? lane[l] : m;
    return m;
}

/* row_max with the first index of the largest value, *arg standing for m (c0: the column index
 * of z[0], above *arg): what a scalar walk `if (z[j] > m) m = z[j], arg = c0 + j` ends with. Each
 * lane keeps its own first maximum; of the lanes holding the largest value the smallest index
 * wins, which is the first occurrence (a lane that never rose keeps *arg, the smallest of all). */
static inline float row_max_arg(const float *z, int n, float m, int c0, int *arg) {
    float lane[LANE_SUM_WIDTH];
    int at[LANE_SUM_WIDTH];
    for (int l = 0; l < LANE_SUM_WIDTH; l++)
        lane[l] = m, at[l] = *arg;
    int j = 0;
    for (; j + LANE_SUM_WIDTH <= n; j += LANE_SUM_WIDTH)
#pragma omp simd
        for (int l = 0; l < LANE_SUM_WIDTH; l++) {
            bool up = z[j + l] > lane[l];
            lane[l] = up ? z[j + l] : lane[l];
            at[l] = up ? c0 + j + l : at[l];
        }
    int a = *arg;
    for (; j < n; j++) /* the tail's indices are above every lane's */
        if (z[j] > m) m = z[j], a = c0 + j;
    for (int l = 0; l < LANE_SUM_WIDTH; l++)
        if (lane[l] > m || (lane[l] == m && at[l] < a)) m = lane[l], a = at[l];
    *arg = a;
    return m;
}

static inline void lse_update(RunningLse *acc, const float *z, int n) {
    float m = row_max(z, n, acc->max);
    /* fp32 exponentials in short fp32 blocks, blocks added in fp64: fp32 accuracy at any
     * vocabulary size without a double exp per logit. A block's sum in lane_sum.h's order. */
    double s = 0.0;
    for (int j0 = 0; j0 < n; j0 += 256) {
        int j1 = j0 + 256 < n ? j0 + 256 : n, j = j0;
        float lane[LANE_SUM_WIDTH] = {0};
        for (; j + LANE_SUM_WIDTH <= j1; j += LANE_SUM_WIDTH)
#pragma omp simd
            for (int l = 0; l < LANE_SUM_WIDTH; l++)
                lane[l] += fast_expf(z[j + l] - m);
        for (int l = 0; j + l < j1; l++)
            lane[l] += fast_expf(z[j + l] - m);
        s += lane_sum_total(lane);
    }
    acc->sum = acc->sum * exp((double)acc->max - (double)m) + s;
    acc->max = m;
}

/* lse_update plus the statistics (c0: the column index of z[0]). */
static inline void lse_update_stats(RunningLse *acc, const float *z, int n, int c0) {
    int arg = acc->argmax; /* strict: the first maximum wins, as argmax */
    float m = row_max_arg(z, n, acc->max, c0, &arg);
    double s = 0.0, ez = 0.0, zs = 0.0;
    for (int j0 = 0; j0 < n; j0 += 256) { /* each block's sums in lane_sum.h's order */
        int j1 = j0 + 256 < n ? j0 + 256 : n, j = j0;
        float le[LANE_SUM_WIDTH] = {0}, lez[LANE_SUM_WIDTH] = {0}, lz[LANE_SUM_WIDTH] = {0};
        for (; j + LANE_SUM_WIDTH <= j1; j += LANE_SUM_WIDTH)
#pragma omp simd
            for (int l = 0; l < LANE_SUM_WIDTH; l++) {
                float e = fast_expf(z[j + l] - m);
                float e_z = e * (z[j + l] - m); /* its own statement: no compiler fuses it */
                le[l] += e;
                lez[l] += e_z;
                lz[l] += z[j + l];
            }
        for (int l = 0; j + l < j1; l++) {
            float e = fast_expf(z[j + l] - m);
            float e_z = e * (z[j + l] - m);
            le[l] += e;
            lez[l] += e_z;
            lz[l] += z[j + l];
        }
        s += lane_sum_total(le), ez += lane_sum_total(lez), zs += lane_sum_total(lz);
    }
    double scale = exp((double)acc->max - (double)m);
    if (acc->sum > 0) /* e^(z-m') (z-m') = e^(z-m) e^(m-m') ((z-m) + (m-m')) */
        acc->ez = scale * (acc->ez + ((double)acc->max - (double)m) * acc->sum);
    acc->ez += ez;
    acc->sum = acc->sum * scale + s;
    acc->zsum += zs;
    acc->max = m;
    acc->argmax = arg;
}

/* Whether LogitCap changes the logits at all. */
static inline bool cap_active(LogitCap cap) {
    return cap.softcap > 0 || cap.post_scale != 1.0f;
}

/* z = post_scale * softcap * tanh(z / softcap) (or post_scale * z without a cap), in place, as
 * transformers' Gemma2ForCausalLM (divide, tanh, multiply) and then TRL's logits / T. */
static inline void finish_logits(float *z, int n, LogitCap cap) {
    if (cap.softcap > 0)
        for (int j = 0; j < n; j++)
            z[j] = tanhf(z[j] / cap.softcap) * cap.softcap;
    if (cap.post_scale != 1.0f)
        for (int j = 0; j < n; j++)
            z[j] *= cap.post_scale;
}

/* z (cols raw logits of one row of a tile, t its target's column or outside 0..cols) becomes
 * dz: d logp / d z_j = [j = t] - softmax_j, so with upstream g, dz = g (onehot - p), p from the
 * row's log-sum-exp lse; with a cap, taken back through f(z) = post c tanh(z / c). */
static inline void logit_grads(float *z, int cols, float g, float lse, int t, LogitCap cap) {
    if (cap_active(cap)) {
        for (int j = 0; j < cols; j++) {
            float th = cap.softcap > 0 ? tanhf(z[j] / cap.softcap) : 0.0f;
            float f = cap.softcap > 0 ? th * cap.softcap : z[j];
            float dz = (j == t ? g : 0.0f) - g * fast_expf(f * cap.post_scale - lse);
            z[j] = dz * cap.post_scale * (cap.softcap > 0 ? 1.0f - th * th : 1.0f);
        }
        return;
    }
#pragma omp simd
    for (int j = 0; j < cols; j++)
        z[j] = -g * fast_expf(z[j] - lse);
    if (t >= 0 && t < cols) z[t] += g;
}

#endif
