#include "train/train_run.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/dataset_cache.h"
#include "data/pref_dataset.h"
#include "data/sft_dataset.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "train/bad_steps.h"
#include "train/checkpoint.h"
#include "train/grpo_run.h"
#include "train/kto_method.h"
#include "train/pref_method.h"
#include "train/run_support.h"
#include "train/stop_signal.h"
#include "io/model_dir.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int32_t *tokens;
    uint8_t *attn, *labels;
} BatchBuffers;

/* Right-pads examples order[first .. first+count) into one micro-batch. */
static MicroBatch build_micro_batch(const SftDataset *ds, const size_t *order, size_t first,
                                    int count, int32_t pad_id, BatchBuffers *buf) {
    int t_len = 0;
    for (int i = 0; i < count; i++)
        if (ds->items[order[first + i]].len > t_len) t_len = ds->items[order[first + i]].len;
    size_t cells = (size_t)count * t_len;
    buf->tokens = xmalloc(cells * sizeof *buf->tokens);
    buf->attn = xcalloc(cells, 1);
    buf->labels = xcalloc(cells, 1);
    for (size_t i = 0; i < cells; i++)
        buf->tokens[i] = pad_id;
    for (int i = 0; i < count; i++) {
        const SftExample *e = &ds->items[order[first + i]];
        memcpy(buf->tokens + (size_t)i * t_len, e->ids, (size_t)e->len * sizeof *e->ids);
        memset(buf->attn + (size_t)i * t_len, 1, (size_t)e->len);
        memcpy(buf->labels + (size_t)i * t_len, e->labels, (size_t)e->len);
    }
    return (MicroBatch){
        {.batch = count, .t_len = t_len, .tokens = buf->tokens, .attn_mask = buf->attn},
        buf->labels};
}

/* What run() trains on: a dataset seen through micro-batches, and the method that turns them
 * into a loss. run() owns the loop (epochs, windows, schedule, logging, evaluation,
 * checkpoints); the task owns the examples. */
typedef struct TrainTask {
    size_t n_examples;
    void *ctx;
    /* Builds micro-batch `slot` of a window from examples order[first .. first+count);
     * *tokens gets their token count (for tokens/s). */
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
    /* Evaluation, either of the two (or neither):
     *  - evaluate: a task's own evaluation on held-out examples (n_eval of them), adding eval_*
     *    keys to entry;
     *  - held_out: held-out examples through the same kind of build and method, evaluated by
     *    evaluate_held_out. */
    int (*evaluate)(void *ctx, Model *m, json_t *entry);
    size_t n_eval;
    const struct TrainTask *held_out;
} TrainTask;

/* Evaluation on a held-out task: its examples in order, batch_size at a time, through its own
 * method without gradient. Adds eval_loss (the mean over examples of the batch losses, as HF's
 * evaluation loop weighs them) and the method's metrics, each with the eval_ prefix. Over
 * several ranks, batch b is rank b % world's and the sums are taken over ranks. */
static int evaluate_held_out(const TrainTask *h, Model *m, int64_t batch_size, json_t *entry) {
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
    return rc;
}

/* The config with test_datasets in the place of datasets (a shallow copy: it borrows every
 * pointer), for loading the evaluation data through the training data's loaders. */
static TrainConfig test_datasets_config(const TrainConfig *cfg) {
    TrainConfig eval = *cfg;
    eval.datasets = cfg->test_datasets;
    eval.n_datasets = cfg->n_test_datasets;
    eval.val_set_size = 0;
    return eval;
}

/* Moves the items order[0 .. n_val) of an array of *n items of `size` bytes into a new array
 * (*held_out), keeping the rest, in draw order, in *items. */
static void move_held_out(void **items, size_t *n, size_t size, const size_t *order, size_t n_val,
                          void **held_out) {
    char *src = *items, *kept = xmalloc((*n - n_val) * size), *out = xmalloc(n_val * size);
    for (size_t i = 0; i < *n; i++)
        memcpy(i < n_val ? out + i * size : kept + (i - n_val) * size, src + order[i] * size, size);
    free(*items);
    *items = kept;
    *held_out = out;
    *n -= n_val;
}

/* val_set_size for SFT: the drawn examples move from `all` to `val`. */
static int split_validation(SftDataset *all, const TrainConfig *cfg, SftDataset *val) {
    memset(val, 0, sizeof *val);
    size_t *order, n_val;
    if (validation_draw(all->n, cfg, &order, &n_val) != 0) return -1;
    if (n_val == 0) return 0;
    move_held_out((void **)&all->items, &all->n, sizeof *all->items, order, n_val,
                  (void **)&val->items);
    val->n = n_val;
    free(order);
    return 0;
}

/* Mean negative log-likelihood over every label token of the validation set (over several
 * ranks, batch b is rank b % world's, and the sums are taken over ranks). */
