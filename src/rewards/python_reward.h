/* Reward functions written in Python, as Axolotl users write them in a rewards.py and name them
 * in YAML (`trl.reward_funcs: ["rewards.my_reward"]`), run unchanged in the embedded interpreter
 * (python/py_embed.h).
 *
 * Resolution is Axolotl's (GRPOStrategy.get_reward_func): the module is everything before the
 * last dot (a dotted package path works), imported with the working directory first on
 * sys.path; the function is the attribute after it and must declare at least two parameters.
 *
 * Each score() is one call as TRL 1.9's GRPOTrainer._calculate_rewards makes it, all by keyword:
 *     prompts, completions, completion_ids (lists of n), one keyword per dataset column
 *     (RewardBatch.columns), trainer_state (global_step, max_steps, epoch as attributes),
 *     log_extra(column, values), log_metric(name, value)
 * An `async def` function is run to completion on an event loop kept for the whole run. The
 * result must be a list (or tuple, or other iterable) of n numbers, None giving NaN. */
#ifndef RLHF_REWARDS_PYTHON_REWARD_H
#define RLHF_REWARDS_PYTHON_REWARD_H

#include "rewards/reward_func.h"

#include <jansson.h>

/* Opens "module.fn" into *f (name: the function's __name__). Returns 0, or -1 with Axolotl's
 * messages: "Reward function <spec> not found." and why (the import error; a local directory or
 * Hub id is a reward model, which rlhf.c does not run), "... is not callable", "Reward function
 * must accept at least two arguments: prompts: list and completions: list", or the exception the
 * module raised while importing. *f is left zeroed on failure. Call from the thread that trains. */
int python_reward_open(RewardFunc *f, const char *spec);

/* Wraps a Python callable handed over by a program that hosts the library in its own
 * interpreter (include/rlhf.h, rlhf_trainer_set_python_reward): `callable` is a PyObject *
 * (a new reference is kept), `name` names it in metrics and messages. It is called exactly as
 * an opened "module.fn" is, without Axolotl's two-parameter test (TRL has none). Returns 0, or
 * -1 with an error. */
int python_reward_wrap(RewardFunc *f, void *callable, const char *name);

/* Whether f was opened by python_reward_open or python_reward_wrap. */
int python_reward_is(const RewardFunc *f);

/* What the function logged through log_metric ({"name": [value, ...]}, numbers) and log_extra
 * ({"column": [value, ...]}) since the last take, as new JSON objects; the log is emptied.
 * Returns 0, or -1 with an error (f is not a Python reward, or a log_extra value is not JSON). */
int python_reward_take_logs(RewardFunc *f, json_t **metrics, json_t **extra);

#endif
