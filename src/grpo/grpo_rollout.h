/* One GRPO generation batch, from prompts to advantages (trl-methods.md §5.2-§5.6): G
 * completions per prompt from the in-process engine (sampled as TRL's generation_kwargs say),
 * cut after the tokenizer's EOS, decoded without special tokens, scored by every reward
 * function, turned into advantages; TRL's generation metrics are added on the way. */
#ifndef RLHF_GRPO_GRPO_ROLLOUT_H
#define RLHF_GRPO_GRPO_ROLLOUT_H

#include "config/grpo_config.h"
#include "data/grpo_dataset.h"
#include "model/model.h"
#include "model/packed_model.h"
#include "rewards/reward_func.h"
#include "tokenizer/tokenizer.h"
#include "grpo/grpo_batch.h"
#include "grpo/grpo_metrics.h"
#include "grpo/python_rollout.h"
#include "train/step_metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct GrpoRollout {
    const GrpoConfig *cfg;
    const Model *model;
    const Tokenizer *tok;
    int32_t eos_id, pad_id;
    RewardFunc *funcs; /* cfg->n_reward_funcs of them */
    RewardMetricKeys keys;
    uint64_t seed;
    FILE *log;
    bool warned_unscorable;
    bool scripted; /* RLHF_TEST_SCRIPTED_COMPLETIONS=1: generate_scripted in place of sampling */
    /* the policy's weights packed for decoding, refilled by every step's generation in the same
     * memory (packed_model_free when done) */
    PackedModel packed;
    /* trl.rollout_func: makes the completions in place of the sampler; NULL: none */
    PythonRollout *python;
    /* vllm_mode: server (cfg->vllm_server_url): the completions come from this server, given
     * the policy's weights first whenever the trainer's global_step moved (grpo/vllm_server.h);
     * rank 0's alone (NULL on the other ranks, which receive their rows from it) */
    struct VllmServer *server;
    /* Not NULL (one process, in-process generation): completions drawn from torch's global
     * generator as transformers' generate() draws them (GenerateOptions.torch_rng), so a run
     * samples TRL's completions for the same seed; NULL: per-completion streams (seed, stream) */
    TorchGenerator *torch_rng;
} GrpoRollout;

typedef struct {
    double generate_s, reward_s; /* wall time of the two halves */
    double generate_cpu_s;       /* CPU time of in-process generation (all threads) */
    long generated_tokens;       /* completion tokens of the whole batch, every rank's */
} RolloutTimes;

/* What one call of grpo_rollout generates and scores. */
typedef struct {
    const GrpoDataset *ds;
    const size_t *idx;           /* the dataset rows of the prompts (n_prompts) */
    int n_prompts, group_size;   /* group_size (G) completions per prompt */
    uint64_t stream;             /* picks the random draws (below) */
    const json_t *trainer_state; /* what reward functions see as trainer_state */
    bool shared;                 /* the ranks share the work (below); collective then */
    bool training;               /* a training batch: the token count of the metrics grows */
    StepMetrics *metrics;        /* receives the generation metrics; NULL: none added */
    RolloutTimes *times;         /* receives the wall times and token count; may be NULL */
    json_t *log_rows;            /* when not NULL, receives one object per completion for
                                    trl.log_completions (completion_log.h): decoded prompt and completion,
                                    each reward function's reward (null: None), advantage */
} RolloutRequest;

/* Generates and scores G completions for each of the n_prompts dataset rows idx[]. `stream`
 * picks the random draws: completion j of the batch (completion j % G of prompt j / G) draws
 * from its own stream (seed, stream, j), whichever rank generates it, so the same stream gives
 * the same completions on any number of ranks (up to the last bits of the logits, which the
 * batch's row count moves: a token can flip where a draw falls that close to a boundary).
 *
 * shared (collective: every rank calls it with the same request): the ranks cut the prompts
 * into contiguous runs of whole groups, each generates and scores its own run (reward
 * functions see that rank's completions, as TRL's processes call them on theirs), and the
 * completions and rewards are gathered so that every rank holds the whole batch; the
 * advantages, group statistics and metrics are then computed on the whole batch, the same bytes
 * on every rank. On a generation server (vllm_mode: server) rank 0 alone asks it for the whole
 * batch and sends each rank its run, which that rank scores; the rest is the same. Not shared:
 * this rank does the whole batch alone (on a server: one process only).
 *
 * *out is allocated; group_std (n_prompts) receives each group's reward std. Returns 0, or -1
 * with an error naming the reward function or prompt that failed (shared: on every rank,
 * agreed). */
int grpo_rollout(GrpoRollout *r, const RolloutRequest *req, GrpoBatch *out, float *group_std);

#endif
