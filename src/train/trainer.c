#include "train/trainer.h"

#include "common/error.h"
#include "common/rng.h"
#include "common/test_hooks.h"
#include "dist/dist_device.h"
#include "methods/sft.h"
#include "model/backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ZeRO-1: the moments of this rank's slice only, its spans being the trained spans cut to it. */
static int init_sharded_adamw(Trainer *t) {
    if (dist_shards_init(&t->shards, t->n_params) != 0) return -1;
    size_t lo = t->shards.offset[t->rank], hi = t->shards.offset[t->rank + 1];
    ParamSpan *own = xmalloc((size_t)(t->n_spans ? t->n_spans : 1) * sizeof *own);
    int n_own = 0;
    for (int p = 0; p < t->n_spans; p++) {
        size_t a = t->spans[p].offset, b = a + t->spans[p].numel;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a < b) {
            own[n_own] = t->spans[p];
            own[n_own].offset = a;
            own[n_own++].numel = b - a;
        }
    }
    int rc = adamw_init_slice(&t->adamw, &t->opt.adamw, own, n_own, lo, hi - lo);
    free(own);
    return rc;
}

int trainer_init(Trainer *t, Model *m, LoraAdapter *lora, const TrainerOptions *opt) {
    memset(t, 0, sizeof *t);
    t->model = m;
    t->lora = lora;
    t->opt = *opt;
    if (lora) {
        m->lora = lora;
        t->params = lora->params;
        t->n_params = lora->n_params;
        t->n_spans = lora->n_info;
    } else {
        t->params = m->params;
        t->n_params = m->n_params;
        t->n_spans = m->n_param_tensors;
    }
    t->spans = xcalloc((size_t)t->n_spans, sizeof *t->spans);
    t->param_names = xcalloc((size_t)t->n_spans, sizeof *t->param_names);
    for (int p = 0; p < t->n_spans; p++) {
        const char *name = lora ? lora->info[p].name : m->param_info[p].name;
        size_t offset = lora ? lora->info[p].offset : m->param_info[p].offset;
        size_t numel = lora ? lora->info[p].numel : m->param_info[p].numel;
        t->spans[p] =
            (ParamSpan){offset, numel, param_gets_weight_decay(name), param_is_embedding(name)};
        t->param_names[p] = name;
    }
    t->rank = dist_rank();
    t->world = dist_size();
    t->sharded = opt->zero1 && t->world > 1;
    t->grads = calloc(t->n_params, sizeof *t->grads);
    if (!t->grads) {
        trainer_free(t);
        return err_set("out of memory for the gradients (%zu parameters)", t->n_params);
    }
    int rc = t->sharded ? init_sharded_adamw(t)
                        : adamw_init(&t->adamw, &opt->adamw, t->spans, t->n_spans);
    if (rc != 0) {
        trainer_free(t);
        return err_prefix("the optimizer state (%zu parameters)", t->n_params);
    }
    return 0;
}

void trainer_release_activations(Trainer *t) {
    forward_tape_free(&t->tape);
}

void trainer_free(Trainer *t) {
    forward_tape_free(&t->tape);
    adamw_free(&t->adamw);
    dist_shards_free(&t->shards);
    free(t->spans);
    free((void *)t->param_names);
    free(t->grads);
    memset(t, 0, sizeof *t);
}

/* The dropout masks of micro-batch i of step `step` (the SplitMix64 finaliser of the three). */
static uint64_t dropout_key(uint64_t seed, int64_t step, int i) {
    return rng_mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xBF58476D1CE4E5B9ull +
                     (uint64_t)i * 0x94D049BB133111EBull);
}

/* Over several ranks, after each has run its micro-batches: whether any failed (an agreement
 * point, so that none waits on a rank that stopped), then the window's loss and label tokens,
 * and the gradients, summed over ranks (with zero1 each rank gets the sum of its slice only). */
static int reduce_over_ranks(Trainer *t, int rc, StepStats *stats) {
    if (dist_agree(rc) != 0) return rc != 0 ? -1 : err_prefix("step %lld", (long long)t->step + 1);
    double sums[2] = {stats->loss, (double)stats->tokens};
    dist_allreduce_sum_f64(sums, 2);
    stats->loss = sums[0];
    stats->tokens = (size_t)sums[1];
    /* the gradients live in the model's backend memory (a device's, through NCCL there) */
    const Backend *be = model_backend(t->model);
    if (t->sharded)
        dist_reduce_scatter_sum_f32_on(be, t->grads, &t->shards);
    else
        dist_allreduce_sum_f32_on(be, t->grads, t->n_params);
    return 0;
}

