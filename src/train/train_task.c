#include "train/train_task.h"

#include "common/error.h"
#include "dist/dist.h"
#include "train/data_order.h"

#include <math.h>
#include <stdlib.h>

/* A task seen as the training loop's StepSource.
 *
 * Invariants:
 *  1. Optimizer step s (0-based: tr->step before it) is window s % windows_per_epoch of epoch
 *     s / windows_per_epoch, so a resumed run continues at the window after its checkpoint's.
 *  2. order holds epoch order_epoch's order (-1: none yet). */
typedef struct {
    const TrainConfig *cfg;
    const TrainTask *task;
    size_t mbs;                           /* items per micro-batch */
    size_t micro_per_epoch, window_micro; /* micro-batches per epoch, per (global) window */
    int64_t windows_per_epoch;
    size_t *order;
    int64_t order_epoch;
    MicroBatch *window; /* this rank's micro-batches of the step being run */
} TaskSteps;

static int task_step(void *ctx, Trainer *tr, StepStats *st, double *tokens) {
    TaskSteps *s = ctx;
    const TrainTask *task = s->task;
    size_t n = task->n_examples, mbs = s->mbs;
    size_t world = (size_t)dist_size(), rank = (size_t)dist_rank();
    int64_t epoch = tr->step / s->windows_per_epoch;
    if (epoch != s->order_epoch) {
        if (task->sequential)
            for (size_t i = 0; i < n; i++)
                s->order[i] = i;
        else
            data_order_shuffle(s->order, n, s->cfg->seed, epoch);
        s->order_epoch = epoch;
    }
    size_t micro = (size_t)(tr->step % s->windows_per_epoch) * s->window_micro;
    size_t n_window =
        s->micro_per_epoch - micro < s->window_micro ? s->micro_per_epoch - micro : s->window_micro;
    /* this rank's micro-batches of the window: rank, rank + world, ... (a short last window
     * leaves the last ranks fewer, or none) */
    size_t n_micro = n_window > rank ? (n_window - rank + world - 1) / world : 0;
    double step_tokens = 0;
    for (size_t k = 0; k < n_micro; k++) {
        size_t first = (micro + k * world + rank) * mbs;
        int count = (int)(n - first < mbs ? n - first : mbs);
        size_t mb_tokens = 0;
        task->build(task->ctx, (int)k, s->order, first, count, &s->window[k], &mb_tokens);
        step_tokens += (double)mb_tokens;
    }
    if (task->begin_step) task->begin_step(task->ctx, (int)n_micro, (int)n_window);
    int rc = trainer_step(tr, s->window, (int)n_micro, &task->method, st);
    for (size_t k = 0; k < n_micro; k++)
        task->release(task->ctx, (int)k);
    dist_allreduce_sum_f64(&step_tokens, 1); /* tokens/s of the whole job */
    *tokens += step_tokens;
    return rc;
}

static void task_flush(void *ctx, json_t *entry) {
    TaskSteps *s = ctx;
    if (s->task->flush_metrics) s->task->flush_metrics(s->task->ctx, entry, "");
}

/* Evaluation on a held-out task: its examples in order, batch_size at a time, through its own
 * method without gradient. Over several ranks, batch b is rank b % world's and the sums are
 * taken over ranks. */
static int evaluate_held_out(const TrainTask *train, const TrainTask *h, Model *m,
                             int64_t batch_size, json_t *entry) {
    size_t *order = xmalloc(h->n_examples * sizeof *order);
    for (size_t i = 0; i < h->n_examples; i++)
        order[i] = i;
    double loss_sum = 0;
    int rc = 0;
    size_t stride = (size_t)batch_size * (size_t)dist_size();
    for (size_t first = (size_t)batch_size * (size_t)dist_rank(); first < h->n_examples && rc == 0;
         first += stride) {
        int count = (int)(h->n_examples - first < (size_t)batch_size ? h->n_examples - first
                                                                     : (size_t)batch_size);
        MicroBatch mb;
        size_t tokens;
        h->build(h->ctx, 0, order, first, count, &mb, &tokens);
        if (h->begin_step) h->begin_step(h->ctx, 1, 1);
        size_t cells = (size_t)mb.batch.batch * mb.batch.t_len;
        float *logp = xmalloc(cells * sizeof *logp), *dlogp = xmalloc(cells * sizeof *dlogp);
        LogitStats *stats = xmalloc(cells * sizeof *stats);
        double loss = 0;
        rc = trainer_eval_logprobs(m, &mb, logp, stats);
        if (rc == 0)
            rc = h->method.micro_loss(h->method.ctx, 0, &mb, logp,
                                      h->method.wants_stats ? stats : NULL, dlogp, &loss);
        loss_sum += loss * count;
        free(logp), free(dlogp), free(stats);
        h->release(h->ctx, 0);
    }
    free(order);
    if (dist_agree(rc) != 0) return -1;
    dist_allreduce_sum_f64(&loss_sum, 1);
    if (rc == 0) {
        json_object_set_new(entry, "eval_loss", json_real(loss_sum / (double)h->n_examples));
        if (h->flush_metrics) h->flush_metrics(h->ctx, entry, "eval_");
    }
    if (rc == 0 && train->trained_tokens) {
        double tokens = train->trained_tokens(train->ctx);
        dist_allreduce_sum_f64(&tokens, 1);
        json_object_set_new(entry, "eval_num_tokens", json_real(tokens));
    }
    return rc;
}

