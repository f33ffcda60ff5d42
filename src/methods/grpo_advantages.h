/* GRPO's advantages from the rewards of a generation batch (trl-methods.md §5.5, §5.6), as TRL
 * 1.9's GRPOTrainer computes them: NaN-aware over reward functions that return None.
 *
 * sum_then_normalize (GRPO): R = Σ_k w_k r_k (a row every function skipped is unscorable: NaN),
 * A = R − mean of its group, divided by (std + 1e-4) where std is the group's (scale_rewards
 * group), the whole batch's (batch) or nothing (none).
 * normalize_then_sum (GDPO): each reward z-scored within its group, S = Σ_k w_k z_k, then
 * A = (S − mean S) / (std S + 1e-4) over the batch; scale_rewards plays no part.
 * Stds are Bessel-corrected; a std of fewer than two values is NaN, as is a mean of none, and
 * NaN advantages become 0. */
#ifndef RLHF_METHODS_GRPO_ADVANTAGES_H
#define RLHF_METHODS_GRPO_ADVANTAGES_H

#include <stdbool.h>

/* TRL's scale_rewards: the std the centred rewards are divided by. */
typedef enum { REWARD_SCALE_GROUP, REWARD_SCALE_BATCH, REWARD_SCALE_NONE } RewardScaling;

typedef struct {
    int n_rows, n_funcs, group_size; /* rows in groups of group_size */
    const double *rewards;           /* (n_rows, n_funcs); NaN: the function returned None */
    const double *weights;           /* (n_funcs) */
    RewardScaling scale;
    bool normalize_then_sum;
} RewardTable;

/* What TRL logs about the rewards of a generation batch. func_mean and func_std have n_funcs
 * entries (caller-allocated). */
typedef struct {
    double reward, reward_std; /* nanmean / nanstd of the weighted sum over scorable rows */
    double *func_mean, *func_std;
    double frac_reward_zero_std; /* rows whose std (as scaling reads it) is ~0 */
    int n_unscorable;            /* rows every function skipped */
} RewardStats;

/* advantages (n_rows) and group_std (n_rows / group_size: each group's std of R, the replay
 * buffer's measure of a group worth learning from; NaN with fewer than two scorable rows).
 * stats may be NULL. */
void grpo_advantages(const RewardTable *t, float *advantages, float *group_std, RewardStats *stats);

/* Mean and Bessel-corrected std of the non-NaN values among n (stride apart); NaN when there are
 * none (mean) or fewer than two (std), as TRL's nanmean / nanstd. */
double grpo_nanmean(const double *x, int n, int stride);
double grpo_nanstd(const double *x, int n, int stride);

#endif
