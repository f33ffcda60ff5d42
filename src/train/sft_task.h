/* Supervised fine-tuning (rl unset) as a training task: the SFT dataset (prepared and cached,
 * data/sft_dataset.h), right-padded micro-batches, the mean NLL over the window's label tokens,
 * and evaluation by the mean NLL over every label token of the held-out examples. */
#ifndef RLHF_TRAIN_SFT_TASK_H
#define RLHF_TRAIN_SFT_TASK_H

#include "config/train_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/train_loop.h"

#include <stdio.h>

/* Loads the datasets (and test_datasets, or a val_set_size draw) and trains m (or the adapter
 * lora) on them. out may be NULL (train_loop_run). Returns 0, or -1 with an error. */
int sft_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                 TrainOutcome *out, FILE *log);

#endif
