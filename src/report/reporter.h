/* Reporters: where every log entry goes besides metrics.jsonl (TensorBoard event files, Weights
 * & Biases). One interface, fed from the one place every entry passes through
 * (train/metrics_log.c's metrics_log_entry, rank 0 only), so every method, GRPO included, reports
 * the same keys without code of its own.
 *
 * Invariants:
 *  1. A reporter never stops training: one that cannot start, or fails later (package missing,
 *     disk full, network), gets one warning on the run's log naming it and why, and is not
 *     called again this run.
 *  2. Each entry is sent once, at its "step", with HF's tag names (report_tags.h). */
#ifndef RLHF_REPORT_REPORTER_H
#define RLHF_REPORT_REPORTER_H

#include "config/train_config.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* One destination. */
typedef struct {
    const char *name; /* "tensorboard", "wandb": for warnings */
    void *ctx;
    /* Sends the scalars of one log entry (report_is_scalar) at step. Returns 0, or -1 with an
     * error (the reporter is then dropped, invariant 1). */
    int (*log)(void *ctx, const json_t *entry, int64_t step);
    /* Finishes and frees ctx (closes files, ends the W&B run). */
    void (*close)(void *ctx);
} Reporter;

enum { REPORTERS_MAX = 4 };

/* The reporters of a run. Zeroed: none (the ranks other than 0). */
typedef struct {
    Reporter r[REPORTERS_MAX];
    int n;
    FILE *log; /* where warnings go */
} Reporters;

/* Opens the reporters cfg->tracking asks for (config/tracking_config.h). Never fails: one that
 * cannot start is warned about on log and left out (invariant 1). A W&B that report_to: all
 * asked for only in passing is left out quietly when the wandb package is not installed, as
 * HF's "all" only reports to the integrations it finds. */
void reporters_open(Reporters *rs, const TrainConfig *cfg, FILE *log);

/* Sends a log entry to every reporter still running (invariant 2); one that fails is warned
 * about and closed. Safe on a zeroed Reporters. */
void reporters_log(Reporters *rs, const json_t *entry);

/* Closes every reporter. Safe on a zeroed or closed Reporters. */
void reporters_close(Reporters *rs);

/* ---- the destinations (each returns 0 with *r filled, or -1 with an error) ---- */

/* TensorBoard: an event file (tb_writer.h) in output_dir/runs/<Mon DD_HH-MM-SS>_<host>, the
 * logging_dir HF TrainingArguments gives under Axolotl, or in $TENSORBOARD_LOGGING_DIR when
 * set (HF's override). */
int tensorboard_reporter_open(Reporter *r, const TrainConfig *cfg, FILE *log);

/* Weights & Biases through the official wandb package in the embedded interpreter. Returns 1
 * (nothing opened, no error) when `optional` and wandb cannot be imported. Without Python in the
 * build: -1 with an error saying so. */
int wandb_reporter_open(Reporter *r, const TrainConfig *cfg, bool optional, FILE *log);

#endif
