/* The record of what a run trains: output_dir/rlhf_run.json, written before a run writes
 * anything else there and copied into each of its checkpoints, so that a later run can tell
 * whether a directory holds this run or another (train/output_dir.h) and a resume can say how
 * the checkpoint's config differs from the one given now (train/train_state.c).
 *
 * {"format": 1, "config_hash": "<16 hex digits>", "kind": "model" | "adapter",
 *  "config": {...}}: `config` is the config's keys that decide the trained weights (every key
 * rlhf.c reads, with the command-line overrides applied, less where and how often it writes:
 * output_dir, resume_from_checkpoint, overwrite_output_dir, dataset_prepared_path,
 * logging_steps, save_steps, save_total_limit, eval_steps, max_consecutive_bad_steps; and with
 * micro_batch_size, gradient_accumulation_steps and zero_stage replaced by examples_per_step,
 * their product with the number of ranks, so that a checkpoint of N ranks resumes on M; with
 * sample_packing also packed_row_tokens, micro_batch_size x sequence_len); the hash
 * is FNV-1a 64 of its canonical JSON (sorted keys, compact): an identity, not a security
 * measure. */
#ifndef RLHF_TRAIN_RUN_RECORD_H
#define RLHF_TRAIN_RUN_RECORD_H

#include "config/train_config.h"

#include <jansson.h>
#include <stddef.h>

#define RUN_RECORD_FILE "rlhf_run.json"

/* The record of cfg's run (a new reference; never NULL). */
json_t *run_record_make(const TrainConfig *cfg);

/* Writes record to dir/rlhf_run.json atomically. Returns 0, or -1 with an error. */
int run_record_write(const char *dir, const json_t *record);

/* Reads dir/rlhf_run.json into *record. Returns 1 when read, 0 when there is none, -1 (error
 * set) when it cannot be read or is not a record. */
int run_record_read(const char *dir, json_t **record);

/* The config keys whose values differ between two records, as "key (was -> now)" separated by
 * ", " into buf (nested keys as trl.beta, datasets[0].path), leaving out the `n_skip` keys of
 * `skip`. Returns how many differ. */
int run_record_diff(const json_t *was, const json_t *now, const char *const *skip, int n_skip,
                    char *buf, size_t cap);

/* Whether two records are of the same run: the same config_hash and kind. */
bool run_record_same_run(const json_t *a, const json_t *b);

#endif
