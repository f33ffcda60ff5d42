/* trainer_state.json (HF Trainer's schema) and resume_from_checkpoint: what a checkpoint says
 * about the run beyond its weights and moments (checkpoint.h). */
#ifndef RLHF_TRAIN_TRAIN_STATE_H
#define RLHF_TRAIN_TRAIN_STATE_H

#include "config/train_config.h"
#include "train/trainer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* trainer_state.json's content at `step` of `total` (new reference; it holds a reference to
 * log_history). Cannot fail. */
json_t *train_state_json(const TrainConfig *cfg, int64_t step, double epoch, int64_t total,
                         json_t *log_history);

/* resume_from_checkpoint ("true": the latest checkpoint-N in output_dir, else a directory):
 * restores the trainer and appends the checkpoint's log history to *log_history. The directory
 * resumed from is written to dir (may be NULL). Collective over ranks (rank 0 finds and reads
 * the checkpoint). Returns 0, or -1 with an error naming the directory. */
int train_state_resume(const TrainConfig *cfg, Trainer *tr, json_t *log_history, FILE *log,
                       char *dir, size_t dir_size);

#endif
