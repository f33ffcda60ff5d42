/* push_to_hub: the run's outputs uploaded to a Hub model repository as transformers' Trainer
 * does it (hub_strategy), through huggingface_hub (io/hub_python.h).
 *
 *   end              the output directory once, when training is over ("End of training")
 *   every_save       (default, as TrainingArguments') also at each checkpoint: its model files
 *                    to the repository's root ("Training in progress, step N")
 *   checkpoint       as every_save, and the whole checkpoint under last-checkpoint/ (what
 *                    resume_from_checkpoint needs)
 *   all_checkpoints  as every_save, and each checkpoint under its own checkpoint-N/
 *
 * The repository is hub_model_id, else the output directory's name; it is created when missing
 * (private unless hub_private_repo: false, as Axolotl creates them), on branch hub_revision
 * (created when missing). Uploads block: a run that cannot push stops with the Hub's reason
 * rather than training on with nothing saved where the user expects it. */
#ifndef RLHF_TRAIN_HUB_PUSH_H
#define RLHF_TRAIN_HUB_PUSH_H

#include "config/train_config.h"

#include <stdint.h>
#include <stdio.h>

/* The repository id pushed to, into buf. */
void hub_push_repo_id(const TrainConfig *cfg, char *buf, size_t cap);

/* Before training, as transformers' Trainer does when it is made: creates the repository (and
 * the branch) when push_to_hub, so that a missing token or permission stops the run before
 * anything is trained or written. Does nothing and returns 0 unless push_to_hub. Returns 0, or
 * -1 with an error. Rank 0 only. */
int hub_push_init(const TrainConfig *cfg, FILE *log);

/* Uploads cfg->output_dir (without checkpoints) with commit_message. Does nothing and returns 0
 * unless push_to_hub. Returns 0, or -1 with an error. Rank 0 only. */
int hub_push_output(const TrainConfig *cfg, const char *commit_message, FILE *log);

/* What hub_strategy asks after checkpoint-<step> was written in checkpoint_dir. Does nothing
 * and returns 0 unless push_to_hub with a strategy other than end. Rank 0 only. */
int hub_push_checkpoint(const TrainConfig *cfg, const char *checkpoint_dir, int64_t step,
                        FILE *log);

#endif