static int evaluate(Model *m, const SftDataset *val, int64_t batch_size, int32_t pad_id,
                    double *loss) {
    size_t *order = xmalloc(val->n * sizeof *order);
    for (size_t i = 0; i < val->n; i++)
        order[i] = i;
    double sum = 0;
    size_t count = 0;
    int rc = 0;
    size_t stride = (size_t)batch_size * (size_t)dist_size();
    for (size_t first = (size_t)batch_size * (size_t)dist_rank(); first < val->n && rc == 0;
         first += stride) {
        int n = (int)(val->n - first < (size_t)batch_size ? val->n - first : (size_t)batch_size);
        BatchBuffers buf;
        MicroBatch mb = build_micro_batch(val, order, first, n, pad_id, &buf);
        size_t cells = (size_t)mb.batch.batch * mb.batch.t_len;
        float *logp = xmalloc(cells * sizeof *logp);
        rc = model_token_logprobs(m, &mb.batch, mb.label_mask, logp);
        for (size_t i = 0; rc == 0 && i < cells; i++)
            if (mb.label_mask[i]) sum += logp[i], count++;
        free(logp);
        free(buf.tokens), free(buf.attn), free(buf.labels);
    }
    free(order);
    if (dist_agree(rc) != 0) return -1;
    double sums[2] = {sum, (double)count};
    dist_allreduce_sum_f64(sums, 2);
    *loss = sums[1] > 0 ? -sums[0] / sums[1] : 0.0;
    return 0;
}

/* The training loop. Over several ranks (dist.h) every rank runs it in step: the data order is
 * the one-process order (the same seeded shuffle of the same examples on every rank), cut into
 * micro-batches of micro_batch_size as in one process, and a window (one optimizer step) is
 * gradient_accumulation_steps x world of them, rank r running micro-batches r, r + world, ...
 * of each window. So micro_batch_size is per rank, as HF's per_device_train_batch_size, the
 * global batch is micro_batch_size x gradient_accumulation_steps x world, and a run on N ranks
 * takes the steps a one-process run with N times the accumulation takes. Rank 0 alone writes
 * metrics.jsonl, checkpoints and the log. */
