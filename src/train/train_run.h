/* `rlhf train`: a whole supervised fine-tuning run from a TrainConfig.
 *
 * Step arithmetic (as HF's Trainer): micro-batches of micro_batch_size examples, windows of
 * gradient_accumulation_steps micro-batches per optimizer step (the last window of an epoch may
 * be shorter), total steps = max_steps or ceil(num_epochs x windows per epoch). Examples are
 * shuffled every epoch by a generator seeded with (seed, epoch): the order is reproducible but
 * not torch's RandomSampler order. Every logging_steps steps a line with HF's keys (loss,
 * grad_norm, learning_rate, epoch, step) goes to output_dir/metrics.jsonl and to the log. The
 * final model (weights in the source dtype, config.json, tokenizer and generation files) is
 * written to output_dir; with adapter: lora, the base stays frozen and the adapter is what is
 * trained, checkpointed and written (PEFT's adapter files beside config.json and the tokenizer). */
#ifndef RLHF_TRAIN_TRAIN_RUN_H
#define RLHF_TRAIN_TRAIN_RUN_H

#include "config/train_config.h"

#include <stdio.h>

/* Returns 0, or -1 with an error. Progress lines go to `log`. */
int train_run(const TrainConfig *cfg, FILE *log);

#endif
