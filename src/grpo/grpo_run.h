/* rl: grpo / rl: gdpo end to end (trl-methods.md §5): prompts, generation with the in-process
 * engine, rewards, advantages, num_iterations passes per generation batch, logging, evaluation
 * on held-out prompts, checkpoints (with the replay buffer when it is on) and resuming. */
#ifndef RLHF_GRPO_GRPO_RUN_H
#define RLHF_GRPO_GRPO_RUN_H

#include "config/train_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "rewards/reward_registry.h"
#include "train/train_loop.h"

#include <stdio.h>

/* Trains m (lora: the adapter to train; NULL: full fine-tuning) in the one training loop
 * (train_loop.h), its steps fed by generation batches. callbacks (may be NULL): reward
 * functions registered by an embedding program ({callback: NAME}); rollout_callable (a
 * PyObject *, may be NULL): the rollout function trl.rollout_func: {callback: NAME} stands for;
 * out (may be NULL) receives the outcome. Returns 0, or -1 with an error. */
int grpo_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
             const RewardCallbacks *callbacks, void *rollout_callable, TrainOutcome *out,
             FILE *log);

/* Python modules (reward functions, dataset transforms) are looked up in the working directory
 * first (Axolotl's rule), then next to the config file: `rlhf train examples/grpo.yaml` finds
 * examples/rewards.py. Adds that directory to the interpreter's path when cfg names Python code;
 * returns 0, or -1 with an error. */
int grpo_python_search_path(const TrainConfig *cfg);

#endif