static int run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const TrainTask *task,
               TrainOutcome *out, FILE *log) {
    size_t n_examples = task->n_examples;
    size_t micro_per_epoch =
        (n_examples + (size_t)cfg->micro_batch_size - 1) / (size_t)cfg->micro_batch_size;
    size_t gas = (size_t)cfg->gradient_accumulation_steps;
    size_t world = (size_t)dist_size(), rank = (size_t)dist_rank();
    size_t window_micro = gas * world; /* micro-batches in a (global) window */
    int64_t windows_per_epoch = (int64_t)((micro_per_epoch + window_micro - 1) / window_micro);
    int64_t total = cfg->max_steps > 0 ? cfg->max_steps
                                       : (int64_t)ceil(cfg->num_epochs * (double)windows_per_epoch);
    TrainerOptions opt = {.learning_rate = cfg->learning_rate,
                          .max_grad_norm = cfg->max_grad_norm,
                          .adamw = {cfg->adam_beta1, cfg->adam_beta2, cfg->adam_epsilon,
                                    cfg->weight_decay, optimizer_is_8bit(cfg->optimizer)},
                          .total_steps = total,
                          .gradient_checkpointing = cfg->gradient_checkpointing,
                          .disable_dropout = cfg->rl != RL_NONE, /* TRL's disable_dropout=True */
                          .seed = (uint64_t)cfg->seed,
                          .zero1 = cfg->zero_stage == 1};
    lr_schedule_parse(cfg->lr_scheduler, &opt.schedule);
    opt.warmup_steps = cfg->warmup_steps >= 0 ? cfg->warmup_steps
                       : cfg->warmup_ratio >= 0
                           ? lr_warmup_steps_from_ratio(cfg->warmup_ratio, total)
                           : default_warmup(total);
    Trainer tr;
    if (trainer_init(&tr, m, lora, &opt) != 0) return -1;
    json_t *log_history = json_array();
    /* the first agreement point: every rank got through its set-up (model, data, reference) */
    int setup = dist_is_root() ? make_dirs(cfg->output_dir) : 0;
    if (dist_agree(setup) != 0 ||
        (cfg->resume_from_checkpoint && resume(cfg, &tr, &log_history, log, NULL, 0) != 0)) {
        json_decref(log_history);
        trainer_free(&tr);
        return -1;
    }
    CheckpointTarget target = {.output_dir = cfg->output_dir,
                               .model_dir = cfg->base_model,
                               .tokenizer_dir = cfg->tokenizer_config,
                               .save_total_limit = cfg->save_total_limit};
    int64_t window_index = 0; /* windows seen, counting the ones a resume skips */
    MetricsFile metrics = {0};
    if (dist_agree(dist_is_root() ? metrics_file_open(&metrics, cfg->output_dir, tr.step > 0)
                                  : 0) != 0) {
        metrics_file_close(&metrics);
        json_decref(log_history);
        trainer_free(&tr);
        return -1;
    }
    fprintf(log,
            "training %zu examples: %lld steps (%lld per epoch), micro-batch %lld x %zu "
            "accumulation, warm-up %lld, lr %g %s\n",
            n_examples, (long long)total, (long long)windows_per_epoch,
            (long long)cfg->micro_batch_size, gas, (long long)opt.warmup_steps, cfg->learning_rate,
            cfg->lr_scheduler);
    log_optimizer_state(log, &tr);
    if (world > 1)
        fprintf(log, "%zu processes: global batch %lld x %zu x %zu = %lld examples per step; %s\n",
                world, (long long)cfg->micro_batch_size, gas, world,
                (long long)(cfg->micro_batch_size * (int64_t)window_micro),
                tr.sharded ? "AdamW moments sharded over the ranks (zero_stage 1)"
                           : "each rank keeps the whole optimizer state");
    else if (cfg->zero_stage == 1)
        fprintf(log, "note: zero_stage 1 shards the optimizer state over several processes; "
                     "one process keeps it whole\n");

    size_t *order = xmalloc(n_examples * sizeof *order);
    MicroBatch *window = xmalloc(gas * sizeof *window);
    double start = now_seconds(), tokens = 0, loss_sum = 0;
    char note[96] = ""; /* metric_note of the last log line */
    int64_t loss_count = 0, first_step = tr.step;
    double run_loss_sum = 0; /* over the whole run, for an embedding program's training_loss */
    int64_t run_loss_steps = 0;
    bool tty = isatty(fileno(log));
    BadSteps bad = bad_steps_init(cfg->max_consecutive_bad_steps, log_history);
    int rc = 0;
    for (int64_t epoch = 0; tr.step < total && rc == 0; epoch++) {
        if (cfg->rl == RL_KTO) /* TRL's sequential sampler: see run_kto */
            for (size_t i = 0; i < n_examples; i++)
                order[i] = i;
        else
            shuffle(order, n_examples, cfg->seed, epoch);
        for (size_t micro = 0; micro < micro_per_epoch && tr.step < total && rc == 0;
             micro += window_micro) {
            size_t n_window =
                micro_per_epoch - micro < window_micro ? micro_per_epoch - micro : window_micro;
            if (window_index++ < tr.step) continue; /* done before the checkpoint we resumed */
            /* this rank's micro-batches of the window: rank, rank + world, ... (a short last
             * window leaves the last ranks fewer, or none) */
            size_t n_micro = n_window > rank ? (n_window - rank + world - 1) / world : 0;
            double step_tokens = 0;
            for (size_t k = 0; k < n_micro; k++) {
                size_t first = (micro + k * world + rank) * (size_t)cfg->micro_batch_size;
                int count = (int)(n_examples - first < (size_t)cfg->micro_batch_size
                                      ? n_examples - first
                                      : (size_t)cfg->micro_batch_size);
                size_t mb_tokens = 0;
                task->build(task->ctx, (int)k, order, first, count, &window[k], &mb_tokens);
                step_tokens += (double)mb_tokens;
            }
            if (task->begin_step) task->begin_step(task->ctx, (int)n_micro, (int)n_window);
            StepStats st;
            rc = trainer_step(&tr, window, (int)n_micro, &task->method, &st);
            for (size_t k = 0; k < n_micro; k++)
                task->release(task->ctx, (int)k);
            dist_allreduce_sum_f64(&step_tokens, 1); /* tokens/s of the whole job */
            tokens += step_tokens;
            if (rc < 0) break; /* over several ranks, trainer_step agreed on it */
            if (bad_steps_record(&bad, rc, tr.step, &st, log) != 0) {
                rc = dist_agree(-1); /* every rank stops here: the skips are the same on all */
                break;
            }
            if (rc == 0) { /* a skipped step has no loss */
                loss_sum += st.loss, loss_count++;
                run_loss_sum += st.loss, run_loss_steps++;
            }
            rc = 0;
            if (tr.step % cfg->logging_steps == 0 || tr.step == total) {
                double ep = (double)tr.step / (double)windows_per_epoch;
                double mean_loss = loss_count ? loss_sum / (double)loss_count : NAN;
                json_t *entry = json_object();
                json_object_set_new(entry, "loss", json_real_or_null(mean_loss));
                json_object_set_new(entry, "grad_norm", json_real_or_null(st.grad_norm));
                json_object_set_new(entry, "learning_rate", json_real(st.lr));
                if (task->flush_metrics) task->flush_metrics(task->ctx, entry, "");
                bad_steps_log(&bad, entry);
                json_object_set_new(entry, "epoch", json_real(ep));
                json_object_set_new(entry, "step", json_integer(tr.step));
                log_entry(&metrics, log_history, entry);
                metric_note(entry, note, sizeof note);
                json_decref(entry);
                double el = now_seconds() - start;
                if (!tty)
                    fprintf(
                        log,
                        "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  epoch %.2f%s  %.0f "
                        "tok/s\n",
                        (long long)tr.step, (long long)total, mean_loss, st.grad_norm, st.lr, ep,
                        note, tokens / (el > 0 ? el : 1));
                loss_sum = 0, loss_count = 0;
            }
            if (tty) {
                double el = now_seconds() - start;
                show_progress(log, tr.step, total, first_step, st.loss, st.lr, note,
                              tokens / (el > 0 ? el : 1), el);
            }
            size_t n_eval = task->held_out ? task->held_out->n_examples : task->n_eval;
            bool eval_now =
                (task->evaluate || task->held_out) && n_eval &&
                (cfg->eval_steps > 0 ? tr.step % cfg->eval_steps == 0 : tr.step == total);
            if (eval_now) {
                json_t *entry = json_object();
                rc = task->held_out
                         ? evaluate_held_out(task->held_out, m, cfg->micro_batch_size, entry)
                         : task->evaluate(task->ctx, m, entry);
                if (rc != 0) {
                    json_decref(entry);
                    break;
                }
                double ep = (double)tr.step / (double)windows_per_epoch;
                json_object_set_new(entry, "epoch", json_real(ep));
                json_object_set_new(entry, "step", json_integer(tr.step));
                log_entry(&metrics, log_history, entry);
                fprintf(log, "%sstep %lld/%lld  eval_loss %.4f (%zu held-out examples)\n",
                        tty ? "\n" : "", (long long)tr.step, (long long)total,
                        json_number_value(json_object_get(entry, "eval_loss")), n_eval);
                json_decref(entry);
            }
            /* a signal: this step is done; save it (whatever save_steps says) and stop. Over
             * several ranks, one rank's signal stops them all at the same step. */
            int sig = stop_signal_agree();
            if (sig || (cfg->save_steps > 0 && tr.step % cfg->save_steps == 0)) {
                json_t *state = trainer_state(
                    cfg, tr.step, (double)tr.step / (double)windows_per_epoch, total, log_history);
                rc = checkpoint_save(&target, &tr, state);
                json_decref(state);
                if (rc == 0 && (!tty || sig))
                    fprintf(log, "%ssaved checkpoint-%lld\n", tty ? "\n" : "", (long long)tr.step);
            }
            if (rc == 0 && sig) rc = dist_agree(stop_signal_error(sig, tr.step)); /* all stop */
        }
    }
    if (out) {
        *out = (TrainOutcome){.log_history = log_history,
                              .global_step = tr.step,
                              .max_steps = total,
                              .epoch = (double)tr.step / (double)windows_per_epoch,
                              .loss_sum = run_loss_sum,
                              .loss_steps = run_loss_steps,
                              .first_step = first_step,
                              .seconds = now_seconds() - start};
    } else {
        json_decref(log_history);
    }
    free(order);
    free(window);
    metrics_file_close(&metrics);
    trainer_free(&tr);
    if (rc != 0) return -1;
    if (tty) fputc('\n', log);
    double elapsed = now_seconds() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(log, "done: %lld steps in %.1f s, %.0f tokens/s, peak memory %.0f MB\n",
            (long long)total, elapsed, tokens / (elapsed > 0 ? elapsed : 1), ru.ru_maxrss / 1024.0);
    return 0;
}

