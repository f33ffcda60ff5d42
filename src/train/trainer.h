/* One optimizer step of training: the micro-batches of a gradient-accumulation window go
 * forward and backward (gradients summed), then global-norm clipping, the learning-rate
 * schedule and AdamW, as HF's Trainer orders them. The method (a TrainMethod: SFT, the preference
 * losses, KTO, GRPO) supplies dL/dlogp; this file knows nothing of which one runs, so that every
 * method gets the same accumulation, clipping and skipping of bad steps. The adapter's dropout is
 * on only inside a step, with masks drawn from (seed, step, micro-batch): a resumed run draws the
 * same ones.
 *
 * Over several ranks (dist.h) a window is the global one: rank r runs its micro-batches
 * r, r + world, r + 2 world, ... of it, and micro-batch numbers (the dropout masks) are the
 * global ones. The gradients are summed over ranks before the norm is taken, so the norm, the
 * skip decision, the clipping and the update are the same on every rank; the methods scale
 * their losses by the global window (the label tokens of the whole window, or its micro-batch
 * count). With zero1 each rank keeps the AdamW moments of one slice of the parameters
 * (DistShards), updates that slice, and the ranks all-gather the updated weights. */
#ifndef RLHF_TRAIN_TRAINER_H
#define RLHF_TRAIN_TRAINER_H

#include "kernels/cpu/kernels.h"
#include "model/activations.h"
#include "model/forward.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "dist/dist.h"

typedef struct {
    TokenBatch batch;
    const uint8_t *label_mask; /* (B*T): position t is a label (its token is predicted) */
} MicroBatch;

typedef struct {
    double learning_rate, max_grad_norm; /* max_grad_norm 0: no clipping */
    AdamWConfig adamw;
    LrScheduleType schedule;
    int64_t warmup_steps, total_steps;
    bool gradient_checkpointing; /* recompute each layer's activations in backward */
    bool disable_dropout;        /* the adapter's dropout stays off (TRL's preference trainers) */
    uint64_t seed;               /* of the adapter's dropout masks */
    bool zero1;                  /* over several ranks: shard the AdamW moments (zero_stage: 1) */
} TrainerOptions;

typedef struct DeviceResidency DeviceResidency; /* train/device_residency.h */

/* What the optimizer updates is either every weight of the model or, when an adapter is trained,
 * the adapter's parameters alone: the base then has no gradient and no optimizer state. */
typedef struct {
    Model *model;
    LoraAdapter *lora; /* the adapter trained (attached to the model); NULL: full fine-tuning */
    TrainerOptions opt;
    float *params;            /* the trained parameters: model->params or lora->params */
    size_t n_params;          /* their count */
    const char **param_names; /* one per span: the tensor names checkpoints use */
    ParamSpan *spans;         /* one per trained tensor, with Trainer's decay rule */
    int n_spans;
    AdamW adamw;       /* all the trained parameters, or this rank's slice of them when sharded */
    float *grads;      /* n_params */
    int64_t step;      /* optimizer steps done */
    int rank, world;   /* dist_rank(), dist_size() when the trainer was made */
    bool sharded;      /* zero1 over more than one rank */
    DistShards shards; /* sharded: the slice of the parameters each rank updates */
    ForwardTape tape;  /* the activations of a micro-batch, kept allocated from step to step */
    /* Non-NULL while the parameters, gradients and moments live in a device backend's memory
     * (device_residency.h): params, grads and the moments are then that backend's memory, and
     * host code reads them only through device_residency_to_host. */
    DeviceResidency *resident;
} Trainer;

/* A training method for trainer_step: it turns each micro-batch's per-token log-probs into its
 * share of the window's loss and dL/dlogp. */
typedef struct {
    void *ctx;
    /* Once per window, before any forward (SFT counts the window's label tokens here). May be
     * NULL. */
    int (*begin_window)(void *ctx, const MicroBatch *mbs, int n);
    /* Micro-batch `index` of the window: logp holds the log-probs at the label_mask positions
     * (0 elsewhere), stats the statistics of the logits there when wants_stats (else NULL).
     * Writes dlogp (every cell) and returns its loss contribution in *loss. Runs between the
     * policy's forward and backward, so it may run other forwards (a reference) on the model.
     * Returns 0, or -1 with an error. */
    int (*micro_loss)(void *ctx, int index, const MicroBatch *mb, const float *logp,
                      const LogitStats *stats, float *dlogp, double *loss);
    bool wants_stats;
} TrainMethod;