static int task_evaluate(void *ctx, Model *m, json_t *entry) {
    TaskSteps *s = ctx;
    const TrainTask *task = s->task;
    return task->held_out
               ? evaluate_held_out(task, task->held_out, m, s->cfg->micro_batch_size, entry)
               : task->evaluate(task->ctx, m, entry);
}

/* The opening lines: the plan, and how the work is split over several processes. */
static int task_start(void *ctx, Trainer *tr, const json_t *log_history, const char *resumed_from,
                      FILE *log) {
    const TaskSteps *s = ctx;
    const TrainConfig *cfg = s->cfg;
    size_t world = (size_t)dist_size();
    fprintf(log,
            "training %zu %s: %lld steps (%lld per epoch), micro-batch %zu x %lld "
            "accumulation, warm-up %lld, lr %g %s\n",
            s->task->n_examples, s->task->item_name ? s->task->item_name : "examples",
            (long long)tr->opt.total_steps, (long long)s->windows_per_epoch, s->mbs,
            (long long)cfg->gradient_accumulation_steps, (long long)tr->opt.warmup_steps,
            cfg->learning_rate, cfg->lr_scheduler);
    train_loop_log_optimizer(log, tr);
    if (world > 1)
        fprintf(log, "%zu processes: global batch %zu x %lld x %zu = %zu %s per step; %s\n", world,
                s->mbs, (long long)cfg->gradient_accumulation_steps, world,
                s->mbs * s->window_micro, s->task->item_name ? s->task->item_name : "examples",
                tr->sharded ? "AdamW moments sharded over the ranks (zero_stage 1)"
                            : "each rank keeps the whole optimizer state");
    else if (cfg->zero_stage == 1)
        fprintf(log, "note: zero_stage 1 shards the optimizer state over several processes; "
                     "one process keeps it whole\n");
    return 0;
}

int train_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const TrainTask *task,
                   TrainOutcome *out, FILE *log) {
    size_t n = task->n_examples, gas = (size_t)cfg->gradient_accumulation_steps;
    size_t mbs =
        (size_t)(task->micro_batch_items > 0 ? task->micro_batch_items : cfg->micro_batch_size);
    TaskSteps s = {.cfg = cfg,
                   .task = task,
                   .mbs = mbs,
                   .micro_per_epoch = (n + mbs - 1) / mbs,
                   .window_micro = gas * (size_t)dist_size(),
                   .order = xmalloc((n ? n : 1) * sizeof *s.order),
                   .order_epoch = -1,
                   .window = xmalloc(gas * sizeof *s.window)};
    s.windows_per_epoch = (int64_t)((s.micro_per_epoch + s.window_micro - 1) / s.window_micro);
    int64_t total = cfg->max_steps > 0
                        ? cfg->max_steps
                        : (int64_t)ceil(cfg->num_epochs * (double)s.windows_per_epoch);
    size_t n_eval = task->held_out ? task->held_out->n_examples : task->n_eval;
    StepSource src = {.ctx = &s,
                      .total_steps = total,
                      .steps_per_epoch = s.windows_per_epoch,
                      .start = task_start,
                      .step = task_step,
                      .flush_metrics = task_flush,
                      .evaluate = task->evaluate || task->held_out ? task_evaluate : NULL,
                      .n_eval = n_eval,
                      .eval_key = "eval_loss",
                      .eval_items = "examples"};
    int rc = train_loop_run(cfg, m, lora, &src, out, log);
    free(s.order);
    free(s.window);
    return rc;
}

int train_task_each_batch(const TrainTask *task, int64_t batch_size,
                          int (*visit)(void *task_ctx, size_t first, int count)) {
    size_t n = task->n_examples, bs = (size_t)batch_size;
    size_t *order = xmalloc((n ? n : 1) * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    int rc = 0;
    for (size_t first = 0; first < n && rc == 0; first += bs) {
        int count = (int)(n - first < bs ? n - first : bs);
        MicroBatch mb;
        size_t tokens;
        task->build(task->ctx, 0, order, first, count, &mb, &tokens);
        rc = visit(task->ctx, first, count);
        task->release(task->ctx, 0);
    }
    free(order);
    return rc;
}

TrainConfig train_task_test_config(const TrainConfig *cfg) {
    TrainConfig eval = *cfg;
    eval.datasets = cfg->test_datasets;
    eval.n_datasets = cfg->n_test_datasets;
    eval.val_set_size = 0;
    return eval;
}
