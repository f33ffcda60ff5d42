/* One optimizer step of training: the micro-batches of a gradient-accumulation window go
 * forward and backward (gradients summed), then global-norm clipping, the learning-rate
 * schedule and AdamW, as HF's Trainer orders them. The method supplies dL/dlogp; this file knows
 * nothing of which method runs (SFT for now). The adapter's dropout is on only inside a step,
 * with masks drawn from (seed, step, micro-batch): a resumed run draws the same ones. */
#ifndef RLHF_TRAIN_TRAINER_H
#define RLHF_TRAIN_TRAINER_H

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

typedef struct {
    double loss;      /* mean NLL over the window's label tokens */
    double grad_norm; /* before clipping */
    double lr;        /* used for this step */
    size_t tokens;    /* label tokens in the window */
} StepStats;

/* With `lora` given, the adapter is attached to the model (m->lora) and trained alone. */
int trainer_init(Trainer *t, Model *m, LoraAdapter *lora, const TrainerOptions *opt);
void trainer_free(Trainer *t);

/* One SFT optimizer step over n micro-batches. Returns 0, or -1 with an error. */
int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats);

#endif
