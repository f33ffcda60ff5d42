#include "train/run_support.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/rng.h"
#include "dist/dist.h"
#include "train/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t default_warmup(int64_t total) {
    int64_t w = (int64_t)(0.03 * (double)total);
    if (w > 100) w = 100;
    return w == 1 ? 2 : w; /* Axolotl's rule: a computed 1 becomes 2 */
}

/* The preference metrics worth a glance on the progress line (from the last logged entry):
 * reward accuracy and margin, GRPO's mean reward, and the KL estimate. Empty for SFT. */
void metric_note(const json_t *entry, char *buf, size_t size) {
    static const struct {
        const char *key, *label;
    } shown[] = {{"rewards/accuracies", "acc"},
                 {"rewards/margins", "margin"},
                 {"reward", "reward"},
                 {"kl", "kl"}};
    buf[0] = '\0';
    for (size_t i = 0, n = 0; i < sizeof shown / sizeof *shown; i++) {
        const json_t *v = json_object_get(entry, shown[i].key);
        if (v && n < size)
            n += (size_t)snprintf(buf + n, size - n, "  %s %.3g", shown[i].label,
                                  json_number_value(v));
    }
}

/* On a terminal: one line rewritten after every step, with a bar and the time left. Logs and
 * pipes get the periodic lines of the logging steps instead. */
