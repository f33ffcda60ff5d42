/* What happens after every optimizer step of the training loop, for every method alike: the
 * bad-step guard, the running loss, the log line at logging_steps (metrics.jsonl and the log),
 * the progress line on a terminal, evaluation at eval_steps (or at the end), a checkpoint at
 * save_steps, and a signal's checkpoint-and-stop.
 *
 * Invariants:
 *  1. loss_sum / loss_count cover the steps since the last log line, skipped steps excluded;
 *     run_loss_sum / run_loss_steps the whole run (a resumed run's earlier steps excluded).
 *  2. Every rank calls step_hooks_after_step after every step with the same step results, so
 *     all ranks take the same branches (log, evaluate, save, stop) at the same step. */
#ifndef RLHF_TRAIN_STEP_HOOKS_H
#define RLHF_TRAIN_STEP_HOOKS_H

#include "config/train_config.h"
#include "train/bad_steps.h"
#include "train/checkpoint.h"
#include "train/metrics_log.h"
#include "train/train_loop.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const TrainConfig *cfg;
    const StepSource *src;
    Trainer *tr;
    MetricsFile *metrics;
    json_t *log_history; /* borrowed */
    CheckpointTarget target;
    BadSteps bad;
    FILE *log;
    bool tty;             /* log is a terminal: one progress line rewritten every step */
    char note[96];        /* the figures of the last log line worth a glance */
    double start, tokens; /* the loop's start (clock_seconds) and tokens processed since */
    int64_t first_step;   /* the step the run started from */
    double loss_sum;      /* invariant 1 */
    int64_t loss_count;
    double run_loss_sum;
    int64_t run_loss_steps;
} StepHooks;

/* The hooks of a run of src on tr, starting now from tr->step. Borrows every pointer. */
StepHooks step_hooks_init(const TrainConfig *cfg, const StepSource *src, Trainer *tr,
                          MetricsFile *metrics, json_t *log_history, FILE *log);

/* After optimizer step tr->step, whose trainer_step result was step_rc (0 or
 * TRAINER_STEP_SKIPPED) and stats st: everything described at the top. Collective. Returns 0
 * to go on, or -1 with an error: too many bad steps in a row, a failed evaluation or
 * checkpoint, or a signal (after its checkpoint is saved). */
int step_hooks_after_step(StepHooks *h, int step_rc, const StepStats *st);

#endif