int trainer_step(Trainer *t, const MicroBatch *mbs, int n, const TrainMethod *method,
                 StepStats *stats) {
    Model *m = t->model;
    memset(stats, 0, sizeof *stats);
    for (int i = 0; i < n; i++)
        stats->tokens += sft_count_labels(mbs[i].label_mask, (size_t)mbs[i].batch.batch,
                                          (size_t)mbs[i].batch.t_len);
    /* a failure goes on to the agreement over ranks below rather than returning at once */
    int rc = method->begin_window ? method->begin_window(method->ctx, mbs, n) : 0;
    const Backend *be = model_backend(m);
    be->memset(be, t->grads, 0, t->n_params * sizeof *t->grads);
    if (t->lora) t->lora->training = !t->opt.disable_dropout;
    for (int i = 0; i < n && rc == 0; i++) {
        /* the micro-batch's number in the global window: the same masks on any rank count */
        int global = i * t->world + t->rank;
        if (t->lora) t->lora->dropout_key = dropout_key(t->opt.seed, t->step, global);
        size_t cells = (size_t)mbs[i].batch.batch * mbs[i].batch.t_len;
        float *logp = xmalloc(cells * sizeof *logp), *dlogp = xmalloc(cells * sizeof *dlogp);
        ForwardTape *tape = &t->tape;
        rc = model_forward_tape(m, &mbs[i].batch, t->opt.gradient_checkpointing, tape);
        if (rc == 0) {
            double loss = 0;
            LogitStats *logit_stats =
                method->wants_stats ? xmalloc(cells * sizeof *logit_stats) : NULL;
            rc = model_tape_logprobs_stats(m, tape, mbs[i].label_mask, logp, logit_stats);
            if (rc == 0)
                rc = method->micro_loss(method->ctx, i, &mbs[i], logp, logit_stats, dlogp, &loss);
            free(logit_stats);
            stats->loss += loss;
            if (rc == 0)
                rc = model_backward(m, tape, mbs[i].label_mask, dlogp, t->lora ? NULL : t->grads,
                                    t->lora ? t->grads : NULL);
        }
        free(logp);
        free(dlogp);
        if (rc != 0) rc = err_prefix("micro-batch %d", i);
    }
    if (t->lora) t->lora->training = false;
    if (t->world > 1 && reduce_over_ranks(t, rc, stats) != 0) return -1;
    if (rc != 0) return -1;
    if (test_hook_nan_grad(t->step + 1)) {
        const float nan = NAN;
        be->copy(be, t->grads, &nan, sizeof nan, BACKEND_HOST_TO_DEVICE);
    }
    if (t->sharded) {
        /* each rank holds the summed gradient of its slice only: the norm is summed in squares */
        double ss = grad_sum_squares(be, t->grads, t->adamw.spans, t->adamw.n_spans);
        dist_allreduce_sum_f64(&ss, 1);
        stats->grad_norm = sqrt(ss);
    } else {
        stats->grad_norm = grad_global_norm(be, t->grads, t->spans, t->n_spans);
    }
    stats->lr = t->opt.learning_rate * lr_schedule_factor(t->opt.schedule, t->step,
                                                          t->opt.warmup_steps, t->opt.total_steps);
    if (!isfinite(stats->loss) || !isfinite(stats->grad_norm)) {
        /* Nothing of a non-finite step reaches the parameters or the moments. The step still
         * counts, AdamW's counter included: global_step alone fixes the schedule, the data
         * position, the dropout masks and (on resume) AdamW's counter, so a resumed run replays
         * the skip exactly. */
        t->adamw.step++;
        t->step++;
        return TRAINER_STEP_SKIPPED;
    }
    /* the clip rides on AdamW's read of each gradient (adamw_step_scaled: the bits a separate
     * scaling pass gave, one pass over the gradients fewer); t->grads stay unclipped */
    float clip =
        t->opt.max_grad_norm > 0 ? grad_clip_coef(t->opt.max_grad_norm, stats->grad_norm) : 1.0f;
    adamw_step_scaled(&t->adamw, be, t->params, t->grads, stats->lr, clip);
    if (t->sharded) dist_allgather_f32_on(be, t->params, &t->shards);
    t->step++;
    return 0;
}

