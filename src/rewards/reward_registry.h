/* The reward functions named in trl.reward_funcs, opened: each entry is
 *   "module.fn"                  a Python function in module.py, found in the working directory
 *                                (Axolotl's way) or next to the config file;
 *   "builtin.<name>"             a built-in with its defaults (rewards/builtin_rewards.h);
 *   {function: builtin.<name>, <option>: value, ...}   a built-in with options;
 *   {function: module.fn}        the same as the plain string;
 *   {command: "...", name: n, timeout: s}   an external command speaking JSON lines
 *                                (rewards/command_reward.h); timeout 120 s unless given. */
#ifndef RLHF_REWARDS_REWARD_REGISTRY_H
#define RLHF_REWARDS_REWARD_REGISTRY_H

#include "rewards/reward_func.h"

#include <jansson.h>

/* Opens specs (a JSON array) into funcs (json_array_size(specs) of them, zeroed first). Returns
 * 0, or -1 with an error "source: trl.reward_funcs[i]: ..." and nothing left open. */
int reward_funcs_open(RewardFunc *funcs, const json_t *specs, const char *source);
void reward_funcs_close(RewardFunc *funcs, int n);

#endif
