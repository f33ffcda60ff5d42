/* A reward function as GRPO calls it (trl-methods.md §5.4, axolotl-config.md §12.1): once per
 * generation batch, with the batch's prompts, completions and dataset columns, giving one score
 * per completion, NaN where the function has none to give (Python's None).
 *
 * Three kinds sit behind this one interface: built-ins written in C (rewards/builtin_rewards.h),
 * Python functions as Axolotl users write them (rewards/python_reward.h) and external commands
 * speaking JSON lines (rewards/command_reward.h). */
#ifndef RLHF_REWARDS_REWARD_FUNC_H
#define RLHF_REWARDS_REWARD_FUNC_H

#include <jansson.h>
#include <stdint.h>

typedef struct {
    int n;                 /* completions in the batch */
    const json_t *prompts; /* array[n]: each completion's prompt as the dataset gives it: a string
                              or a list of {role, content} messages (repeated G times) */
    const json_t *completions; /* array[n]: decoded text (special tokens skipped); for message-list
                                  prompts [{"role": "assistant", "content": text}] */
    const int32_t *const *completion_ids; /* n rows of completion token ids */
    const int *completion_lens;
    const json_t *columns;       /* object: every other dataset column -> array[n] */
    const json_t *trainer_state; /* object: global_step, max_steps, epoch */
} RewardBatch;

typedef struct RewardFunc {
    char *name; /* as metrics name it: rewards/<name>/mean */
    void *impl;
    /* Writes n scores to out (NaN: none). Returns 0, or -1 with an error that names the function
     * and what went wrong (raised, wrong count, not a number, timed out, crashed). */
    int (*score)(void *impl, const RewardBatch *b, double *out);
    void (*close)(void *impl);
} RewardFunc;

/* Closes the function and frees its name; safe on a zeroed RewardFunc. */
void reward_func_close(RewardFunc *f);

#endif
