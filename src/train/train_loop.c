#include "train/train_loop.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "dist/dist.h"
#include "report/sparkline.h"
#include "train/device_residency.h"
#include "train/output_dir.h"
#include "train/step_hooks.h"
#include "train/train_device.h"
#include "train/train_state.h"

#include <sys/resource.h>

/* Axolotl's warm-up when neither warmup_steps nor warmup_ratio is set. */
static int64_t default_warmup(int64_t total) {
    int64_t w = (int64_t)(0.03 * (double)total);
    if (w > 100) w = 100;
    return w == 1 ? 2 : w; /* Axolotl's rule: a computed 1 becomes 2 */
}

TrainerOptions trainer_options_from_config(const TrainConfig *cfg, int64_t total_steps) {
    TrainerOptions opt = {.learning_rate = cfg->learning_rate,
                          .max_grad_norm = cfg->max_grad_norm,
                          .adamw = {cfg->adam_beta1, cfg->adam_beta2, cfg->adam_epsilon,
                                    cfg->weight_decay, optimizer_is_8bit(cfg->optimizer)},
                          .total_steps = total_steps,
                          .gradient_checkpointing = cfg->gradient_checkpointing,
                          .disable_dropout = cfg->rl != RL_NONE, /* TRL's disable_dropout=True */
                          .seed = (uint64_t)cfg->seed,
                          .zero1 = cfg->zero_stage == 1};
    lr_schedule_parse(cfg->lr_scheduler, &opt.schedule);
    opt.warmup_steps = cfg->warmup_steps >= 0 ? cfg->warmup_steps
                       : cfg->warmup_ratio >= 0
                           ? lr_warmup_steps_from_ratio(cfg->warmup_ratio, total_steps)
                           : default_warmup(total_steps);
    return opt;
}

void train_loop_log_optimizer(FILE *log, const Trainer *tr) {
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

/* Everything before the first step: output_dir, the checkpoint resumed from and the source's
 * own set-up. Collective; the first agreement point is that every rank got through its set-up
 * (model, data, reference). */
static int begin(const TrainConfig *cfg, const StepSource *src, Trainer *tr, json_t *log_history,
                 FILE *log) {
    if (dist_agree(dist_is_root() ? make_dirs(cfg->output_dir) : 0) != 0) return -1;
    char resumed_from[4096] = "";
    if (cfg->resume_from_checkpoint &&
        train_state_resume(cfg, tr, log_history, log, resumed_from, sizeof resumed_from) != 0)
        return -1;
    return src->start ? src->start(src->ctx, tr, log_history, resumed_from, log) : 0;
}

/* The run's first files, once its first step is done and before anything of it is logged or
 * saved: its record (output_dir.h), then metrics.jsonl and the reporters' files (runs/, W&B).
 * In this order a run that fails or is killed earlier leaves no file behind, and one killed
 * after leaves files its record accounts for, so output_dir_prepare lets the same config start
 * again there (a metrics.jsonl with no record beside it would be another run's). Collective. */
static int open_run_files(const TrainConfig *cfg, bool resumed, MetricsFile *metrics, FILE *log) {
    if (output_dir_write_record(cfg) != 0) return -1;
    if (dist_agree(dist_is_root() ? metrics_file_open(metrics, cfg->output_dir, resumed) : 0) != 0)
        return -1;
    metrics_reporters_open(metrics, cfg, log); /* rank 0 only: never fails */
    return 0;
}

int train_loop_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const StepSource *src,
                   TrainOutcome *out, FILE *log) {
    TrainerOptions opt = trainer_options_from_config(cfg, src->total_steps);
    Trainer tr;
    if (trainer_init(&tr, m, lora, &opt) != 0) return -1;
    json_t *log_history = json_array();
    MetricsFile metrics = {0};
    int rc = begin(cfg, src, &tr, log_history, log);
    /* device: the checkpoint (if any) is restored on the host; from here the state lives on
     * the device until the loop ends (device_residency.h) */
    const TrainDevice *device = cfg->train_device;
    DeviceResidency resident = {0};
    if (rc == 0 && device && device->be) rc = device_residency_enter(&resident, &tr, device->be);
    bool resumed = tr.step > 0, recorded = false;
    StepHooks hooks = step_hooks_init(cfg, src, &tr, &metrics, log_history, log);
    while (rc == 0 && tr.step < src->total_steps) {
        StepStats st;
        int step_rc = src->step(src->ctx, &tr, &st, &hooks.tokens);
        /* a kernel that failed on the device leaves garbage behind: the run stops on it */
        if (step_rc >= 0 && device && train_device_status(device) != 0)
            step_rc = err_prefix("step %lld", (long long)tr.step);
        if (step_rc < 0) { /* over several ranks, trainer_step agreed on it */
            rc = -1;
            break;
        }
        if (!recorded && (rc = open_run_files(cfg, resumed, &metrics, log)) != 0) break;
        recorded = true;
        rc = step_hooks_after_step(&hooks, step_rc, &st);
    }
    double elapsed = clock_seconds() - hooks.start;
    int64_t tr_step_end = tr.step;
    if (out) {
        *out = (TrainOutcome){.log_history = log_history,
                              .global_step = tr.step,
                              .max_steps = src->total_steps,
                              .first_step = hooks.first_step,
                              .epoch = (double)tr.step / (double)src->steps_per_epoch,
                              .loss_sum = hooks.run_loss_sum,
                              .loss_steps = hooks.run_loss_steps,
                              .seconds = elapsed};
        json_incref(log_history); /* out's reference; ours goes below */
    }
    metrics_file_close(&metrics);
    device_residency_leave(&resident); /* the weights back in the model's host arrays */
    trainer_free(&tr);
    if (rc != 0) {
        json_decref(log_history);
        return -1;
    }
    if (hooks.tty) fputc('\n', log);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* the rate counts only the steps this process ran: a resumed run did not redo the first */
    long long ran = (long long)(tr_step_end - hooks.first_step);
    if (hooks.first_step > 0)
        fprintf(log, "done: %lld steps (resumed at step %lld, now %lld/%lld)", ran,
                (long long)hooks.first_step, (long long)tr_step_end, (long long)src->total_steps);
    else
        fprintf(log, "done: %lld steps", ran);
    fprintf(log, " in %.1f s, %.0f tok/s, peak memory %.0f MB\n", elapsed,
            hooks.tokens / (elapsed > 0 ? elapsed : 1), ru.ru_maxrss / 1024.0);
    train_device_report_memory(device, log); /* the GPU's beside the host's peak RSS */
    if (dist_is_root()) {                    /* the main curves at a glance */
        MetricSet curves;
        metrics_series_from_entries(&curves, log_history);
        sparkline_summary(log, &curves);
        metrics_series_free(&curves);
    }
    json_decref(log_history);
    return 0;
}
