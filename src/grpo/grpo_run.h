/* rl: grpo / rl: gdpo end to end (trl-methods.md §5): prompts, generation with the in-process
 * engine, rewards, advantages, num_iterations passes per generation batch, logging, evaluation
 * on held-out prompts, checkpoints (with the replay buffer when it is on) and resuming. */
#ifndef RLHF_GRPO_GRPO_RUN_H
#define RLHF_GRPO_GRPO_RUN_H

#include "config/train_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/train_run.h"

#include <stdio.h>

/* lora: the adapter to train (NULL: full fine-tuning). hooks (may be NULL): reward functions
 * registered by an embedding program, and where the outcome goes. Returns 0, or -1 with an
 * error. */
int grpo_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
             const TrainHooks *hooks, FILE *log);

#endif
