/* One GRPO generation batch, from prompts to advantages (trl-methods.md §5.2-§5.6): G
 * completions per prompt from the in-process engine (sampled as TRL's generation_kwargs say),
 * cut after the tokenizer's EOS, decoded without special tokens, scored by every reward
 * function, turned into advantages; TRL's generation metrics are added on the way. */
#ifndef RLHF_TRAIN_GRPO_ROLLOUT_H
#define RLHF_TRAIN_GRPO_ROLLOUT_H

#include "config/grpo_config.h"
#include "data/grpo_dataset.h"
#include "model/model.h"
#include "rewards/reward_func.h"
#include "tokenizer/tokenizer.h"
#include "train/grpo_batch.h"
#include "train/grpo_metrics.h"
#include "train/step_metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const GrpoConfig *cfg;
    const Model *model;
    const Tokenizer *tok;
    int32_t eos_id, pad_id;
    RewardFunc *funcs; /* cfg->n_reward_funcs of them */
    RewardMetricKeys keys;
    uint64_t seed;
    FILE *log;
    bool warned_unscorable;
} GrpoRollout;

typedef struct {
    double generate_s, reward_s; /* wall time of the two halves */
    long generated_tokens;
} RolloutTimes;

/* Generates and scores G completions for each of the n_prompts dataset rows idx[]; `stream`
 * picks the random draws (the same stream gives the same completions). *out is allocated;
 * group_std (n_prompts) receives each group's reward std. training: whether the token count
 * grows. Returns 0, or -1 with an error naming the reward function or prompt that failed. */
int grpo_rollout(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int n_prompts, int G,
                 uint64_t stream, const json_t *trainer_state, StepMetrics *metrics, bool training,
                 GrpoBatch *out, float *group_std, RolloutTimes *times);

#endif
