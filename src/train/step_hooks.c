#include "train/step_hooks.h"

#include "common/clock.h"
#include "common/log_stream.h"
#include "dist/dist.h"
#include "train/hub_push.h"
#include "train/stop_signal.h"
#include "train/train_state.h"

#include <math.h>
#include <unistd.h>

StepHooks step_hooks_init(const TrainConfig *cfg, const StepSource *src, Trainer *tr,
                          MetricsFile *metrics, json_t *log_history, FILE *log) {
    return (StepHooks){.cfg = cfg,
                       .src = src,
                       .tr = tr,
                       .metrics = metrics,
                       .log_history = log_history,
                       .target = {.output_dir = cfg->output_dir,
                                  .model_dir = cfg->base_model,
                                  .base_id = cfg->base_model_id,
                                  .tokenizer_dir = cfg->tokenizer_config,
                                  .save_total_limit = cfg->save_total_limit,
                                  .write_extra = src->write_extra,
                                  .extra_ctx = src->extra_ctx},
                       .bad = bad_steps_init(cfg->max_consecutive_bad_steps, log_history),
                       .log = log,
                       .tty = log_stream_is_tty(log),
                       .start = clock_seconds(),
                       .first_step = tr->step};
}

/* The figures worth a glance on the progress line, from a log entry: reward accuracy and
 * margin, GRPO's mean reward, and the KL estimate. Empty for SFT. */
static void metric_note(const json_t *entry, char *buf, size_t size) {
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
static void show_progress(const StepHooks *h, double loss, double lr) {
    int64_t step = h->tr->step, total = h->src->total_steps;
    double elapsed = clock_seconds() - h->start;
    int width = 24, filled = (int)((double)width * (double)step / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    double per_step = step > h->first_step ? elapsed / (double)(step - h->first_step) : 0;
    double left = per_step * (double)(total - step);
    fprintf(h->log, "\r[%s] %lld/%lld  loss %.4f  lr %.3g%s  %.0f tok/s  ETA %02d:%02d ", bar,
            (long long)step, (long long)total, loss, lr, h->note,
            h->tokens / (elapsed > 0 ? elapsed : 1), (int)(left / 60), (int)left % 60);
    fflush(h->log);
}

static double epoch_of(const StepHooks *h) {
    return (double)h->tr->step / (double)h->src->steps_per_epoch;
}

/* The logging_steps line: HF's keys (loss: the mean since the last line), the source's
 * metrics, the bad-step count, its timing keys, epoch and step. */
static void log_step(StepHooks *h, const StepStats *st) {
    double mean_loss = h->loss_count ? h->loss_sum / (double)h->loss_count : NAN;
    json_t *entry = json_object();
    json_object_set_new(entry, "loss", json_real_or_null(mean_loss));
    json_object_set_new(entry, "grad_norm", json_real_or_null(st->grad_norm));
    json_object_set_new(entry, "learning_rate", json_real(st->lr));
    if (h->src->flush_metrics) h->src->flush_metrics(h->src->ctx, entry);
    bad_steps_log(&h->bad, entry);
    if (h->src->add_timing) h->src->add_timing(h->src->ctx, entry, h->tr->step);
    json_object_set_new(entry, "epoch", json_real(epoch_of(h)));
    json_object_set_new(entry, "step", json_integer(h->tr->step));
    metrics_log_entry(h->metrics, h->log_history, entry);
    metric_note(entry, h->note, sizeof h->note);
    json_decref(entry);
    double el = clock_seconds() - h->start;
    if (!h->tty)
        fprintf(h->log,
                "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  epoch %.2f%s  %.0f tok/s\n",
                (long long)h->tr->step, (long long)h->src->total_steps, mean_loss, st->grad_norm,
                st->lr, epoch_of(h), h->note, h->tokens / (el > 0 ? el : 1));
    h->loss_sum = 0, h->loss_count = 0;
}

static int evaluate(StepHooks *h) {
    json_t *entry = json_object();
    int rc = h->src->evaluate(h->src->ctx, h->tr->model, entry);
    if (rc == 0) {
        json_object_set_new(entry, "epoch", json_real(epoch_of(h)));
        json_object_set_new(entry, "step", json_integer(h->tr->step));
        metrics_log_entry(h->metrics, h->log_history, entry);
        const json_t *v = json_object_get(entry, h->src->eval_key);
        fprintf(h->log, "%sstep %lld/%lld  %s %.4f (%zu held-out %s)\n", h->tty ? "\n" : "",
                (long long)h->tr->step, (long long)h->src->total_steps, h->src->eval_key,
                v ? json_number_value(v) : NAN, h->src->n_eval, h->src->eval_items);
    }
    json_decref(entry);
    return rc;
}

int step_hooks_after_step(StepHooks *h, int step_rc, const StepStats *st) {
    const TrainConfig *cfg = h->cfg;
    int64_t step = h->tr->step;
    /* every rank sees the same step results, so all stop here together */
    if (bad_steps_record(&h->bad, step_rc, step, st, h->log) != 0) return dist_agree(-1);
    if (step_rc == 0) { /* a skipped step has no loss */
        h->loss_sum += st->loss, h->loss_count++;
        h->run_loss_sum += st->loss, h->run_loss_steps++;
    }
    if (step % cfg->logging_steps == 0 || step == h->src->total_steps) log_step(h, st);
    if (h->tty) show_progress(h, st->loss, st->lr);
    bool eval_now =
        h->src->evaluate && h->src->n_eval &&
        (cfg->eval_steps > 0 ? step % cfg->eval_steps == 0 : step == h->src->total_steps);
    if (eval_now && evaluate(h) != 0) return -1;
    /* a signal: this step is done; save it (whatever save_steps says) and stop. Over several
     * ranks, one rank's signal stops them all after the same step. */
    int sig = stop_signal_agree();
    if (sig || (cfg->save_steps > 0 && step % cfg->save_steps == 0)) {
        json_t *state =
            train_state_json(cfg, step, epoch_of(h), h->src->total_steps, h->log_history);
        int rc = checkpoint_save(&h->target, h->tr, state);
        json_decref(state);
        if (rc != 0) return -1;
        if (!h->tty || sig)
            fprintf(h->log, "%ssaved checkpoint-%lld\n", h->tty ? "\n" : "", (long long)step);
        /* hub_strategy's pushes of the checkpoint, from rank 0; a failed push stops the run */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/checkpoint-%lld", cfg->output_dir, (long long)step);
        if (cfg->push_to_hub &&
            dist_agree(dist_is_root() ? hub_push_checkpoint(cfg, dir, step, h->log) : 0) != 0)
            return -1;
    }
    if (sig) return dist_agree(stop_signal_error(sig, step)); /* all stop */
    return 0;
}