/* ---- supervised fine-tuning ---- */

typedef struct {
    const SftDataset *ds, *val;
    int32_t pad_id;
    int64_t batch_size;
    BatchBuffers *bufs; /* one per micro-batch of a window */
    size_t window_tokens;
} SftTask;

static void sft_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                      MicroBatch *mb, size_t *tokens) {
    SftTask *t = ctx;
    *mb = build_micro_batch(t->ds, order, first, count, t->pad_id, &t->bufs[slot]);
    *tokens = 0;
    for (int e = 0; e < count; e++)
        *tokens += (size_t)t->ds->items[order[first + e]].len;
}

static void sft_release(void *ctx, int slot) {
    SftTask *t = ctx;
    free(t->bufs[slot].tokens), free(t->bufs[slot].attn), free(t->bufs[slot].labels);
}

static int sft_evaluate(void *ctx, Model *m, json_t *entry) {
    SftTask *t = ctx;
    double loss;
    if (evaluate(m, t->val, t->batch_size, t->pad_id, &loss) != 0) return -1;
    json_object_set_new(entry, "eval_loss", json_real(loss));
    return 0;
}

static int run_sft(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                   TrainOutcome *out, FILE *log) {
    int32_t eos = -1, pad = 0;
    SftDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    char cache_dir[4096];
    if (rc == 0)
        rc = sft_dataset_prepare(&ds, cfg, tok, eos, m->cfg.vocab_size, false, log, cache_dir,
                                 sizeof cache_dir);
    if (rc == 0 && ds.dropped_too_long)
        fprintf(log, "warning: %zu examples longer than sequence_len %lld were dropped\n",
                ds.dropped_too_long, (long long)cfg->sequence_len);
    if (rc == 0 && cfg->n_test_datasets) {
        TrainConfig eval = test_datasets_config(cfg);
        rc = sft_dataset_prepare(&val, &eval, tok, eos, m->cfg.vocab_size, false, log, cache_dir,
                                 sizeof cache_dir);
        if (rc != 0) err_prefix("test_datasets");
    } else if (rc == 0) {
        rc = split_validation(&ds, cfg, &val);
    }
    if (rc == 0) {
        SftTask t = {&ds,
                     &val,
                     pad,
                     cfg->micro_batch_size,
                     xmalloc((size_t)cfg->gradient_accumulation_steps * sizeof(BatchBuffers)),
                     0};
        TrainTask task = {
            ds.n, &t,           sft_build, sft_release, NULL, trainer_sft_method(&t.window_tokens),
            NULL, sft_evaluate, val.n,     NULL};
        rc = run(cfg, m, lora, &task, out, log);
        free(t.bufs);
    }
    sft_dataset_free(&val);
    sft_dataset_free(&ds);
    return rc;
}

