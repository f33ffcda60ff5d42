/* A reward function written in C by a program that embeds the library (include/rlhf.h,
 * rlhf_trainer_set_reward) and named {callback: NAME} in trl.reward_funcs. Each generation batch
 * reaches it as one JSON object, the same one an external reward command reads
 * (rewards/reward_batch_json.h: prompts, completions, completion_ids, the dataset columns,
 * trainer_state); it writes one score per completion, NaN for "no score" (Python's None). */
#ifndef RLHF_REWARDS_CALLBACK_REWARD_H
#define RLHF_REWARDS_CALLBACK_REWARD_H

#include "rewards/reward_func.h"
#include "rewards/reward_registry.h"

/* Opens the function fn (called with user_data) as `name` into *f. Cannot fail: returns 0. */
int callback_reward_open(RewardFunc *f, const char *name, RewardCallbackFn fn, void *user_data);

#endif
