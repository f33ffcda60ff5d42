/* The reward functions named in trl.reward_funcs, opened: each entry is
 *   "module.fn"                  a Python function in module.py, found in the working directory
 *                                (Axolotl's way) or next to the config file;
 *   "builtin.<name>"             a built-in with its defaults (rewards/builtin_rewards.h);
 *   {function: builtin.<name>, <option>: value, ...}   a built-in with options;
 *   {function: module.fn}        the same as the plain string;
 *   {command: "...", name: n, timeout: s}   an external command speaking JSON lines
 *                                (rewards/command_reward.h); timeout 120 s unless given;
 *   {callback: NAME}             a function a program embedding the library registered under
 *                                NAME (include/rlhf.h): a C function, or a Python callable when
 *                                the host program is Python. */
#ifndef RLHF_REWARDS_REWARD_REGISTRY_H
#define RLHF_REWARDS_REWARD_REGISTRY_H

#include "rewards/reward_func.h"

#include <jansson.h>

/* A C reward function (include/rlhf.h's rlhf_reward_fn): scores n completions of the batch
 * (reward_batch_json.h, as JSON text) into scores (NaN: none). Returns 0, or non-zero with a
 * message in error (error_size bytes, NUL-terminated). */
typedef int (*RewardCallbackFn)(void *user_data, const char *batch_json, size_t n, double *scores,
                                char *error, size_t error_size);

typedef struct {
    char *name;
    RewardCallbackFn fn; /* NULL: python is a Python callable */
    void *user_data;     /* fn's */
    void *python;        /* a PyObject * when fn is NULL */
} RewardCallback;

typedef struct {
    RewardCallback *items;
    int n;
} RewardCallbacks;

/* Opens specs (a JSON array) into funcs (json_array_size(specs) of them, zeroed first);
 * {callback: NAME} entries are looked up in callbacks (may be NULL: none registered). Returns
 * 0, or -1 with an error "source: trl.reward_funcs[i]: ..." and nothing left open. */
int reward_funcs_open(RewardFunc *funcs, const json_t *specs, const char *source,
                      const RewardCallbacks *callbacks);
void reward_funcs_close(RewardFunc *funcs, int n);

#endif
