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
#include "model/model.h"
#include "rewards/reward_registry.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Returns 0, or -1 with an error. Progress lines go to `log`. Loads the model, trains it and
 * writes it to output_dir: train_session_open + train_session_run + train_session_save. */
int train_run(const TrainConfig *cfg, FILE *log);

/* ---- the same in pieces, for a program that embeds the library (include/rlhf.h) ----
 * A session holds the model (and the adapter being trained) between runs, so that the caller
 * can read the weights before and after training and save them where it likes. */

typedef struct {
    Model model;
    LoraAdapter lora; /* the trained adapter when has_lora */
    bool has_lora;
    Tokenizer tok;
} TrainSession;

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

/* What an embedding program adds to a run; every member may be NULL. */
typedef struct {
    const RewardCallbacks *rewards; /* functions named {callback: NAME} in trl.reward_funcs */
    TrainOutcome *outcome;          /* receives the run's outcome */
} TrainHooks;

/* Loads base_model, makes or loads the adapter (adapter: lora) and the tokenizer. Returns 0, or
 * -1 with an error and nothing held. */
int train_session_open(TrainSession *s, const TrainConfig *cfg, FILE *log);

/* Trains the session's model as cfg says (cfg must be the one the session was opened with, or
 * describe the same model and adapter); it may be called again to train further. hooks may be
 * NULL. Returns 0, or -1 with an error (also after a signal, see stop_signal.h). */
int train_session_run(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks, FILE *log);

/* Writes the model (or the adapter, beside the base's config and tokenizer files) to dir.
 * Returns 0, or -1 with an error. */
int train_session_save(const TrainSession *s, const TrainConfig *cfg, const char *dir, FILE *log);

void train_session_close(TrainSession *s);

#endif
