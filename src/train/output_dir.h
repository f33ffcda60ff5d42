/* The output directory of `rlhf train` before anything is written to it: it must hold nothing
 * of a run, or a run of this same config (train/run_record.h). Another run there (a different
 * config, a model or adapter of another kind, checkpoints, files no run record accounts for)
 * stops the run with a message naming what is there and the two ways on: --overwrite_output_dir
 * true, which removes the other run's files first (what HF's flag of that name was for), or
 * another output_dir. So a run never leaves its files beside another run's: a LoRA run then a
 * full fine-tune into one directory cannot leave adapter_config.json beside the new weights,
 * nor stale checkpoint-N for resume_from_checkpoint: true to pick up.
 *
 * A run's files are those rlhf.c (or HF's Trainer) writes there: the model or adapter and its
 * config, generation and tokenizer files, checkpoint-N (and their unfinished .checkpoint-N.*
 * names), metrics.jsonl, completions.jsonl, runs/, trainer_state.json and the run record.
 * Anything else (a prepared-dataset cache, notes) is neither counted nor removed. */
#ifndef RLHF_TRAIN_OUTPUT_DIR_H
#define RLHF_TRAIN_OUTPUT_DIR_H

#include "config/train_config.h"

#include <stdio.h>

/* Checks cfg->output_dir (invariants above) and removes another run's files when
 * cfg->overwrite_output_dir; writes nothing else, so a run refused later (bad data, no token,
 * not enough memory) leaves no trace. A resumed run (resume_from_checkpoint) continues the run
 * in output_dir (its checkpoint's config is checked by train_state_resume). Collective: rank 0
 * looks, every rank gets its result. Returns 0, or -1 with an error naming the directory. */
int output_dir_prepare(const TrainConfig *cfg, FILE *log);

/* Creates output_dir and writes this run's record there (train/run_record.h): called by the
 * training loop once its first step is done, before anything of the run is logged or saved
 * (train_loop.c), so that a run failing earlier (bad data, a reward that raises) leaves nothing.
 * Collective, as output_dir_prepare. Returns 0, or -1 with an error. */
int output_dir_write_record(const TrainConfig *cfg);

#endif