/* ---- preference methods ---- */

typedef struct {
    const PrefDataset *ds;
    int32_t pad_id;
    int64_t max_len;
    PrefMicroBatch *window; /* one per micro-batch of a window */
    PrefMethod *pm;
} PrefTask;

static void pref_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                       MicroBatch *mb, size_t *tokens) {
    PrefTask *t = ctx;
    PrefMicroBatch *b = &t->window[slot];
    pref_batch_build(b, t->ds, order, first, count, t->max_len, t->pad_id,
                     pref_method_all_positions(t->pm));
    *mb = b->mb;
    *tokens = 0;
    for (size_t i = 0; i < (size_t)b->mb.batch.batch * b->mb.batch.t_len; i++)
        *tokens += b->attn[i];
}

static void pref_release(void *ctx, int slot) {
    PrefTask *t = ctx;
    pref_batch_free(&t->window[slot]);
}

static void pref_begin_step(void *ctx, int n_micro, int n_window) {
    PrefTask *t = ctx;
    (void)n_micro;
    t->pm->window = t->window;
    t->pm->n_window = n_window; /* each micro-batch's loss is 1/n_window of the window's */
}

static void pref_flush(void *ctx, json_t *entry, const char *prefix) {
    PrefTask *t = ctx;
    pref_method_flush_metrics(t->pm, entry, prefix);
}

/* precompute_ref_log_probs: the reference's sums for every pair, once, in dataset order. */
static int precompute_reference(const ReferencePolicy *ref, const PrefDataset *ds,
                                const TrainConfig *cfg, int32_t pad, double *chosen,
                                double *rejected, FILE *log) {
    size_t *order = xmalloc(ds->n_pairs * sizeof *order);
    for (size_t i = 0; i < ds->n_pairs; i++)
        order[i] = i;
    int rc = 0;
    size_t bs = (size_t)cfg->micro_batch_size;
    for (size_t first = 0; first < ds->n_pairs && rc == 0; first += bs) {
        int count = (int)(ds->n_pairs - first < bs ? ds->n_pairs - first : bs);
        PrefMicroBatch b;
        pref_batch_build(&b, ds, order, first, count, cfg->sequence_len, pad, false);
        rc = pref_reference_sums(ref, &b, chosen + first, rejected + first);
        pref_batch_free(&b);
    }
    free(order);
    if (rc == 0) fprintf(log, "reference log-probs precomputed for %zu pairs\n", ds->n_pairs);
    return rc;
}

/* The held-out pairs (or KTO rows): test_datasets, or val_set_size of the training ones (moved
 * out). */
static int pref_eval_split(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok,
                           PrefDataset *val, FILE *log) {
    memset(val, 0, sizeof *val);
    if (cfg->n_test_datasets) {
        TrainConfig eval = test_datasets_config(cfg);
        if (pref_dataset_load(val, &eval, tok, log) != 0) return err_prefix("test_datasets");
        return 0;
    }
    bool kto = cfg->rl == RL_KTO;
    size_t *order, n_val;
    if (validation_draw(kto ? ds->n_rows : ds->n_pairs, cfg, &order, &n_val) != 0) return -1;
    if (n_val == 0) return 0;
    if (kto) {
        move_held_out((void **)&ds->rows, &ds->n_rows, sizeof *ds->rows, order, n_val,
                      (void **)&val->rows);
        val->n_rows = n_val;
    } else {
        move_held_out((void **)&ds->pairs, &ds->n_pairs, sizeof *ds->pairs, order, n_val,
                      (void **)&val->pairs);
        val->n_pairs = n_val;
    }
    free(order);
    return 0;
}

