/* The metrics TRL's GRPOTrainer logs once per generation batch (trl-methods.md §5.9):
 * completion lengths and truncation, each reward function's mean and std, the weighted reward,
 * its std, the share of rows without reward spread, and the running token count. The loss-time
 * metrics (entropy, kl, clip ratios) are added per micro-step by grpo_trainer.c. */
#ifndef RLHF_GRPO_GRPO_METRICS_H
#define RLHF_GRPO_GRPO_METRICS_H

#include "methods/grpo_advantages.h"
#include "grpo/grpo_batch.h"
#include "train/step_metrics.h"

#include <stdbool.h>

/* The metric names of the reward functions, which StepMetrics keeps by pointer. */
typedef struct {
    char **mean, **std; /* rewards/<name>/mean, rewards/<name>/std */
    int n;
} RewardMetricKeys;

void reward_metric_keys_init(RewardMetricKeys *k, const char *const *names, int n);
void reward_metric_keys_free(RewardMetricKeys *k);

/* Adds one generation batch's metrics. truncated[i]: row i ended without EOS (its last token is
 * neither EOS nor pad). Token counts (num_tokens) grow only in training. */
void grpo_metrics_generation(StepMetrics *m, const GrpoBatch *b, const bool *truncated,
                             const RewardStats *rs, const RewardMetricKeys *keys, bool training);

#endif
