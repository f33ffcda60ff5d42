/* `rlhf train` and the embedding API's training session: a whole run from a TrainConfig, for
 * every method. The session loads the model (and makes or loads the adapter) and the tokenizer,
 * hands them to the method's run (sft_task.h, pref_task.h, grpo/grpo_run.h), which trains them
 * in the one training loop (train_loop.h), and writes the result: the final model (weights in
 * the source dtype, config.json, tokenizer and generation files) in output_dir, or with
 * adapter: lora, where the base stays frozen and the adapter is what is trained, checkpointed
 * and written, PEFT's adapter files beside config.json and the tokenizer. */
#ifndef RLHF_TRAIN_SESSION_H
#define RLHF_TRAIN_SESSION_H

#include "config/train_config.h"
#include "model/model.h"
#include "rewards/reward_registry.h"
#include "tokenizer/tokenizer.h"
#include "train/train_device.h"
#include "train/train_loop.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The start-up memory plan (train/memory_plan.h), from config.json alone: printed to `log`, and
 * a run that cannot fit is refused (-1 with an error naming the numbers and the settings that
 * shrink it) before anything is loaded or written. A run that fits only with gradient
 * checkpointing, where the config does not set gradient_checkpointing, gets it turned on in
 * *cfg (with a line in `log`): it changes the memory and the time a step takes, not what is
 * trained. train_run calls it first; an embedding program calls it before train_session_open.
 * Returns 0 when the run fits or free memory is unknown. */
int train_memory_plan(TrainConfig *cfg, FILE *log);

/* Returns 0, or -1 with an error. Progress lines go to `log`. Loads the model, trains it and
 * writes it to output_dir: train_session_open + train_session_run + train_session_save; then
 * pushes output_dir to the Hub when push_to_hub (train/hub_push.h). */
int train_run(const TrainConfig *cfg, FILE *log);

/* ---- the same in pieces, for a program that embeds the library (include/rlhf.h) ----
 * A session holds the model (and the adapter being trained) between runs, so that the caller
 * can read the weights before and after training and save them where it likes. */

typedef struct {
    Model model;
    LoraAdapter lora; /* the trained adapter when has_lora */
    bool has_lora;
    Tokenizer tok;
    json_t *final_metrics; /* the last run's last value of each logged metric, train_loss,
                              global_step and epoch (for the model card); NULL before a run */
    TrainDevice device;    /* where the runs compute (`device`); the weights are on the host
                              between runs */
} TrainSession;

/* What an embedding program adds to a run; every member may be NULL. */
typedef struct {
    const RewardCallbacks *rewards; /* functions named {callback: NAME} in trl.reward_funcs */
    void *rollout;         /* the Python callable trl.rollout_func: {callback: NAME} stands for */
    TrainOutcome *outcome; /* receives the run's outcome */
} TrainHooks;

/* Resolves `device` (train/train_device.h: an error there comes first), loads base_model, makes
 * or loads the adapter (adapter: lora) and the tokenizer. Returns 0, or -1 with an error and
 * nothing held. */
int train_session_open(TrainSession *s, const TrainConfig *cfg, FILE *log);

/* Trains the session's model as cfg says (cfg must be the one the session was opened with, or
 * describe the same model and adapter); it may be called again to train further. hooks may be
 * NULL. Returns 0, or -1 with an error (also after a signal, see stop_signal.h). */
int train_session_run(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks, FILE *log);

/* Writes the model (or the adapter, beside the base's config and tokenizer files) to dir, and
 * its model card README.md (io/model_card.h). Returns 0, or -1 with an error. */
int train_session_save(const TrainSession *s, const TrainConfig *cfg, const char *dir, FILE *log);

void train_session_close(TrainSession *s);

#endif