static int run_preference(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                          TrainOutcome *out, FILE *log) {
    PrefMethod pm;
    if (pref_method_init(&pm, cfg) != 0) return -1;
    int32_t eos = -1, pad = 0;
    PrefDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = pref_dataset_load(&ds, cfg, tok, log);
    if (rc == 0) rc = pref_eval_split(&ds, cfg, tok, &val, log);
    Model frozen;
    LoraAdapter initial = {0};
    ReferencePolicy ref;
    bool needs_ref = pref_method_needs_reference(&pm), has_frozen = false;
    if (rc == 0 && needs_ref)
        rc = make_reference(cfg, m, lora, &frozen, &has_frozen, &initial, &ref, log);
    if (rc == 0 && !needs_ref) {
        fprintf(log, "reference: none (rl: %s compares the policy's own responses)\n",
                rl_method_name(cfg->rl));
        if (cfg->precompute_ref_log_probs)
            fprintf(log, "warning: precompute_ref_log_probs has no effect with rl: %s\n",
                    rl_method_name(cfg->rl));
    }
    pm.ref = needs_ref ? &ref : NULL;
    /* precompute_ref_log_probs: every pair's reference sums once, training and held-out */
    double *pre = NULL, *pre_val = NULL;
    if (rc == 0 && needs_ref && cfg->precompute_ref_log_probs) {
        pre = xmalloc(2 * ds.n_pairs * sizeof *pre);
        rc = precompute_reference(&ref, &ds, cfg, pad, pre, pre + ds.n_pairs, log);
        if (rc == 0 && val.n_pairs) {
            pre_val = xmalloc(2 * val.n_pairs * sizeof *pre_val);
            rc = precompute_reference(&ref, &val, cfg, pad, pre_val, pre_val + val.n_pairs, log);
        }
        pm.pre_ref_chosen = pre;
        pm.pre_ref_rejected = pre + ds.n_pairs;
        pm.ref = NULL;
        if (has_frozen) model_free(&frozen), has_frozen = false; /* no longer needed in memory */
    }
    if (rc == 0) {
        /* the held-out pairs go through a second instance of the method: its own metrics, and
         * the held-out pairs' precomputed reference sums */
        PrefMethod held_pm = pm;
        held_pm.metrics = (StepMetrics){0};
        held_pm.pre_ref_chosen = pre_val;
        held_pm.pre_ref_rejected = pre_val ? pre_val + val.n_pairs : NULL;
        PrefMicroBatch held_window;
        PrefTask held_t = {&val, pad, cfg->sequence_len, &held_window, &held_pm};
        TrainTask held = {val.n_pairs,
                          &held_t,
                          pref_build,
                          pref_release,
                          pref_begin_step,
                          pref_method_train_method(&held_pm),
                          pref_flush,
                          NULL,
                          0,
                          NULL};
        PrefTask t = {&ds, pad, cfg->sequence_len,
                      xcalloc((size_t)cfg->gradient_accumulation_steps, sizeof(PrefMicroBatch)),
                      &pm};
        TrainTask task = {ds.n_pairs,
                          &t,
                          pref_build,
                          pref_release,
                          pref_begin_step,
                          pref_method_train_method(&pm),
                          pref_flush,
                          NULL,
                          0,
                          val.n_pairs ? &held : NULL};
        rc = run(cfg, m, lora, &task, out, log);
        free(t.window);
    }
    free(pre);
    free(pre_val);
    if (has_frozen) model_free(&frozen);
    lora_free(&initial);
    pref_dataset_free(&val);
    pref_dataset_free(&ds);
    return rc;
}

/* ---- KTO (rl: kto) ----
 * Rows are taken in dataset order every epoch, never shuffled: TRL's KTOTrainer samples
 * sequentially (train_sampling_strategy "sequential", which the kto loss requires) because each
 * micro-batch's KL rows pair its prompts with its own completions (kto_batch.h). */

typedef struct {
    const PrefDataset *ds;
    int32_t pad_id;
    int64_t max_len;
    KtoMicroBatch *window; /* one per micro-batch of a window */
    KtoMethod *km;
} KtoTask;

static void kto_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                      MicroBatch *mb, size_t *tokens) {
    KtoTask *t = ctx;
    KtoMicroBatch *b = &t->window[slot];
    kto_batch_build(b, t->ds, order, first, count, t->max_len, t->pad_id, t->km->with_kl);
    *mb = b->mb;
    *tokens = kto_batch_tokens(b);
}

static void kto_release(void *ctx, int slot) {
    KtoTask *t = ctx;
    kto_batch_free(&t->window[slot]);
}

static void kto_begin_step(void *ctx, int n_micro, int n_window) {
    KtoTask *t = ctx;
    (void)n_micro;
    t->km->window = t->window;
    t->km->n_window = n_window; /* each micro-batch's loss is 1/n_window of the window's */
}

static void kto_flush(void *ctx, json_t *entry, const char *prefix) {
    KtoTask *t = ctx;
    kto_method_flush_metrics(t->km, entry, prefix);
}