void show_progress(FILE *log, int64_t step, int64_t total, int64_t first_step, double loss,
                   double lr, const char *note, double tokens_per_s, double elapsed) {
    int width = 24, filled = (int)((double)width * (double)step / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    double per_step = step > first_step ? elapsed / (double)(step - first_step) : 0;
    double left = per_step * (double)(total - step);
    fprintf(log, "\r[%s] %lld/%lld  loss %.4f  lr %.3g%s  %.0f tok/s  ETA %02d:%02d ", bar,
            (long long)step, (long long)total, loss, lr, note, tokens_per_s, (int)(left / 60),
            (int)left % 60);
    fflush(log);
}

/* trainer_state.json in HF's schema. */
json_t *trainer_state(const TrainConfig *cfg, int64_t step, double epoch, int64_t total,
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

/* resume_from_checkpoint: "true" means the latest checkpoint in output_dir. Over several ranks
 * rank 0 alone looks for it and reads it (checkpoint_load hands it to the others). */
int resume(const TrainConfig *cfg, Trainer *tr, json_t **log_history, FILE *log, char *out_dir,
           size_t out_size) {
    char dir[4096] = "";
    int found = 1;
    if (!dist_is_root()) {
        /* nothing to find: rank 0 reads the checkpoint */
    } else if (strcmp(cfg->resume_from_checkpoint, "true") == 0) {
        found = checkpoint_find_latest(cfg->output_dir, dir, sizeof dir);
        if (found == 0)
            err_set("resume_from_checkpoint: true, but %s holds no checkpoint-N directory",
                    cfg->output_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", cfg->resume_from_checkpoint);
    }
    json_t *state;
    if (checkpoint_load(found == 1 ? dir : NULL, tr, &state) != 0) return -1;
    json_t *history = json_object_get(state, "log_history");
    if (json_is_array(history)) json_array_extend(*log_history, history);
    json_decref(state);
    fprintf(log, "resumed from %s at step %lld\n", dir, (long long)tr->step);
    if (out_dir) snprintf(out_dir, out_size, "%s", dir);
    return 0;
}

/* Appends a log entry: to metrics.jsonl (one line) and to trainer_state's log_history. */
double last_logged(const json_t *log_history, const char *key) {
    for (size_t i = json_array_size(log_history); i-- > 0;) {
        const json_t *v = json_object_get(json_array_get(log_history, i), key);
        if (json_is_number(v)) return json_number_value(v);
    }
    return 0;
}

int metrics_file_open(MetricsFile *f, const char *output_dir, bool resumed) {
    if (path_join(f->path, sizeof f->path, output_dir, "metrics.jsonl") != 0) return -1;
    f->created = !file_exists(f->path);
    f->fp = fopen(f->path, "a");
    f->replace_pending = !resumed;
    if (!f->fp) return err_set("%s: cannot create: %s", f->path, strerror(errno));
    return 0;
}

void metrics_file_close(MetricsFile *f) {
    if (f->fp) fclose(f->fp);
    if (f->fp && f->created && f->replace_pending) remove(f->path);
    f->fp = NULL;
}

void log_entry(MetricsFile *metrics, json_t *log_history, json_t *entry) {
    if (!metrics->fp) { /* not rank 0: the log history alone, which nothing writes */
        json_array_append(log_history, entry);
        return;
    }
    if (metrics->replace_pending) {
        /* "a" mode writes at the end whatever the offset, so emptying the file is enough */
        if (ftruncate(fileno(metrics->fp), 0) != 0)
            fprintf(stderr, "warning: metrics.jsonl: cannot empty the previous run's entries: %s\n",
                    strerror(errno));
        metrics->replace_pending = false;
    }
    char *line = json_dumps(entry, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    if (line) fprintf(metrics->fp, "%s\n", line);
    free(line);
    fflush(metrics->fp);
    json_array_append(log_history, entry);
}

/* The reference policy for DPO/IPO (trl-methods.md §1.3): with an adapter, the same network with
 * the adapter switched off (no second copy), or, continuing from lora_model_dir, with a frozen
 * copy of that adapter as it was loaded (TRL's "ref" adapter); else (or with
 * rl_adapter_ref_model) a frozen copy of the base in *frozen (*has_frozen set). */
int make_reference(const TrainConfig *cfg, Model *m, LoraAdapter *lora, Model *frozen,
                   bool *has_frozen, LoraAdapter *initial, ReferencePolicy *ref, FILE *log) {
    *has_frozen = !lora || cfg->rl_adapter_ref_model;
    if (*has_frozen) {
        if (model_load(frozen, cfg->base_model) != 0) return -1;
        if (cfg->bf16 && model_store_bf16(frozen) != 0) {
            model_free(frozen);
            return err_prefix("bf16: true: the reference model");
        }
        reference_policy_from_model(ref, frozen);
        fprintf(log, "reference: a frozen copy of %s%s\n", cfg->base_model,
                cfg->bf16 ? ", its weights kept in bf16 (bf16: true)" : "");
    } else if (cfg->lora_model_dir) {
        if (lora_load(initial, &m->cfg, cfg->lora_model_dir) != 0) return -1;
        m->lora = lora;
        reference_policy_from_initial_adapter(ref, m, initial);
        fprintf(log, "reference: the base model with the adapter of %s as loaded\n",
                cfg->lora_model_dir);
    } else {
        m->lora = lora;
        reference_policy_from_adapter(ref, m, lora);
        fprintf(log, "reference: the base model with the adapter switched off\n");
    }
    return 0;
}

void shuffle(size_t *order, size_t n, int64_t seed, int64_t epoch) {
    uint64_t state = (uint64_t)seed * 0x100000001B3ull + (uint64_t)epoch;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rng_splitmix64_next(&state) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* val_set_size: a fraction (< 1) or a count of the n examples, chosen by a seeded shuffle: the
 * first *n_val of *order (the draw is reproducible, but not the one datasets' train_test_split
 * makes). *order is NULL when there is no validation split. */
int validation_draw(size_t n, const TrainConfig *cfg, size_t **order, size_t *n_val) {
    *order = NULL;
    *n_val = 0;
    if (cfg->val_set_size <= 0) return 0;
    *n_val = cfg->val_set_size < 1 ? (size_t)ceil(cfg->val_set_size * (double)n)
                                   : (size_t)cfg->val_set_size;
    if (*n_val >= n)
        return err_set("%s: val_set_size %g leaves no training example (%zu in the datasets)",
                       cfg->source, cfg->val_set_size, n);
    *order = xmalloc(n * sizeof **order);
    shuffle(*order, n, cfg->seed, -1);
    return 0;
}

void log_optimizer_state(FILE *log, const Trainer *tr) {
    const AdamW *opt = &tr->adamw;
    if (!opt->cfg.eight_bit) return;
    size_t quantised = 0, total = 0, bytes = 0;
    for (int s = 0; s < opt->n_spans; s++) {
        total += opt->spans[s].numel;
        if (!opt->moments[s].m) quantised += opt->spans[s].numel;
        MomentTensor mt[4];
        int n = adamw_span_moments(opt, s, mt);
        for (int k = 0; k < n; k++)
            bytes += moment_tensor_bytes(&mt[k]);
    }
    fprintf(log,
            "8-bit AdamW: %zu of %zu parameters keep 8-bit moments; optimizer state %.1f MB "
            "(fp32 moments: %.1f MB)\n",
            quantised, total, (double)bytes / 1e6, (double)(2 * total * sizeof(float)) / 1e6);
}
