/* Training checkpoints: output_dir/checkpoint-<global_step>/ (HF Trainer's layout and names).
 *
 * Invariants:
 *  1. A directory named checkpoint-N is complete: it is written under a temporary name in
 *     output_dir, every file fsynced, then renamed into place. A crash mid-save leaves at most a
 *     ".checkpoint-N.tmp" directory, which resume ignores and the next save of N replaces.
 *  2. It holds model.safetensors in fp32 (the master weights, so resuming loses nothing) or,
 *     when an adapter is trained, adapter_config.json and adapter_model.safetensors (fp32, PEFT's
 *     format); config.json and the tokenizer files (it loads as a model, or as an adapter);
 *     optimizer.safetensors (AdamW's exp_avg.<name> and exp_avg_sq.<name> for every trained
 *     tensor, fp32: our own format, documented here, where HF writes a pickled optimizer.pt)
 *     and trainer_state.json (HF's schema; the optimizer step, the schedule position, the data
 *     position and the dropout masks all follow from global_step).
 *  3. Rotation (save_total_limit) deletes the oldest checkpoints only after the new one is in
 *     place, so at least one complete checkpoint exists at every moment once one was written.
 *  4. The format does not depend on how many ranks trained: over several (dist.h), rank 0 writes
 *     the checkpoint, with the moments gathered from every rank's slice under ZeRO-1, and rank 0
 *     reads it on resume and hands the weights, the moments (or each rank's slice) and the step
 *     to the others. So a checkpoint of an N-rank run resumes on M ranks, or on one. */
#ifndef RLHF_TRAIN_CHECKPOINT_H
#define RLHF_TRAIN_CHECKPOINT_H

#include "train/trainer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *output_dir;
    const char *model_dir;     /* where config.json comes from */
    const char *base_id;       /* the base's Hub id, or NULL (model_dir_write_adapter) */
    const char *tokenizer_dir; /* where the tokenizer files come from */
    int64_t save_total_limit;  /* 0: keep all */
    /* Method state that belongs in the checkpoint too (GRPO's replay buffer): called with the
     * directory while it is still the temporary one, so it lands atomically with the rest.
     * May be NULL. Returns 0, or -1 with an error. */
    int (*write_extra)(void *ctx, const char *dir);
    void *extra_ctx;
} CheckpointTarget;

/* Writes checkpoint-<tr->step> (invariants 1-4). `state` is trainer_state.json's content (read
 * on rank 0 only). Collective: every rank calls it, and every rank gets rank 0's result.
 * Returns 0, or -1 with an error; on failure no checkpoint-<step> is left behind and older
 * checkpoints are untouched. */
int checkpoint_save(const CheckpointTarget *target, const Trainer *tr, const json_t *state);

/* The checkpoint-N with the largest N in output_dir, into out. Returns 1 when found, 0 when
 * there is none, -1 on error. */
int checkpoint_find_latest(const char *output_dir, char *out, size_t cap);

/* Restores the trained parameters (weights or adapter) and the optimizer moments from a
 * checkpoint directory, sets the trainer's step, and returns its trainer_state.json (caller
 * decrefs). The trainer must train what the checkpoint holds, with the same shapes. Collective:
 * rank 0 reads `dir` (NULL there: it already failed to find one, with its error set) and the
 * other ranks receive what it read; their *state is an empty object. Returns 0, or -1 with an
 * error naming the file, on every rank. */
int checkpoint_load(const char *dir, Trainer *tr, json_t **state);

#endif
