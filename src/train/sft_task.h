/* Supervised fine-tuning (rl unset) as a training task: the SFT dataset (prepared and cached,
 * data/sft_dataset.h), right-padded micro-batches, the mean NLL over the window's label tokens,
 * and evaluation by HF's row-weighted mean of each eval batch's mean NLL. */
#ifndef RLHF_TRAIN_SFT_TASK_H
#define RLHF_TRAIN_SFT_TASK_H

#include "config/train_config.h"
#include "data/sft_dataset.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/train_loop.h"

#include <stdio.h>

/* Loads the datasets (and test_datasets, or a val_set_size draw) and trains m (or the adapter
 * lora) on them. out may be NULL (train_loop_run). Returns 0, or -1 with an error. */
int sft_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                 TrainOutcome *out, FILE *log);

/* eval_loss without sample packing, as HF's evaluation loop takes it (train/eval_batch_mean.h):
 * val in right-padded batches of batch_size (the last may be shorter), each batch's mean negative
 * log-likelihood over its label tokens (positions >= 1 of each example: methods/sft.h, invariant
 * 1), weighed by its rows. Over several ranks batch b is rank b % world's, and the sums are taken
 * over ranks. Returns 0, or -1 with an error. */
int sft_task_evaluate_nll(Model *m, const SftDataset *val, int64_t batch_size, int32_t pad_id,
                          double *loss);

#endif
