/* A training task: a dataset seen through micro-batches, and the method that turns them into a
 * loss (SFT, the preference methods, KTO). train_task_run trains it in the one training loop:
 * the task owns the examples, the loop owns epochs, windows, the schedule, logging, evaluation
 * and checkpoints.
 *
 * Step arithmetic (as HF's Trainer): micro-batches of micro_batch_size examples, windows of
 * gradient_accumulation_steps x world micro-batches per optimizer step (the last window of an
 * epoch may be shorter), total steps = max_steps or ceil(num_epochs x windows per epoch).
 * Examples are shuffled every epoch as HF's Trainer shuffles them for the same seed
 * (data_order.h: torch.randperm from a generator seeded with seed + epoch), or taken in dataset
 * order (a sequential task). Over several ranks (dist.h) the order is the
 * one-process order on every rank, and rank r runs micro-batches r, r + world, ... of each
 * window: micro_batch_size is per rank, as HF's per_device_train_batch_size, and a run on N
 * ranks takes the steps a one-process run with N times the accumulation takes. */
#ifndef RLHF_TRAIN_TRAIN_TASK_H
#define RLHF_TRAIN_TRAIN_TASK_H

#include "config/train_config.h"
#include "model/model.h"
#include "train/train_loop.h"
#include "train/trainer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct TrainTask {
    void *ctx;
    size_t n_examples;
    /* Items per micro-batch (0: micro_batch_size), and what an item is in the opening line
     * (NULL: "examples"): SFT with sample_packing builds each micro-batch from one packed row. */
    int64_t micro_batch_items;
    const char *item_name;
    /* Every epoch in dataset order, never shuffled (KTO: TRL's sequential sampler, since each
     * micro-batch's KL rows pair its own prompts and completions). */
    bool sequential;
    /* Builds micro-batch `slot` of a window from examples order[first .. first+count); *tokens
     * gets their token count (for tokens/s). Slots 0 .. gradient_accumulation_steps-1 exist. */
    void (*build)(void *ctx, int slot, const size_t *order, size_t first, int count, MicroBatch *mb,
                  size_t *tokens);
    void (*release)(void *ctx, int slot);
    /* Called before each step with the micro-batches this rank runs (n_micro, built in slots
     * 0 .. n_micro-1) and the global window's count (n_window; = n_micro in one process). May be
     * NULL. */
    void (*begin_step)(void *ctx, int n_micro, int n_window);
    TrainMethod method;
    /* Adds the method's metrics since the last log line to a log entry, each key after prefix
     * ("" or "eval_"). May be NULL. */
    void (*flush_metrics)(void *ctx, json_t *entry, const char *prefix);
    /* The tokens (attention mask) this rank has trained on so far: the running count logged as
     * num_tokens. With a held_out task, evaluations log the sum over ranks as eval_num_tokens,
     * as TRL does (its counter, which only training batches add to, logged in eval mode too).
     * May be NULL (no num_tokens). */
    double (*trained_tokens)(void *ctx);
    /* Evaluation, either of the two (or neither):
     *  - evaluate: the task's own evaluation on its n_eval held-out examples, adding eval_loss
     *    (and any eval_* keys) to entry;
     *  - held_out: held-out examples through the same kind of build and method: eval_loss is
     *    the mean over examples of the batch losses (as HF's evaluation loop weighs them), and
     *    the method's metrics follow with the eval_ prefix. */
    int (*evaluate)(void *ctx, Model *m, json_t *entry);
    size_t n_eval;
    const struct TrainTask *held_out;
} TrainTask;

/* Trains the task in the one training loop (train_loop_run). Returns 0, or -1 with an error. */
int train_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const TrainTask *task,
                   TrainOutcome *out, FILE *log);

/* Calls visit(task->ctx, first, count) for every batch of the task's examples in dataset order
 * (examples first .. first+count-1), batch_size at a time, each built in slot 0 (where visit
 * reads it through the task's ctx) and released after the visit: one pass over the data outside
 * training (precompute_ref_log_probs). Stops at the first visit that fails. Returns 0, or -1
 * with that visit's error. */
int train_task_each_batch(const TrainTask *task, int64_t batch_size,
                          int (*visit)(void *task_ctx, size_t first, int count));

/* The config with test_datasets in the place of datasets and no val_set_size (a shallow copy:
 * it borrows every pointer), for loading evaluation data through the training data's loaders.
 * Cannot fail. */
TrainConfig train_task_test_config(const TrainConfig *cfg);

#endif
