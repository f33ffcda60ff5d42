/* The one training loop every method runs through (SFT, the preference methods, KTO, the GRPO
 * family): it makes the Trainer from the config, resumes from a checkpoint, opens
 * metrics.jsonl, then runs optimizer steps until the planned total, each followed by the same
 * after-step block (step_hooks.h: log line, progress, evaluation, checkpoint, signal, bad-step
 * count). What a step trains on comes from a StepSource: examples cut into windows
 * (train_task.h), or GRPO's scored generation batches (src/grpo/).
 *
 * Over several ranks (dist.h) every rank runs the loop in step; rank 0 alone writes
 * metrics.jsonl, checkpoints and the log. */
#ifndef RLHF_TRAIN_TRAIN_LOOP_H
#define RLHF_TRAIN_TRAIN_LOOP_H

#include "config/train_config.h"
#include "model/model.h"
#include "train/trainer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What a run leaves behind, filled whether it succeeded or not (a run stopped by a signal has
 * its history up to the checkpoint). */
typedef struct {
    json_t *log_history; /* every log entry, a resumed run's earlier ones first (new reference;
                            NULL when the run stopped before its loop started) */
    int64_t global_step; /* optimizer steps done, counting those before a resume */
    int64_t max_steps;   /* the run's planned total */
    int64_t first_step;  /* the step the run started from (0, or the checkpoint's) */
    double epoch;        /* global_step in epochs */
    double loss_sum;     /* sum of this run's step losses; skipped (non-finite) steps excluded */
    int64_t loss_steps;  /* how many steps loss_sum holds */
    double seconds;      /* the loop's wall time */
} TrainOutcome;

/* Where a run's optimizer steps come from. Every callback gets ctx; those marked "may be NULL"
 * are optional. */
typedef struct {
    void *ctx;
    int64_t total_steps;     /* the run's planned optimizer steps */
    int64_t steps_per_epoch; /* for the epoch figure of log lines and checkpoints */
    /* After the trainer is made, a checkpoint restored (resumed_from: its directory, "" on a
     * fresh run) and metrics.jsonl opened: the source's own set-up and its banner lines.
     * Collective. Returns 0, or -1 with an error. May be NULL. */
    int (*start)(void *ctx, Trainer *tr, const json_t *log_history, const char *resumed_from,
                 FILE *log);
    /* Optimizer step tr->step + 1: makes this rank's micro-batches of the step and runs
     * trainer_step over them; adds the tokens it processed to *tokens (the rate the progress
     * lines show; the whole job's over several ranks). Collective. Returns trainer_step's
     * result (0, TRAINER_STEP_SKIPPED, or -1 with an error agreed by every rank). */
    int (*step)(void *ctx, Trainer *tr, StepStats *st, double *tokens);
    /* Adds the source's metrics since the last log line to a log entry (collective: over
     * several ranks the means are taken over ranks). May be NULL. */
    void (*flush_metrics)(void *ctx, json_t *entry);
    /* Adds timing keys of the steps since the last log line to a log entry (after the
     * bad-step count; the order of keys in metrics.jsonl follows). May be NULL. */
    void (*add_timing)(void *ctx, json_t *entry, int64_t step);
    /* Evaluation on the n_eval held-out items: adds eval_* keys to entry, eval_key among
     * them. Collective. Returns 0, or -1 with an error. NULL (or n_eval 0): none. */
    int (*evaluate)(void *ctx, Model *m, json_t *entry);
    size_t n_eval;
    const char *eval_key;   /* the key an evaluation's log line shows: "eval_loss" */
    const char *eval_items; /* what the held-out items are, for that line: "examples" */
    /* Written into each checkpoint beside the weights, atomically with them (GRPO's replay
     * buffer; CheckpointTarget.write_extra). May be NULL. */
    int (*write_extra)(void *ctx, const char *dir);
    void *extra_ctx;
} StepSource;

/* HF Trainer's options from the config: learning rate, clipping, AdamW (8-bit per optimizer),
 * the schedule and its warm-up (warmup_steps, else warmup_ratio of total_steps, else
 * Axolotl's default), gradient checkpointing, dropout (off for every preference and RL method,
 * TRL's disable_dropout=True), the seed, ZeRO-1. Cannot fail. */
TrainerOptions trainer_options_from_config(const TrainConfig *cfg, int64_t total_steps);

/* Trains m (or the adapter lora, when not NULL) for src->total_steps optimizer steps, as
 * described at the top. out (may be NULL) receives the outcome, also when the run fails; its
 * log_history is then the caller's to json_decref. Prints the closing `done:` line. Returns 0,
 * or -1 with an error (also after a signal, see stop_signal.h, once its checkpoint is saved). */
int train_loop_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const StepSource *src,
                   TrainOutcome *out, FILE *log);

/* With 8-bit AdamW: one line saying how many parameters have 8-bit moments and what the
 * optimizer state weighs against fp32 moments. Nothing otherwise. For a source's banner. */
void train_loop_log_optimizer(FILE *log, const Trainer *tr);

#endif
