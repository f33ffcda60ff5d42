/* GRPO's optimisation side (trl-methods.md §5.1, §5.3, §5.7): scored generation batches go in,
 * optimizer steps come out.
 *
 * A generation batch, when added, gets its old log-probs (when TRL would compute them: the
 * policy moves between the batch's generation and some of its micro-steps, or the replay buffer
 * is on) and its reference log-probs (beta != 0), goes through the replay buffer, is shuffled
 * row-wise and cut into steps_per_generation micro-batches, queued num_iterations times over.
 * Each step takes the next gradient_accumulation_steps queued micro-batches. The policy does not
 * change between two optimizer steps, so generating every batch a step needs before the step
 * is the same as TRL generating at the micro-step where the previous batch runs out.
 *
 * Over several ranks (dist.h) every rank holds every generation batch whole and the same queue
 * (the same row shuffles), and a step's window is the global one: accumulation_steps x world
 * queued micro-steps, rank r running micro-steps r, r + world, ... of it (trainer.h), each loss
 * normalised by the global window (bnpo, grpo, dr_grpo: 1 / (accumulation_steps x world); dapo:
 * the loss tokens of the whole generation batch, which every rank counts alike). Summed over
 * ranks, the gradient is the one of one process with world times the accumulation. The old and
 * reference log-probs of a batch are computed a contiguous run of micro-batches per rank and
 * gathered. */
#ifndef RLHF_GRPO_GRPO_TRAINER_H
#define RLHF_GRPO_GRPO_TRAINER_H

#include "common/torch_generator.h"
#include "config/grpo_config.h"
#include "methods/grpo_loss.h"
#include "model/reference_policy.h"
#include "grpo/grpo_batch.h"
#include "train/step_metrics.h"
#include "train/trainer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct GrpoQueuedBatch GrpoQueuedBatch;

typedef struct {
    GrpoQueuedBatch *batch; /* shared by the batch's micro-steps */
    int *rows;              /* micro_batch_size row indices into it */
} GrpoMicroStep;

typedef struct {
    const GrpoConfig *cfg;
    Trainer *trainer;
    const ReferencePolicy *ref; /* read when beta != 0 */
    bool replay_on;             /* the replay buffer is on (set by grpo_run) */
    int micro_batch_size, accumulation_steps;
    bool shuffle_rows; /* TRL shuffles each generation batch's rows; tests replaying TRL's order
                          turn it off */
    uint64_t seed;
    /* Not NULL (one process): the row shuffle is TRL's, torch.randperm(rows) drawn from torch's
     * global generator (trl shuffle_sequence_dict), drawn for every batch added even when
     * shuffle_rows is off; NULL: a Fisher-Yates shuffle seeded by (seed, batches_added) */
    TorchGenerator *torch_rng;
    int64_t batches_added; /* the shuffle's and the replay draws' stream */
    GrpoMicroStep *queue;
    int n_queued, queue_cap;
    StepMetrics metrics; /* since the last log line */
} GrpoTrainer;

void grpo_trainer_init(GrpoTrainer *g, const GrpoConfig *cfg, Trainer *trainer,
                       const ReferencePolicy *ref, int micro_batch_size, int accumulation_steps,
                       uint64_t seed);
void grpo_trainer_free(GrpoTrainer *g);

/* Whether added batches get old log-probs (TRL: gradient_accumulation_steps is not a multiple
 * of steps_per_generation x num_iterations; rlhf.c: also whenever the replay buffer is on, since
 * a replayed group is off-policy). */
bool grpo_trainer_needs_old_logps(const GrpoTrainer *g);

/* Gives a scored batch the old and reference log-probs it needs (allocating b->old_logps /
 * b->ref_logps), under the policy as it stands. Collective over ranks (each computes its run of
 * micro-batches; all get every row). Returns 0, or -1 with an error (agreed by every rank). */
int grpo_trainer_logprobs(GrpoTrainer *g, GrpoBatch *b);

/* Queues a batch's micro-steps (its arrays move into the trainer; *b is zeroed). */
void grpo_trainer_add(GrpoTrainer *g, GrpoBatch *b);

/* Micro-steps queued. An optimizer step needs grpo_trainer_window of them. */
int grpo_trainer_queued(const GrpoTrainer *g);

/* The micro-steps of one optimizer step over all ranks: accumulation_steps x world. */
int grpo_trainer_window(const GrpoTrainer *g);

/* One optimizer step over the next grpo_trainer_window queued micro-steps (this rank running
 * its accumulation_steps of them): trainer_step's result (TRAINER_STEP_SKIPPED when the loss or
 * gradient norm is not finite). Collective over ranks. */
int grpo_trainer_step(GrpoTrainer *g, StepStats *stats);

/* Log-probs of a batch's completions (rows x completion_w, 0 off the completion) under `model`
 * as it stands, or under the reference when ref is given; micro_batch_size rows at a time. */
int grpo_batch_logprobs(Model *model, const ReferencePolicy *ref, const GrpoBatch *b,
                        int micro_batch_size, float *out);

#endif
