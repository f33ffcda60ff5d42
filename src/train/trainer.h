/* One optimizer step of training: the micro-batches of a gradient-accumulation window go
 * forward and backward (gradients summed), then global-norm clipping, the learning-rate
 * schedule and AdamW, as HF's Trainer orders them. The method supplies dL/dlogp; this file knows
 * nothing of which method runs (SFT for now). */
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
} TrainerOptions;

typedef struct {
    Model *model;
    TrainerOptions opt;
    AdamW adamw;
    ParamSpan *spans; /* one per parameter tensor, with Trainer's decay rule */
    float *grads;     /* n_params */
    int64_t step;     /* optimizer steps done */
} Trainer;

typedef struct {
    double loss;      /* mean NLL over the window's label tokens */
    double grad_norm; /* before clipping */
    double lr;        /* used for this step */
    size_t tokens;    /* label tokens in the window */
} StepStats;

int trainer_init(Trainer *t, Model *m, const TrainerOptions *opt);
void trainer_free(Trainer *t);

/* One SFT optimizer step over n micro-batches. Returns 0, or -1 with an error. */
int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats);

#endif
