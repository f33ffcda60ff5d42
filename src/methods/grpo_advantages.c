#include "methods/grpo_advantages.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>

double grpo_nanmean(const double *x, int n, int stride) {
    double sum = 0;
    int count = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[(size_t)i * stride])) sum += x[(size_t)i * stride], count++;
    return count ? sum / count : NAN;
}

double grpo_nanstd(const double *x, int n, int stride) {
    double mean = grpo_nanmean(x, n, stride), ss = 0;
    int count = 0;
    for (int i = 0; i < n; i++) {
        double v = x[(size_t)i * stride];
        if (!isnan(v)) ss += (v - mean) * (v - mean), count++;
    }
    return count > 1 ? sqrt(ss / (count - 1)) : NAN;
}

/* torch.isclose(std, 0): |std| <= 1e-8 (NaN is never close) */
static bool is_zero_std(double s) {
    return fabs(s) <= 1e-8;
}

static bool unscorable(const RewardTable *t, int row) {
    for (int k = 0; k < t->n_funcs; k++)
        if (!isnan(t->rewards[(size_t)row * t->n_funcs + k])) return false;
    return true;
}

/* R_i = nansum_k w_k r_ik, NaN for an unscorable row. */
static void weighted_sum(const RewardTable *t, double *R) {
    for (int i = 0; i < t->n_rows; i++) {
        double s = 0;
        for (int k = 0; k < t->n_funcs; k++) {
            double r = t->rewards[(size_t)i * t->n_funcs + k];
            if (!isnan(r)) s += t->weights[k] * r;
        }
        R[i] = unscorable(t, i) ? NAN : s;
    }
}

static void sum_then_normalize(const RewardTable *t, const double *R, double *A, int *zero_rows) {
    int G = t->group_size, n = t->n_rows;
    double batch_std = n > 1 ? grpo_nanstd(R, n, 1) : 0;
    for (int g = 0; g < n / G; g++) {
        const double *Rg = R + (size_t)g * G;
        double mean = grpo_nanmean(Rg, G, 1);
        double std = t->scale == REWARD_SCALE_BATCH ? batch_std : G > 1 ? grpo_nanstd(Rg, G, 1) : 0;
        for (int i = 0; i < G; i++) {
            double a = Rg[i] - mean;
            if (t->scale != REWARD_SCALE_NONE) a /= std + 1e-4;
            A[g * G + i] = a;
            *zero_rows += is_zero_std(std);
        }
    }
}

static void normalize_then_sum(const RewardTable *t, double *A, int *zero_rows) {
    int G = t->group_size, n = t->n_rows, K = t->n_funcs;
    double *S = xmalloc((size_t)n * sizeof *S);
    for (int g = 0; g < n / G; g++) {
        const double *rg = t->rewards + (size_t)g * G * K;
        for (int i = 0; i < G; i++)
            S[g * G + i] = 0;
        for (int k = 0; k < K; k++) {
            double mean = grpo_nanmean(rg + k, G, K), std = G > 1 ? grpo_nanstd(rg + k, G, K) : 0;
            for (int i = 0; i < G; i++) {
                double z = (rg[(size_t)i * K + k] - mean) / (std + 1e-4);
                if (!isnan(z)) S[g * G + i] += t->weights[k] * z;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (unscorable(t, i)) S[i] = NAN;
    double mean = grpo_nanmean(S, n, 1), std = n > 1 ? grpo_nanstd(S, n, 1) : 0;
    for (int i = 0; i < n; i++)
        A[i] = (S[i] - mean) / (std + 1e-4);
    *zero_rows = is_zero_std(std) ? n : 0;
    free(S);
}

void grpo_advantages(const RewardTable *t, float *advantages, float *group_std,
                     RewardStats *stats) {
    int n = t->n_rows, G = t->group_size, zero_rows = 0;
    double *R = xmalloc((size_t)n * sizeof *R), *A = xmalloc((size_t)n * sizeof *A);
    weighted_sum(t, R);
    if (t->normalize_then_sum)
        normalize_then_sum(t, A, &zero_rows);
    else
        sum_then_normalize(t, R, A, &zero_rows);
    for (int i = 0; i < n; i++)
        advantages[i] = isnan(A[i]) ? 0.0f : (float)A[i];
    for (int g = 0; group_std && g < n / G; g++)
        group_std[g] = (float)(G > 1 ? grpo_nanstd(R + (size_t)g * G, G, 1) : 0);
    if (stats) {
        stats->reward = grpo_nanmean(R, n, 1);
        stats->reward_std = grpo_nanstd(R, n, 1);
        for (int k = 0; k < t->n_funcs; k++) {
            stats->func_mean[k] = grpo_nanmean(t->rewards + k, n, t->n_funcs);
            stats->func_std[k] = grpo_nanstd(t->rewards + k, n, t->n_funcs);
        }
        stats->frac_reward_zero_std = n ? (double)zero_rows / n : 0;
        stats->n_unscorable = 0;
        for (int i = 0; i < n; i++)
            stats->n_unscorable += unscorable(t, i);
    }
    free(R);
    free(A);
}
