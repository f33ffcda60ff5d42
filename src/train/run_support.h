/* What every training loop shares (SFT, preference methods, GRPO): the clock, Axolotl's warm-up
 * default, the progress line, trainer_state.json, resuming, the log entries and the reference
 * policy. */
#ifndef RLHF_TRAIN_RUN_SUPPORT_H
#define RLHF_TRAIN_RUN_SUPPORT_H

#include "config/train_config.h"
#include "model/reference_policy.h"
#include "train/trainer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

double now_seconds(void);

/* order = a seeded permutation of 0..n-1, one per (seed, epoch). */
void shuffle(size_t *order, size_t n, int64_t seed, int64_t epoch);

/* val_set_size: a fraction (< 1) or a count of the n examples, chosen by a seeded shuffle: the
 * first *n_val of *order (the draw is reproducible, but not the one datasets' train_test_split
 * makes). *order is NULL when there is no validation split. Returns 0, or -1 when nothing would
 * be left to train on. */
int validation_draw(size_t n, const TrainConfig *cfg, size_t **order, size_t *n_val);

/* Axolotl's warm-up when neither warmup_steps nor warmup_ratio is set. */
int64_t default_warmup(int64_t total);

/* With 8-bit AdamW: one line saying how many parameters have 8-bit moments and what the
 * optimizer state weighs against fp32 moments. Nothing otherwise. */
void log_optimizer_state(FILE *log, const Trainer *tr);

/* The figures worth a glance on the progress line, from a log entry, into buf. */
void metric_note(const json_t *entry, char *buf, size_t size);

void show_progress(FILE *log, int64_t step, int64_t total, int64_t first_step, double loss,
                   double lr, const char *note, double tokens_per_s, double elapsed);

/* trainer_state.json in HF's schema. */
json_t *trainer_state(const TrainConfig *cfg, int64_t step, double epoch, int64_t total,
                      json_t *log_history);

/* resume_from_checkpoint: restores the trainer and appends the checkpoint's log history. The
 * directory resumed from is written to dir (may be NULL). Collective over ranks (rank 0 finds
 * and reads the checkpoint). Returns 0, or -1 with an error. */
int resume(const TrainConfig *cfg, Trainer *tr, json_t **log_history, FILE *log, char *dir,
           size_t dir_size);

/* The last value of key in the log history (0 when never logged): what a resumed run's running
 * figures continue from. */
double last_logged(const json_t *log_history, const char *key);

/* A run's metrics.jsonl. A resumed run appends to it; a fresh run replaces it, but only when it
 * logs its first entry: a run that fails before then (a bad reward function, a dataset error)
 * leaves the previous run's file as it was. */
typedef struct {
    FILE *fp;
    bool replace_pending; /* fresh run, nothing logged yet: empty the file at the first entry */
    bool created;         /* the file was not there: removed again if nothing is logged */
    char path[4096];
} MetricsFile;

/* Opens output_dir/metrics.jsonl for appending (creating it). Returns 0, or -1 with an error.
 * A MetricsFile left zeroed (the ranks other than 0) writes nothing. */
int metrics_file_open(MetricsFile *f, const char *output_dir, bool resumed);
void metrics_file_close(MetricsFile *f);

/* Appends a log entry: to metrics.jsonl (one line) and to trainer_state's log_history. */
void log_entry(MetricsFile *metrics, json_t *log_history, json_t *entry);

/* The reference policy (trl-methods.md §1.3): with an adapter, the same network with the adapter
 * switched off, or (lora_model_dir) a frozen copy of the adapter as loaded; else (or with
 * rl_adapter_ref_model) a frozen copy of the base in *frozen (*has_frozen set). */
int make_reference(const TrainConfig *cfg, Model *m, LoraAdapter *lora, Model *frozen,
                   bool *has_frozen, LoraAdapter *initial, ReferencePolicy *ref, FILE *log);

#endif
