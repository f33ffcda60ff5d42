/* What the ranks of a multi-process GRPO run (dist.h) exchange about a generation batch, so
 * that each ends up holding the whole batch, the same bytes on every rank:
 *  - the completions and rewards: each rank generated and scored one contiguous run of rows;
 *  - on a generation server, the completions rank 0 got for the whole batch, each rank's run
 *    sent to it;
 *  - the old / reference log-probs: each rank computed them for one contiguous run of rows.
 * Both are collectives (every rank calls them at the same point with the same row counts); in
 * one process there is nothing to exchange. */
#ifndef RLHF_GRPO_GRPO_SHARE_H
#define RLHF_GRPO_GRPO_SHARE_H

#include "rollout/generate.h"

/* comp (rows) and rewards (rows x K): this rank filled rows [lo, hi) and every rank's runs,
 * in rank order, tile [0, rows). On return every row is filled on every rank (the others'
 * completions carry ids but no log-probs). */
void grpo_share_completions(Completion *comp, double *rewards, int rows, int K, int lo, int hi);

/* comp (rows): rank 0 filled every row (the other ranks none). On return each rank holds its
 * own run of rows [lo, hi), ids only, and no other row (rank 0's others freed and zeroed), as
 * grpo_share_completions expects them once the rank has scored its run. The ranks' runs, in
 * rank order, tile [0, rows). */
void grpo_share_scatter_completions(Completion *comp, int rows, int lo, int hi);

/* values (rows x width floats): this rank filled rows [lo, hi), the ranks' runs tiling [0, rows)
 * in rank order. On return every rank holds every row. */
void grpo_share_rows_f32(float *values, int rows, int width, int lo, int hi);

#endif