void trainer_gather_moments(const Trainer *t, float **m, float **v, bool *owned) {
    *m = *v = NULL;
    *owned = t->sharded;
    if (!t->sharded) return;
    if (t->rank == 0) {
        *m = xmalloc(t->n_params * sizeof **m);
        *v = xmalloc(t->n_params * sizeof **v);
    }
    dist_gather_f32(t->adamw.m, *m, &t->shards);
    dist_gather_f32(t->adamw.v, *v, &t->shards);
}

void trainer_moment_buffers(Trainer *t, float **m, float **v, bool *owned) {
    *m = *v = NULL;
    *owned = t->sharded && t->rank == 0;
    if (!*owned) return;
    *m = xcalloc(t->n_params, sizeof **m);
    *v = xcalloc(t->n_params, sizeof **v);
}

int trainer_span_moments(const Trainer *t, float *m, float *v, int p, MomentTensor out[4]) {
    if (!t->sharded) return adamw_span_moments(&t->adamw, p, out);
    size_t offset = t->spans[p].offset, numel = t->spans[p].numel;
    out[0] = (MomentTensor){"exp_avg", false, m + offset, numel};
    out[1] = (MomentTensor){"exp_avg_sq", false, v + offset, numel};
    return 2;
}

void trainer_distribute(Trainer *t, const float *m, const float *v) {
    if (t->world == 1) return;
    dist_bcast(t->params, t->n_params * sizeof *t->params, 0);
    if (t->sharded) {
        dist_scatter_f32(m, t->adamw.m, &t->shards);
        dist_scatter_f32(v, t->adamw.v, &t->shards);
    } else {
        for (int p = 0; p < t->n_spans; p++) {
            MomentTensor mt[4];
            int n = adamw_span_moments(&t->adamw, p, mt);
            for (int k = 0; k < n; k++)
                dist_bcast(mt[k].data, moment_tensor_bytes(&mt[k]), 0);
        }
    }
    int64_t steps[2] = {t->step, t->adamw.step};
    dist_bcast(steps, sizeof steps, 0);
    t->step = steps[0], t->adamw.step = steps[1];
}

/* SFT as a TrainMethod: the window's label-token count is the loss's denominator. */
static int sft_begin_window(void *ctx, const MicroBatch *mbs, int n) {
    size_t *window_tokens = ctx;
    double count = 0;
    for (int i = 0; i < n; i++)
        count += (double)sft_count_labels(mbs[i].label_mask, (size_t)mbs[i].batch.batch,
                                          (size_t)mbs[i].batch.t_len);
    /* HF's num_items_in_batch over several processes: the label tokens of every rank's share */
    dist_allreduce_sum_f64(&count, 1);
    *window_tokens = (size_t)count;
    return 0;
}

static int sft_micro_loss(void *ctx, int index, const MicroBatch *mb, const float *logp,
                          const LogitStats *stats, float *dlogp, double *loss) {
    (void)index, (void)stats;
    const size_t *window_tokens = ctx;
    *loss = sft_loss(logp, mb->label_mask, (size_t)mb->batch.batch, (size_t)mb->batch.t_len,
                     *window_tokens, dlogp);
    return 0;
}

TrainMethod trainer_sft_method(size_t *window_tokens) {
    return (TrainMethod){
        .ctx = window_tokens, .begin_window = sft_begin_window, .micro_loss = sft_micro_loss};
}

void logp_row_sums(const float *logp, const uint8_t *mark, int rows, int t_len, double *sum,
                   int *count) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        int c = 0;
        for (int t = 0; t < t_len; t++)
            if (mark[(size_t)r * t_len + t]) s += logp[(size_t)r * t_len + t], c++;
        sum[r] = s;
        if (count) count[r] = c;
    }
}

int trainer_eval_logprobs(const Model *m, const MicroBatch *mb, float *logp, LogitStats *stats) {
    ForwardTape tape = {0};
    if (model_forward_tape(m, &mb->batch, true, &tape) != 0) return -1;
    int rc = model_tape_logprobs_stats(m, &tape, mb->label_mask, logp, stats);
    forward_tape_free(&tape);
    return rc;
}

int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats) {
    size_t window_tokens = 0;
    TrainMethod sft = trainer_sft_method(&window_tokens);
    return trainer_step(t, mbs, n, &sft, stats);
}
