#include "grpo/grpo_metrics.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *key_for(const char *name, const char *what) {
    size_t n = strlen(name) + strlen(what) + 16;
    char *k = xmalloc(n);
    snprintf(k, n, "rewards/%s/%s", name, what);
    return k;
}

void reward_metric_keys_init(RewardMetricKeys *k, const char *const *names, int n) {
    k->n = n;
    k->mean = xmalloc((size_t)(n ? n : 1) * sizeof *k->mean);
    k->std = xmalloc((size_t)(n ? n : 1) * sizeof *k->std);
    for (int i = 0; i < n; i++) {
        k->mean[i] = key_for(names[i], "mean");
        k->std[i] = key_for(names[i], "std");
    }
}

void reward_metric_keys_free(RewardMetricKeys *k) {
    for (int i = 0; i < k->n; i++)
        free(k->mean[i]), free(k->std[i]);
    free(k->mean), free(k->std);
    memset(k, 0, sizeof *k);
}

void grpo_metrics_generation(StepMetrics *m, const GrpoBatch *b, const bool *truncated,
                             const RewardStats *rs, const RewardMetricKeys *keys, bool training) {
    int n = b->n_rows, n_term = 0, min_len = 0, max_len = 0, min_term = 0, max_term = 0;
    double tokens = 0, sum_len = 0, sum_term = 0;
    for (int i = 0; i < n; i++) {
        int len = b->completion_len[i];
        if (b->env_mask) { /* TRL counts only the policy's tokens (tool_mask 1) */
            len = 0;
            for (int t = 0; t < b->completion_len[i]; t++)
                len += b->env_mask[(size_t)i * b->completion_w + t];
        }
        tokens += b->prompt_len[i] + len;
        sum_len += len;
        if (i == 0 || len < min_len) min_len = len;
        if (i == 0 || len > max_len) max_len = len;
        if (truncated[i]) continue;
        if (n_term == 0 || len < min_term) min_term = len;
        if (n_term == 0 || len > max_term) max_term = len;
        sum_term += len, n_term++;
    }
    if (training) step_metrics_add_tokens(m, tokens);
    step_metrics_add(m, "completions/mean_length", n ? sum_len / n : 0);
    step_metrics_add(m, "completions/min_length", min_len);
    step_metrics_add(m, "completions/max_length", max_len);
    step_metrics_add(m, "completions/clipped_ratio", n ? (double)(n - n_term) / n : 0);
    /* no terminated row: TRL reports 0 for all three */
    step_metrics_add(m, "completions/mean_terminated_length", n_term ? sum_term / n_term : 0);
    step_metrics_add(m, "completions/min_terminated_length", min_term);
    step_metrics_add(m, "completions/max_terminated_length", max_term);
    for (int k = 0; k < keys->n; k++) {
        step_metrics_add(m, keys->mean[k], rs->func_mean[k]);
        step_metrics_add(m, keys->std[k], rs->func_std[k]);
    }
    step_metrics_add(m, "reward", rs->reward);
    step_metrics_add(m, "reward_std", rs->reward_std);
    step_metrics_add(m, "frac_reward_zero_std", rs->frac_reward_zero_std);
}
