/* A RewardBatch as one JSON object holding what a Python reward function receives as keyword
 * arguments (axolotl-config.md §12.1): "prompts", "completions", "completion_ids" (lists of token
 * ids), every dataset column by its own name, and "trainer_state". External reward commands
 * receive it as their request line (rewards/command_reward.h). */
#ifndef RLHF_REWARDS_REWARD_BATCH_JSON_H
#define RLHF_REWARDS_REWARD_BATCH_JSON_H

#include "rewards/reward_func.h"

#include <jansson.h>

/* Returns a new object, or NULL with an error when the batch's arrays do not hold n entries.
 * A dataset column named like one of the fixed keys is shadowed by it (TRL passes those names
 * itself, so such a column could not reach a Python function either). */
json_t *reward_batch_to_json(const RewardBatch *b);

#endif
