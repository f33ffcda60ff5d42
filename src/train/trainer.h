/* One optimizer step of training: the micro-batches of a gradient-accumulation window go
 * forward and backward (gradients summed), then global-norm clipping, the learning-rate
 * schedule and AdamW, as HF's Trainer orders them. The method supplies dL/dlogp; this file knows
 * nothing of which method runs (SFT for now). The adapter's dropout is on only inside a step,
 * with masks drawn from (seed, step, micro-batch): a resumed run draws the same ones. */
#ifndef RLHF_TRAIN_TRAINER_H
#define RLHF_TRAIN_TRAINER_H

#include "kernels/cpu/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "train/optimizer.h"

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
} TrainerOptions;

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
    AdamW adamw;
    float *grads; /* n_params */
    int64_t step; /* optimizer steps done */
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

/* trainer_step's result when the window's loss or gradient norm is NaN or infinite. */
#define TRAINER_STEP_SKIPPED 1

/* One optimizer step over n micro-batches with a method's loss. stats->loss is the sum of the
 * method's micro-batch contributions; stats->tokens counts label positions. Returns 0;
 * TRAINER_STEP_SKIPPED when the loss or the gradient norm is not finite: the parameters and the
 * AdamW moments are untouched, but the step counts (t->step and AdamW's counter advance, as
 * global_step does in HF when a step is skipped); or -1 with an error. */
int trainer_step(Trainer *t, const MicroBatch *mbs, int n, const TrainMethod *method,
                 StepStats *stats);

/* SFT as a TrainMethod: the mean NLL over the window's label tokens (counted into
 * *window_tokens, which must outlive the method). */
TrainMethod trainer_sft_method(size_t *window_tokens);

/* One SFT optimizer step over n micro-batches. Returns 0, or -1 with an error. */
/* sum[r] = Σ of row r's log-probs at the positions `mark` selects (rows x t_len), and count[r]
 * their number (count may be NULL): the per-sequence values preference losses read. */
void logp_row_sums(const float *logp, const uint8_t *mark, int rows, int t_len, double *sum,
                   int *count);

/* A micro-batch's per-token log-probs (as model_token_logprobs gives them for mb->label_mask)
 * and the statistics of the logits behind them, without gradient, for evaluation: the forward
 * keeps only a recompute tape. logp and stats (B*T) are caller-allocated. Returns 0, or -1 with
 * an error. */
int trainer_eval_logprobs(const Model *m, const MicroBatch *mb, float *logp, LogitStats *stats);

int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats);

#endif