typedef struct {
    double loss;      /* mean NLL over the window's label tokens */
    double grad_norm; /* before clipping */
    double lr;        /* used for this step */
    size_t tokens;    /* label tokens in the window */
} StepStats;

/* With `lora` given, the adapter is attached to the model (m->lora) and trained alone. */
int trainer_init(Trainer *t, Model *m, LoraAdapter *lora, const TrainerOptions *opt);
void trainer_free(Trainer *t);
/* Frees the activation buffers trainer_step keeps between steps (the next step makes them
 * again): for a phase that needs the memory for something else, as GRPO's generation does. */
void trainer_release_activations(Trainer *t);

/* trainer_step's result when the window's loss or gradient norm is NaN or infinite. */
#define TRAINER_STEP_SKIPPED 1

/* One optimizer step over n micro-batches with a method's loss. stats->loss is the sum of the
 * method's micro-batch contributions; stats->tokens counts label positions. Returns 0;
 * TRAINER_STEP_SKIPPED when the loss or the gradient norm is not finite: the parameters and the
 * AdamW moments are untouched, but the step counts (t->step and AdamW's counter advance, as
 * global_step does in HF when a step is skipped); or -1 with an error. */
int trainer_step(Trainer *t, const MicroBatch *mbs, int n, const TrainMethod *method,
                 StepStats *stats);

/* Checkpoints of a sharded trainer hold the whole moments (the format does not depend on the
 * rank count). Collective: every rank calls it. When sharded, on rank 0, *m and *v receive the
 * full moments (n_params each, at the parameters' flat offsets) gathered from every rank's slice
 * (*owned true: the caller frees them); otherwise they are NULL (the trainer's own are read
 * through trainer_span_moments). */
void trainer_gather_moments(const Trainer *t, float **m, float **v, bool *owned);

/* Where rank 0 reads a checkpoint's moments into before trainer_distribute: when sharded, new
 * full-size arrays (*owned true); otherwise NULL (the trainer's own). Not collective. */
void trainer_moment_buffers(Trainer *t, float **m, float **v, bool *owned);

/* The tensors of span p's moments, for a checkpoint: in the full arrays m, v when sharded (from
 * trainer_gather_moments or trainer_moment_buffers), else the optimizer's own. Returns their
 * count (adamw_span_moments). */
int trainer_span_moments(const Trainer *t, float *m, float *v, int p, MomentTensor out[4]);

/* After rank 0 has restored the parameters, t->step and the full moments m, v: copies them to
 * every rank (each rank's slice of the moments when sharded). Collective. */
void trainer_distribute(Trainer *t, const float *m, const float *v);

/* SFT as a TrainMethod: the mean NLL over the window's label tokens (counted into
 * *window_tokens, which must outlive the method; over several ranks, the whole window's). */
TrainMethod trainer_sft_method(size_t *window_tokens);

/* sum[r] = Σ of row r's log-probs at the positions `mark` selects (rows x t_len), and count[r]
 * their number (count may be NULL): the per-sequence values preference losses read. */
void logp_row_sums(const float *logp, const uint8_t *mark, int rows, int t_len, double *sum,
                   int *count);

/* A micro-batch's per-token log-probs (as model_token_logprobs gives them for mb->label_mask)
 * and the statistics of the logits behind them, without gradient, for evaluation: the forward
 * keeps only a recompute tape. logp and stats (B*T) are caller-allocated. Returns 0, or -1 with
 * an error. */
int trainer_eval_logprobs(const Model *m, const MicroBatch *mb, float *logp, LogitStats *stats);

/* One SFT optimizer step over n micro-batches (trainer_step with trainer_sft_method). Returns
 * trainer_step's result. */
int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats);

#endif