/* TRL's advice when the kinds are unbalanced (KTO paper eq. 8): a warning, never an error. */
static void kto_weight_advice(const PrefDataset *ds, const TrainConfig *cfg, FILE *log) {
    double n_d = 0;
    for (size_t i = 0; i < ds->n_rows; i++)
        n_d += ds->rows[i].desirable;
    double n_u = fmax((double)ds->n_rows - fmax(n_d, 1), 1);
    n_d = fmax(n_d, 1);
    if (n_d == n_u) return;
    double wd = cfg->kto_desirable_weight, wu = cfg->kto_undesirable_weight;
    /* TRL rounds the bounds to 2 decimals before comparing */
    double d_lo = round(n_u * wu / n_d * 100) / 100,
           d_hi = round(n_u * wu / n_d * 1.33 * 100) / 100;
    double u_lo = round(n_d * wd / n_u / 1.33 * 100) / 100,
           u_hi = round(n_d * wd / n_u * 100) / 100;
    if ((d_lo <= wd && wd <= d_hi) || (u_lo <= wu && wu <= u_hi)) return;
    fprintf(log,
            "warning: %.0f desirable and %.0f undesirable rows, but kto_desirable_weight %g and "
            "kto_undesirable_weight %g are not in the range TRL recommends: EITHER "
            "kto_desirable_weight in [%.2f, %.2f] or kto_undesirable_weight in [%.2f, %.2f] (but "
            "NOT BOTH)\n",
            n_d, n_u, wd, wu, d_lo, d_hi, u_lo, u_hi);
}

/* precompute_ref_log_probs: the reference's sums of every row (and KL row), once, over the
 * micro-batches training will see, so that each row's KL row is the one it trains with. */
static int kto_precompute_reference(const ReferencePolicy *ref, const PrefDataset *ds,
                                    const TrainConfig *cfg, int32_t pad, bool with_kl, double *pre,
                                    double *pre_kl, FILE *log) {
    size_t *order = xmalloc(ds->n_rows * sizeof *order);
    for (size_t i = 0; i < ds->n_rows; i++)
        order[i] = i;
    int rc = 0;
    size_t bs = (size_t)cfg->micro_batch_size;
    for (size_t first = 0; first < ds->n_rows && rc == 0; first += bs) {
        int count = (int)(ds->n_rows - first < bs ? ds->n_rows - first : bs);
        KtoMicroBatch b;
        kto_batch_build(&b, ds, order, first, count, cfg->sequence_len, pad, with_kl);
        rc = kto_reference_sums(ref, &b, pre + first, with_kl ? pre_kl + first : NULL);
        kto_batch_free(&b);
    }
    free(order);
    if (rc == 0) fprintf(log, "reference log-probs precomputed for %zu rows\n", ds->n_rows);
    return rc;
}

static int run_kto(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                   TrainOutcome *out, FILE *log) {
    KtoMethod km;
    if (kto_method_init(&km, cfg) != 0) return -1;
    int32_t eos = -1, pad = 0;
    PrefDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = pref_dataset_load(&ds, cfg, tok, log);
    if (rc == 0) rc = pref_eval_split(&ds, cfg, tok, &val, log);
    if (rc == 0) kto_weight_advice(&ds, cfg, log);
    /* The reference as for DPO (trl-methods.md §8) */
    Model frozen;
    LoraAdapter initial = {0};
    ReferencePolicy ref;
    bool has_frozen = false;
    if (rc == 0) rc = make_reference(cfg, m, lora, &frozen, &has_frozen, &initial, &ref, log);
    km.policy = m; /* its KL rows run through the trained adapter, which run() attaches */
    km.ref = &ref;
    /* precompute_ref_log_probs: every row's (and KL row's) reference sums once, training and
     * held-out */
    double *pre = NULL, *pre_val = NULL;
    if (rc == 0 && cfg->precompute_ref_log_probs) {
        pre = xcalloc(2 * ds.n_rows, sizeof *pre);
        rc = kto_precompute_reference(&ref, &ds, cfg, pad, km.with_kl, pre, pre + ds.n_rows, log);
        if (rc == 0 && val.n_rows) {
            pre_val = xcalloc(2 * val.n_rows, sizeof *pre_val);
            rc = kto_precompute_reference(&ref, &val, cfg, pad, km.with_kl, pre_val,
                                          pre_val + val.n_rows, log);
        }
        km.pre_ref = pre;
        km.pre_ref_kl = pre + ds.n_rows;
        km.ref = NULL;
        if (has_frozen) model_free(&frozen), has_frozen = false; /* no longer needed in memory */
    }
    if (rc == 0) {
        /* the held-out rows go through a second instance of the method (see run_preference) */
        KtoMethod held_km = km;
        held_km.metrics = (StepMetrics){0};
        held_km.pre_ref = pre_val;
        held_km.pre_ref_kl = pre_val ? pre_val + val.n_rows : NULL;
        KtoMicroBatch held_window;
        KtoTask held_t = {&val, pad, cfg->sequence_len, &held_window, &held_km};
        TrainTask held = {val.n_rows,  &held_t,        kto_build,
                          kto_release, kto_begin_step, kto_method_train_method(&held_km),
                          kto_flush,   NULL,           0,
                          NULL};
        KtoTask t = {&ds, pad, cfg->sequence_len,
                     xcalloc((size_t)cfg->gradient_accumulation_steps, sizeof(KtoMicroBatch)), &km};
        TrainTask task = {ds.n_rows,
                          &t,
                          kto_build,
                          kto_release,
                          kto_begin_step,
                          kto_method_train_method(&km),
                          kto_flush,
                          NULL,
                          0,
                          val.n_rows ? &held : NULL};
        rc = run(cfg, m, lora, &task, out, log);
        free(t.window);
    }
    free(pre);
    free(pre_val);
    if (has_frozen) model_free(&frozen);
    lora_free(&initial);
    pref_dataset_free(&val);
    pref_dataset_free(&ds);
    return rc;
}

