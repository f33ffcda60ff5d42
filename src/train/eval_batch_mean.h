/* eval_loss as HF's Trainer.evaluation_loop takes it (transformers trainer.py: prediction_step's
 * loss is one batch's mean over its label tokens; the loop repeats it batch-size times and takes
 * the mean over all rows). Shared by SFT's unpacked (train/sft_task.c) and packed
 * (train/sft_packed.c) evaluation, so the two weigh batches the same way. */
#ifndef RLHF_TRAIN_EVAL_BATCH_MEAN_H
#define RLHF_TRAIN_EVAL_BATCH_MEAN_H

#include <stddef.h>

/* Invariants:
 * 1. weighted = sum over batches seen of (batch mean NLL x batch rows); rows = their rows.
 * 2. A batch without a label token adds nothing (HF's NaN loss for it is dropped). */
typedef struct {
    double weighted;
    double rows;
} EvalBatchMean;

/* Adds one eval batch of `rows` rows whose label tokens sum to log-probability logp_sum over
 * `labels` tokens. */
void eval_batch_mean_add(EvalBatchMean *acc, double logp_sum, size_t labels, int rows);

/* Sums acc over ranks (every rank must call it) and returns the row-weighted mean of the batch
 * losses, or 0 when no batch had a label. */
double eval_batch_mean_finish(EvalBatchMean *acc);

#endif
