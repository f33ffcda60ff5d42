#include "train/train_run.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/dataset_cache.h"
#include "data/sft_dataset.h"
#include "model/forward.h"
#include "train/checkpoint.h"
#include "train/model_dir.h"
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

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: a small, well-mixed generator for the per-epoch shuffle. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(size_t *order, size_t n, int64_t seed, int64_t epoch) {
    uint64_t state = (uint64_t)seed * 0x100000001B3ull + (uint64_t)epoch;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(splitmix64(&state) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

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
    return (MicroBatch){{count, t_len, buf->tokens, buf->attn, NULL}, buf->labels};
}

/* val_set_size: a fraction (< 1) or a count of the examples, chosen by a seeded shuffle, moved
 * from `all` to `val` (the draw is reproducible, but not the one datasets' train_test_split
 * makes). */
static int split_validation(SftDataset *all, const TrainConfig *cfg, SftDataset *val) {
    memset(val, 0, sizeof *val);
    if (cfg->val_set_size <= 0) return 0;
    size_t n_val = cfg->val_set_size < 1 ? (size_t)ceil(cfg->val_set_size * (double)all->n)
                                         : (size_t)cfg->val_set_size;
    if (n_val >= all->n)
        return err_set("%s: val_set_size %g leaves no training example (%zu in the datasets)",
                       cfg->source, cfg->val_set_size, all->n);
    size_t *order = xmalloc(all->n * sizeof *order);
    shuffle(order, all->n, cfg->seed, -1);
    SftExample *train = xmalloc((all->n - n_val) * sizeof *train);
    val->items = xmalloc(n_val * sizeof *val->items);
    for (size_t i = 0; i < all->n; i++) {
        if (i < n_val)
            val->items[val->n++] = all->items[order[i]];
        else
            train[i - n_val] = all->items[order[i]];
    }
    free(all->items);
    free(order);
    all->items = train;
    all->n -= n_val;
    return 0;
}

/* Mean negative log-likelihood over every label token of the validation set. */
static int evaluate(Model *m, const SftDataset *val, int64_t batch_size, int32_t pad_id,
                    double *loss) {
    size_t *order = xmalloc(val->n * sizeof *order);
    for (size_t i = 0; i < val->n; i++)
        order[i] = i;
    double sum = 0;
    size_t count = 0;
    int rc = 0;
    for (size_t first = 0; first < val->n && rc == 0; first += (size_t)batch_size) {
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
    *loss = count ? -sum / (double)count : 0.0;
    return rc;
}

static int64_t default_warmup(int64_t total) {
    int64_t w = (int64_t)(0.03 * (double)total);
    if (w > 100) w = 100;
    return w == 1 ? 2 : w; /* Axolotl's rule: a computed 1 becomes 2 */
}

/* On a terminal: one line rewritten after every step, with a bar and the time left. Logs and
 * pipes get the periodic lines of the logging steps instead. */
static void show_progress(FILE *log, int64_t step, int64_t total, int64_t first_step, double loss,
                          double lr, double tokens_per_s, double elapsed) {
    int width = 24, filled = (int)((double)width * (double)step / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    double per_step = step > first_step ? elapsed / (double)(step - first_step) : 0;
    double left = per_step * (double)(total - step);
    fprintf(log, "\r[%s] %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %02d:%02d ", bar,
            (long long)step, (long long)total, loss, lr, tokens_per_s, (int)(left / 60),
            (int)left % 60);
    fflush(log);
}

/* trainer_state.json in HF's schema. */
static json_t *trainer_state(const TrainConfig *cfg, int64_t step, double epoch, int64_t total,
                             json_t *log_history) {
    json_t *s = json_object();
    json_object_set_new(s, "best_metric", json_null());
    json_object_set_new(s, "best_model_checkpoint", json_null());
    json_object_set_new(s, "epoch", json_real(epoch));
    json_object_set_new(s, "eval_steps", json_integer(cfg->eval_steps));
    json_object_set_new(s, "global_step", json_integer(step));
    json_object_set_new(s, "is_hyper_param_search", json_false());
    json_object_set_new(s, "is_local_process_zero", json_true());
    json_object_set_new(s, "is_world_process_zero", json_true());
    json_object_set(s, "log_history", log_history);
    json_object_set_new(s, "logging_steps", json_integer(cfg->logging_steps));
    json_object_set_new(s, "max_steps", json_integer(total));
    json_object_set_new(s, "num_input_tokens_seen", json_integer(0));
    json_object_set_new(s, "num_train_epochs", json_real(cfg->num_epochs));
    json_object_set_new(s, "save_steps", json_integer(cfg->save_steps));
    json_object_set_new(s, "stateful_callbacks", json_object());
    json_object_set_new(s, "total_flos", json_integer(0));
    json_object_set_new(s, "train_batch_size", json_integer(cfg->micro_batch_size));
    json_object_set_new(s, "trial_name", json_null());
    json_object_set_new(s, "trial_params", json_null());
    return s;
}

/* resume_from_checkpoint: "true" means the latest checkpoint in output_dir. */
static int resume(const TrainConfig *cfg, Trainer *tr, json_t **log_history, FILE *log) {
    char dir[4096];
    if (strcmp(cfg->resume_from_checkpoint, "true") == 0) {
        int found = checkpoint_find_latest(cfg->output_dir, dir, sizeof dir);
        if (found < 0) return -1;
        if (!found)
            return err_set("resume_from_checkpoint: true, but %s holds no checkpoint-N directory",
                           cfg->output_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", cfg->resume_from_checkpoint);
    }
    json_t *state;
    if (checkpoint_load(dir, tr, &state) != 0) return -1;
    json_t *history = json_object_get(state, "log_history");
    if (json_is_array(history)) json_array_extend(*log_history, history);
    json_decref(state);
    fprintf(log, "resumed from %s at step %lld\n", dir, (long long)tr->step);
    return 0;
}

static int run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const SftDataset *ds,
               const SftDataset *val, int32_t pad_id, FILE *log) {
    size_t micro_per_epoch =
        (ds->n + (size_t)cfg->micro_batch_size - 1) / (size_t)cfg->micro_batch_size;
    size_t gas = (size_t)cfg->gradient_accumulation_steps;
    int64_t windows_per_epoch = (int64_t)((micro_per_epoch + gas - 1) / gas);
    int64_t total = cfg->max_steps > 0 ? cfg->max_steps
                                       : (int64_t)ceil(cfg->num_epochs * (double)windows_per_epoch);
    TrainerOptions opt = {
        .learning_rate = cfg->learning_rate,
        .max_grad_norm = cfg->max_grad_norm,
        .adamw = {cfg->adam_beta1, cfg->adam_beta2, cfg->adam_epsilon, cfg->weight_decay},
        .total_steps = total,
        .gradient_checkpointing = cfg->gradient_checkpointing,
        .seed = (uint64_t)cfg->seed};
    lr_schedule_parse(cfg->lr_scheduler, &opt.schedule);
    opt.warmup_steps = cfg->warmup_steps >= 0 ? cfg->warmup_steps
                       : cfg->warmup_ratio >= 0
                           ? lr_warmup_steps_from_ratio(cfg->warmup_ratio, total)
                           : default_warmup(total);
    Trainer tr;
    if (trainer_init(&tr, m, lora, &opt) != 0) return -1;
    json_t *log_history = json_array();
    if (make_dirs(cfg->output_dir) != 0 ||
        (cfg->resume_from_checkpoint && resume(cfg, &tr, &log_history, log) != 0)) {
        json_decref(log_history);
        trainer_free(&tr);
        return -1;
    }
    CheckpointTarget target = {cfg->output_dir, cfg->base_model, cfg->tokenizer_config,
                               cfg->save_total_limit};
    int64_t window_index = 0; /* windows seen, counting the ones a resume skips */
    char metrics_path[4096];
    path_join(metrics_path, sizeof metrics_path, cfg->output_dir, "metrics.jsonl");
    FILE *metrics = fopen(metrics_path, tr.step > 0 ? "a" : "w");
    if (!metrics) {
        json_decref(log_history);
        trainer_free(&tr);
        return err_set("%s: cannot create: %s", metrics_path, strerror(errno));
    }
    fprintf(log,
            "training %zu examples: %lld steps (%lld per epoch), micro-batch %lld x %zu "
            "accumulation, warm-up %lld, lr %g %s\n",
            ds->n, (long long)total, (long long)windows_per_epoch, (long long)cfg->micro_batch_size,
            gas, (long long)opt.warmup_steps, cfg->learning_rate, cfg->lr_scheduler);

    size_t *order = xmalloc(ds->n * sizeof *order);
    MicroBatch *window = xmalloc(gas * sizeof *window);
    BatchBuffers *bufs = xmalloc(gas * sizeof *bufs);
    double start = now_seconds(), tokens = 0, loss_sum = 0;
    int64_t loss_count = 0, first_step = tr.step;
    bool tty = isatty(fileno(log));
    int rc = 0;
    for (int64_t epoch = 0; tr.step < total && rc == 0; epoch++) {
        shuffle(order, ds->n, cfg->seed, epoch);
        for (size_t micro = 0; micro < micro_per_epoch && tr.step < total && rc == 0;
             micro += gas) {
            size_t n_micro = micro_per_epoch - micro < gas ? micro_per_epoch - micro : gas;
            if (window_index++ < tr.step) continue; /* done before the checkpoint we resumed */
            for (size_t k = 0; k < n_micro; k++) {
                size_t first = (micro + k) * (size_t)cfg->micro_batch_size;
                int count = (int)(ds->n - first < (size_t)cfg->micro_batch_size
                                      ? ds->n - first
                                      : (size_t)cfg->micro_batch_size);
                window[k] = build_micro_batch(ds, order, first, count, pad_id, &bufs[k]);
                for (int e = 0; e < count; e++)
                    tokens += ds->items[order[first + e]].len;
            }
            StepStats st;
            rc = trainer_sft_step(&tr, window, (int)n_micro, &st);
            for (size_t k = 0; k < n_micro; k++)
                free(bufs[k].tokens), free(bufs[k].attn), free(bufs[k].labels);
            if (rc != 0) break;
            loss_sum += st.loss;
            loss_count++;
            if (tr.step % cfg->logging_steps == 0 || tr.step == total) {
                double ep = (double)tr.step / (double)windows_per_epoch;
                double mean_loss = loss_sum / (double)loss_count;
                fprintf(metrics,
                        "{\"loss\": %.6g, \"grad_norm\": %.6g, \"learning_rate\": %.6g, "
                        "\"epoch\": %.4g, \"step\": %lld}\n",
                        mean_loss, st.grad_norm, st.lr, ep, (long long)tr.step);
                fflush(metrics);
                json_t *entry = json_object();
                json_object_set_new(entry, "epoch", json_real(ep));
                json_object_set_new(entry, "grad_norm", json_real(st.grad_norm));
                json_object_set_new(entry, "learning_rate", json_real(st.lr));
                json_object_set_new(entry, "loss", json_real(mean_loss));
                json_object_set_new(entry, "step", json_integer(tr.step));
                json_array_append_new(log_history, entry);
                double el = now_seconds() - start;
                if (!tty)
                    fprintf(log,
                            "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  epoch %.2f  %.0f "
                            "tok/s\n",
                            (long long)tr.step, (long long)total, mean_loss, st.grad_norm, st.lr,
                            ep, tokens / (el > 0 ? el : 1));
                loss_sum = 0, loss_count = 0;
            }
            if (tty) {
                double el = now_seconds() - start;
                show_progress(log, tr.step, total, first_step, st.loss, st.lr,
                              tokens / (el > 0 ? el : 1), el);
            }
            bool eval_now =
                val->n && (cfg->eval_steps > 0 ? tr.step % cfg->eval_steps == 0 : tr.step == total);
            if (eval_now) {
                double eval_loss;
                if ((rc = evaluate(m, val, cfg->micro_batch_size, pad_id, &eval_loss)) != 0) break;
                double ep = (double)tr.step / (double)windows_per_epoch;
                fprintf(metrics, "{\"eval_loss\": %.6g, \"epoch\": %.4g, \"step\": %lld}\n",
                        eval_loss, ep, (long long)tr.step);
                fflush(metrics);
                json_t *entry = json_object();
                json_object_set_new(entry, "epoch", json_real(ep));
                json_object_set_new(entry, "eval_loss", json_real(eval_loss));
                json_object_set_new(entry, "step", json_integer(tr.step));
                json_array_append_new(log_history, entry);
                fprintf(log, "%sstep %lld/%lld  eval_loss %.4f (%zu held-out examples)\n",
                        tty ? "\n" : "", (long long)tr.step, (long long)total, eval_loss, val->n);
            }
            if (cfg->save_steps > 0 && tr.step % cfg->save_steps == 0) {
                json_t *state = trainer_state(
                    cfg, tr.step, (double)tr.step / (double)windows_per_epoch, total, log_history);
                rc = checkpoint_save(&target, &tr, state);
                json_decref(state);
                if (rc == 0 && !tty) fprintf(log, "saved checkpoint-%lld\n", (long long)tr.step);
            }
        }
    }
    json_decref(log_history);
    free(order);
    free(window);
    free(bufs);
    fclose(metrics);
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

int train_run(const TrainConfig *cfg, FILE *log) {
    if (cfg->rl != RL_NONE)
        return err_set("%s: rl: %s is not implemented in this build yet (supervised fine-tuning "
                       "runs when rl is left out)",
                       cfg->source, rl_method_name(cfg->rl));
    Model m;
    if (model_load(&m, cfg->base_model) != 0) return -1;
    LoraAdapter lora = {0};
    if (cfg->adapter && make_adapter(cfg, &m, &lora, log) != 0) {
        model_free(&m);
        return -1;
    }
    if (cfg->adapter)
        fprintf(log, "trainable params: %zu || all params: %zu || trainable%%: %.4f\n",
                lora.n_params, lora.n_params + m.n_params,
                100.0 * (double)lora.n_params / (double)(lora.n_params + m.n_params));
    Tokenizer tok;
    if (tokenizer_load(&tok, cfg->tokenizer_config) != 0) {
        lora_free(&lora);
        model_free(&m);
        return -1;
    }
    int32_t eos = -1, pad = 0;
    SftDataset ds = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, &tok, &eos, &pad);
    char cache_dir[4096];
    if (rc == 0)
        rc = sft_dataset_prepare(&ds, cfg, &tok, eos, m.cfg.vocab_size, false, log, cache_dir,
                                 sizeof cache_dir);
    if (rc == 0 && ds.dropped_too_long)
        fprintf(log, "warning: %zu examples longer than sequence_len %lld were dropped\n",
                ds.dropped_too_long, (long long)cfg->sequence_len);
    SftDataset val = {0};
    if (rc == 0) rc = split_validation(&ds, cfg, &val);
    if (rc == 0) rc = run(cfg, &m, cfg->adapter ? &lora : NULL, &ds, &val, pad, log);
    if (rc == 0)
        rc = cfg->adapter
                 ? adapter_dir_write(&lora, cfg->base_model, cfg->tokenizer_config, cfg->output_dir)
                 : model_dir_write(&m, cfg->base_model, cfg->tokenizer_config, cfg->output_dir,
                                   model_source_dtype(&m));
    if (rc == 0)
        fprintf(log, "%s saved to %s\n", cfg->adapter ? "adapter" : "model", cfg->output_dir);
    sft_dataset_free(&val);
    sft_dataset_free(&ds);
    tokenizer_free(&tok);
    lora_free(&lora);
    model_free(&m);
    return rc;
}