/* The adapter to train: a fresh one as the lora_* keys describe, or the one in lora_model_dir
 * to continue from (its adapter_config.json governs, as PeftModel.from_pretrained does). */
static int make_adapter(const TrainConfig *cfg, const Model *m, LoraAdapter *lora, FILE *log) {
    if (cfg->lora_model_dir) {
        if (!dir_exists(cfg->lora_model_dir))
            return err_set("%s: key 'lora_model_dir': target directory for LoRA adapter weights "
                           "does not exist: `%s`",
                           cfg->source, cfg->lora_model_dir);
        if (lora_load(lora, &m->cfg, cfg->lora_model_dir) != 0) return -1;
        fprintf(log, "continuing from the adapter in %s (r %d, alpha %g)\n", cfg->lora_model_dir,
                lora->r, lora->alpha);
        return 0;
    }
    const char *all_linear = "all-linear";
    const char *const *targets = (const char *const *)cfg->lora_target_modules;
    int n_targets = cfg->n_lora_target_modules;
    if (cfg->lora_target_linear) targets = &all_linear, n_targets = 1;
    if (lora_create(lora, &m->cfg, (int)cfg->lora_r, cfg->lora_alpha, cfg->peft_use_rslora,
                    cfg->lora_dropout, targets, n_targets, (uint64_t)cfg->seed) != 0)
        return err_prefix("%s", cfg->source);
    return 0;
}

int train_session_open(TrainSession *s, const TrainConfig *cfg, FILE *log) {
    memset(s, 0, sizeof *s);
    if (model_load(&s->model, cfg->base_model) != 0) return -1;
    if (cfg->adapter && make_adapter(cfg, &s->model, &s->lora, log) != 0) {
        model_free(&s->model);
        return -1;
    }
    s->has_lora = cfg->adapter != NULL;
    if (cfg->adapter)
        fprintf(log, "trainable params: %zu || all params: %zu || trainable%%: %.4f\n",
                s->lora.n_params, s->lora.n_params + s->model.n_params,
                100.0 * (double)s->lora.n_params / (double)(s->lora.n_params + s->model.n_params));
    if (tokenizer_load(&s->tok, cfg->tokenizer_config) != 0) {
        lora_free(&s->lora);
        model_free(&s->model);
        return -1;
    }
    return 0;
}

int train_session_run(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks, FILE *log) {
    TrainOutcome *out = hooks ? hooks->outcome : NULL;
    if (out) memset(out, 0, sizeof *out);
    LoraAdapter *trained = s->has_lora ? &s->lora : NULL;
    Model *m = &s->model;
    return cfg->rl == RL_NONE  ? run_sft(cfg, m, trained, &s->tok, out, log)
           : cfg->rl == RL_KTO ? run_kto(cfg, m, trained, &s->tok, out, log)
           : cfg->rl == RL_GRPO || cfg->rl == RL_GDPO
               ? grpo_run(cfg, m, trained, &s->tok, hooks, log)
               : run_preference(cfg, m, trained, &s->tok, out, log);
}

int train_session_save(const TrainSession *s, const TrainConfig *cfg, const char *dir, FILE *log) {
    /* rank 0 writes the model; every rank learns whether it could */
    int rc = dist_agree(
        !dist_is_root() ? 0
        : s->has_lora   ? adapter_dir_write(&s->lora, cfg->base_model, cfg->tokenizer_config, dir)
                        : model_dir_write(&s->model, cfg->base_model, cfg->tokenizer_config, dir,
                                          model_source_dtype(&s->model)));
    if (rc == 0) fprintf(log, "%s saved to %s\n", s->has_lora ? "adapter" : "model", dir);
    return rc;
}

void train_session_close(TrainSession *s) {
    tokenizer_free(&s->tok);
    lora_free(&s->lora);
    model_free(&s->model);
    memset(s, 0, sizeof *s);
}

int train_run(const TrainConfig *cfg, FILE *log) {
    TrainSession s;
    if (train_session_open(&s, cfg, log) != 0) return -1;
    int rc = train_session_run(&s, cfg, NULL, log);
    if (rc == 0) rc = train_session_save(&s, cfg, cfg->output_dir, log);
    train_session_close(&s);
    return rc;
}
