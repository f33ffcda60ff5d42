#include "train/grpo_run.h"

#include "common/error.h"
#include "common/fileio.h"
#include "data/grpo_dataset.h"
#include "data/sft_dataset.h"
#include "dist/dist.h"
#include "python/py_embed.h"
#include "rewards/reward_registry.h"
#include "train/bad_steps.h"
#include "train/checkpoint.h"
#include "train/grpo_rollout.h"
#include "train/grpo_trainer.h"
#include "io/model_dir.h"
#include "train/replay_buffer.h"
#include "train/run_support.h"
#include "train/stop_signal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Everything one GRPO run holds. */
typedef struct {
    const TrainConfig *cfg;
    const GrpoConfig *g;
    GrpoDataset train, held_out;
    RewardFunc *funcs;
    const ReferencePolicy *ref; /* beta != 0 only */
    GrpoRollout rollout;
    GrpoTrainer gt;
    Trainer tr;
    ReplayBuffer replay; /* capacity 0: off */
    size_t *order;       /* this epoch's prompt order */
    int64_t order_epoch;
    int prompts_per_generation;
    int64_t generations_per_epoch, steps_per_epoch, total;
    RolloutTimes times;
    double train_s;
    RolloutTimes logged_times; /* times, train_s and the step at the last metrics line */
    double logged_train_s;
    int64_t logged_step;
    double loss_sum; /* over the whole run (skipped steps excluded), for TrainOutcome */
    int64_t loss_steps, first_step;
    double loop_s;
    FILE *log;
} GrpoRun;

/* Held-out prompts: test_datasets, or a val_set_size draw from the training prompts. */
static int held_out_prompts(GrpoRun *r, const Tokenizer *tok) {
    const TrainConfig *cfg = r->cfg;
    if (cfg->n_test_datasets)
        return grpo_dataset_load(&r->held_out, cfg, cfg->test_datasets, cfg->n_test_datasets, tok,
                                 r->log);
    size_t *order, n_val;
    if (validation_draw(r->train.n, cfg, &order, &n_val) != 0) return -1;
    if (order) grpo_dataset_split(&r->train, order, n_val, &r->held_out);
    free(order);
    return 0;
}

/* TRL's geometry (trl-methods.md §5.1): each generation batch takes gbs / G distinct prompts;
 * an epoch is floor(N / (gbs / G)) of them, each used num_iterations x spg micro-steps. */
static int plan_steps(GrpoRun *r) {
    const TrainConfig *cfg = r->cfg;
    const GrpoConfig *g = r->g;
    r->prompts_per_generation = g->generation_batch_size / g->num_generations;
    r->generations_per_epoch = (int64_t)r->train.n / r->prompts_per_generation;
    if (r->generations_per_epoch == 0)
        return err_set("%s: a generation batch needs %d distinct prompts (generation_batch_size "
                       "%d / num_generations %d); the datasets give %zu",
                       cfg->source, r->prompts_per_generation, g->generation_batch_size,
                       g->num_generations, r->train.n);
    int64_t micro = r->generations_per_epoch * g->num_iterations * g->steps_per_generation;
    r->steps_per_epoch = micro / cfg->gradient_accumulation_steps;
    if (r->steps_per_epoch < 1) r->steps_per_epoch = 1;
    r->total = cfg->max_steps > 0 ? cfg->max_steps
                                  : (int64_t)ceil(cfg->num_epochs * (double)r->steps_per_epoch);
    return 0;
}

static json_t *state_for_rewards(const GrpoRun *r) {
    return json_pack("{s:I,s:I,s:f}", "global_step", (json_int_t)r->tr.step, "max_steps",
                     (json_int_t)r->total, "epoch",
                     (double)r->tr.step / (double)r->steps_per_epoch);
}

/* The replay buffer's turn (trl-methods.md §6.4): groups with reward spread go in, groups
 * without it are swapped for stored ones. The logged reward metrics still describe the fresh
 * batch, as in TRL. Over several ranks every rank holds the whole batch and its own copy of the
 * buffer, and makes the same decisions from the same bytes (the draws are seeded by the batch
 * number), so the copies stay alike; rank 0 alone logs. */
static int replay(GrpoRun *r, GrpoBatch *b, const float *group_std, int64_t index) {
    ReplayStats st;
    int rc = replay_buffer_update(&r->replay, b, group_std, (uint64_t)r->cfg->seed, (uint64_t)index,
                                  &st);
    if (dist_agree(rc) != 0) return rc != 0 ? err_prefix("replay buffer") : -1;
    if (!dist_is_root()) return 0;
    step_metrics_add(&r->gt.metrics, "replay/num_replaced", st.num_replaced);
    step_metrics_add(&r->gt.metrics, "replay/buffer_size", st.buffer_size);
    step_metrics_add(&r->gt.metrics, "replay/mean_score", st.mean_score);
    return 0;
}

static int save_replay(void *ctx, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/replay_buffer.safetensors", dir);
    return replay_buffer_save(ctx, path);
}

/* Generation batch number `index` (counted over the whole run): its prompts, generated,
 * scored and queued. Collective: the ranks share the generation (grpo_rollout), and every rank
 * queues the whole batch; rank 0 alone adds the generation metrics, which describe the whole
 * batch. */
static int add_generation(GrpoRun *r, int64_t index) {
    int64_t epoch = index / r->generations_per_epoch, pos = index % r->generations_per_epoch;
    if (epoch != r->order_epoch) {
        if (r->g->shuffle_dataset)
            shuffle(r->order, r->train.n, r->cfg->seed, epoch);
        else
            for (size_t i = 0; i < r->train.n; i++)
                r->order[i] = i;
        r->order_epoch = epoch;
    }
    const size_t *idx = r->order + pos * r->prompts_per_generation;
    GrpoBatch b;
    float *group_std = xmalloc((size_t)r->prompts_per_generation * sizeof *group_std);
    json_t *state = state_for_rewards(r);
    trainer_release_activations(&r->tr); /* generation's KV cache takes their place */
    int rc = grpo_rollout(&r->rollout, &r->train, idx, r->prompts_per_generation,
                          r->g->num_generations, (uint64_t)index, state, true,
                          dist_is_root() ? &r->gt.metrics : NULL, true, &b, group_std, &r->times);
    json_decref(state);
    if (rc == 0) {
        double t0 = now_seconds();
        rc = grpo_trainer_logprobs(&r->gt, &b);
        r->train_s += now_seconds() - t0;
        if (rc == 0 && r->replay.capacity > 0) rc = replay(r, &b, group_std, index);
        if (rc == 0)
            grpo_trainer_add(&r->gt, &b);
        else
            grpo_batch_free(&b);
    }
    free(group_std);
    return rc;
}

/* Evaluation: G_eval completions for every held-out prompt, scored, their metrics logged with
 * the eval_ prefix. Over several ranks, evaluation batch k is rank k % world's alone (whole
 * batches: its draws are the batch's own, whoever makes them), and rank 0 logs the mean over
 * every rank's batches, as one process would over all of them. */
static int evaluate(GrpoRun *r, json_t *entry) {
    int G = r->g->num_generations_eval, per = r->cfg->micro_batch_size / G;
    if (per < 1) per = 1;
    StepMetrics metrics = {0};
    json_t *state = state_for_rewards(r);
    size_t *idx = xmalloc((size_t)per * sizeof *idx);
    int rc = 0;
    size_t stride = (size_t)per * (size_t)dist_size();
    for (size_t first = (size_t)per * (size_t)dist_rank(); first < r->held_out.n && rc == 0;
         first += stride) {
        int n = (int)(r->held_out.n - first < (size_t)per ? r->held_out.n - first : (size_t)per);
        for (int i = 0; i < n; i++)
            idx[i] = first + (size_t)i;
        GrpoBatch b;
        float *group_std = xmalloc((size_t)n * sizeof *group_std);
        rc = grpo_rollout(&r->rollout, &r->held_out, idx, n, G, (uint64_t)-1 - first, state, false,
                          &metrics, false, &b, group_std, NULL);
        free(group_std);
        if (rc == 0) grpo_batch_free(&b);
    }
    free(idx);
    json_decref(state);
    if (dist_agree(rc) != 0) return -1;
    step_metrics_flush_ranks(&metrics, entry, "eval_");
    return 0;
}

/* The wall time of generation, rewards and training per step, averaged over the steps since
 * the last metrics line: the split of each logged step, where the closing `done:` line gives only
 * means over the whole run. */
static void log_split(GrpoRun *r, json_t *entry) {
    double steps = r->tr.step > r->logged_step ? (double)(r->tr.step - r->logged_step) : 1;
    json_object_set_new(entry, "time/generation",
                        json_real((r->times.generate_s - r->logged_times.generate_s) / steps));
    json_object_set_new(entry, "time/rewards",
                        json_real((r->times.reward_s - r->logged_times.reward_s) / steps));
    json_object_set_new(entry, "time/training",
                        json_real((r->train_s - r->logged_train_s) / steps));
    r->logged_times = r->times;
    r->logged_train_s = r->train_s;
    r->logged_step = r->tr.step;
}

static int run_loop(GrpoRun *r, CheckpointTarget *target, json_t *log_history,
                    MetricsFile *metrics) {
    const TrainConfig *cfg = r->cfg;
    const GrpoConfig *g = r->g;
    int generate_every = g->steps_per_generation * g->num_iterations;
    /* a resumed run regenerates from the first generation batch its step has not used up */
    int64_t next_generation = r->tr.step * cfg->gradient_accumulation_steps / generate_every;
    r->gt.batches_added = next_generation; /* the row shuffles continue where they were */
    r->gt.metrics.num_tokens = last_logged(log_history, "num_tokens");
    double start = now_seconds(), loss_sum = 0;
    int64_t loss_count = 0, first_step = r->tr.step;
    r->first_step = first_step;
    r->logged_step = first_step;
    char note[96] = "";
    bool tty = isatty(fileno(r->log));
    BadSteps bad = bad_steps_init(cfg->max_consecutive_bad_steps, log_history);
    while (r->tr.step < r->total) {
        double step_start = now_seconds();
        while (grpo_trainer_queued(&r->gt) < grpo_trainer_window(&r->gt))
            if (add_generation(r, next_generation++) != 0) return -1;
        StepStats st;
        double t0 = now_seconds();
        int step_rc = grpo_trainer_step(&r->gt, &st);
        if (step_rc < 0) return -1; /* over several ranks, trainer_step agreed on it */
        /* every rank sees the same step results, so all stop here together */
        if (bad_steps_record(&bad, step_rc, r->tr.step, &st, r->log) != 0) return dist_agree(-1);
        r->train_s += now_seconds() - t0;
        if (step_rc == 0) { /* a skipped step has no loss */
            loss_sum += st.loss, loss_count++;
            r->loss_sum += st.loss, r->loss_steps++;
        }
        r->loop_s = now_seconds() - start;
        double ep = (double)r->tr.step / (double)r->steps_per_epoch;
        if (r->tr.step % cfg->logging_steps == 0 || r->tr.step == r->total) {
            json_t *entry = json_object();
            double mean_loss = loss_count ? loss_sum / (double)loss_count : NAN;
            json_object_set_new(entry, "loss", json_real_or_null(mean_loss));
            json_object_set_new(entry, "grad_norm", json_real_or_null(st.grad_norm));
            json_object_set_new(entry, "learning_rate", json_real(st.lr));
            step_metrics_flush_ranks(&r->gt.metrics, entry, "");
            bad_steps_log(&bad, entry);
            json_object_set_new(entry, "step_time", json_real(now_seconds() - step_start));
            log_split(r, entry);
            json_object_set_new(entry, "epoch", json_real(ep));
            json_object_set_new(entry, "step", json_integer(r->tr.step));
            log_entry(metrics, log_history, entry);
            metric_note(entry, note, sizeof note);
            if (!tty)
                fprintf(r->log,
                        "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  epoch %.2f%s\n",
                        (long long)r->tr.step, (long long)r->total, mean_loss, st.grad_norm, st.lr,
                        ep, note);
            json_decref(entry);
            loss_sum = 0, loss_count = 0;
        }
        if (tty)
            show_progress(r->log, r->tr.step, r->total, first_step, st.loss, st.lr, note,
                          (double)r->times.generated_tokens / (now_seconds() - start),
                          now_seconds() - start);
        bool eval_now = r->held_out.n && (cfg->eval_steps > 0 ? r->tr.step % cfg->eval_steps == 0
                                                              : r->tr.step == r->total);
        if (eval_now) {
            json_t *entry = json_object();
            int rc = evaluate(r, entry);
            if (rc == 0) {
                json_object_set_new(entry, "epoch", json_real(ep));
                json_object_set_new(entry, "step", json_integer(r->tr.step));
                log_entry(metrics, log_history, entry);
                const json_t *rw = json_object_get(entry, "eval_reward");
                fprintf(r->log, "%sstep %lld/%lld  eval_reward %.4f (%zu held-out prompts)\n",
                        tty ? "\n" : "", (long long)r->tr.step, (long long)r->total,
                        rw ? json_number_value(rw) : NAN, r->held_out.n);
            }
            json_decref(entry);
            if (rc != 0) return -1;
        }
        /* a signal: this step is done; save it (whatever save_steps says) and stop. Over
         * several ranks, one rank's signal stops them all after the same step. */
        int sig = stop_signal_agree();
        if (sig || (cfg->save_steps > 0 && r->tr.step % cfg->save_steps == 0)) {
            json_t *state = trainer_state(cfg, r->tr.step, ep, r->total, log_history);
            int rc = checkpoint_save(target, &r->tr, state);
            json_decref(state);
            if (rc != 0) return -1;
            if (!tty || sig)
                fprintf(r->log, "%ssaved checkpoint-%lld\n", tty ? "\n" : "",
                        (long long)r->tr.step);
        }
        if (sig) return dist_agree(stop_signal_error(sig, r->tr.step));
    }
    if (tty) fputc('\n', r->log);
    return 0;
}

/* On resume: rank 0 reads the replay buffer the checkpoint `dir` holds, and every rank gets a
 * copy of it (the others never read output_dir). Collective. */
static int restore_replay(GrpoRun *r, const char *dir) {
    int rc = 0;
    if (dist_is_root()) {
        char path[4200];
        snprintf(path, sizeof path, "%s/replay_buffer.safetensors", dir);
        if (file_exists(path))
            rc = replay_buffer_load(&r->replay, path);
        else
            fprintf(r->log, "warning: %s has no replay buffer; it starts empty\n", dir);
    }
    if (dist_agree(rc) != 0) return -1;
    replay_buffer_bcast(&r->replay);
    if (r->replay.size) fprintf(r->log, "replay buffer: %d groups restored\n", r->replay.size);
    return 0;
}

static int train(GrpoRun *r, Model *m, LoraAdapter *lora, TrainOutcome *out) {
    const TrainConfig *cfg = r->cfg;
    TrainerOptions opt = {.learning_rate = cfg->learning_rate,
                          .max_grad_norm = cfg->max_grad_norm,
                          .adamw = {cfg->adam_beta1, cfg->adam_beta2, cfg->adam_epsilon,
                                    cfg->weight_decay, optimizer_is_8bit(cfg->optimizer)},
                          .total_steps = r->total,
                          .gradient_checkpointing = cfg->gradient_checkpointing,
                          .disable_dropout = true,
                          .seed = (uint64_t)cfg->seed,
                          .zero1 = cfg->zero_stage == 1};
    lr_schedule_parse(cfg->lr_scheduler, &opt.schedule);
    opt.warmup_steps = cfg->warmup_steps >= 0 ? cfg->warmup_steps
                       : cfg->warmup_ratio >= 0
                           ? lr_warmup_steps_from_ratio(cfg->warmup_ratio, r->total)
                           : default_warmup(r->total);
    if (trainer_init(&r->tr, m, lora, &opt) != 0) return -1;
    json_t *log_history = json_array();
    /* the first agreement point: every rank got through its set-up (data, rewards, reference) */
    int rc = dist_agree(dist_is_root() ? make_dirs(cfg->output_dir) : 0);
    char resumed_from[4096] = "";
    if (rc == 0 && cfg->resume_from_checkpoint)
        rc = resume(cfg, &r->tr, &log_history, r->log, resumed_from, sizeof resumed_from);
    if (rc == 0 && cfg->resume_from_checkpoint && r->replay.capacity > 0)
        rc = restore_replay(r, resumed_from);
    MetricsFile metrics = {0};
    if (rc == 0)
        rc = dist_agree(
            dist_is_root() ? metrics_file_open(&metrics, cfg->output_dir, r->tr.step > 0) : 0);
    if (rc == 0) {
        fprintf(r->log,
                "GRPO: %zu prompts, %d per generation batch x %d completions, %lld steps (%lld per "
                "epoch), micro-batch %lld x %lld accumulation, %d iteration(s), loss %s, beta %g\n",
                r->train.n, r->prompts_per_generation, r->g->num_generations, (long long)r->total,
                (long long)r->steps_per_epoch, (long long)cfg->micro_batch_size,
                (long long)cfg->gradient_accumulation_steps, r->g->num_iterations,
                grpo_loss_type_name(r->g->loss_type), r->g->beta);
        log_optimizer_state(r->log, &r->tr);
        if (r->replay.capacity > 0)
            fprintf(r->log, "replay buffer: up to %d groups\n", r->replay.capacity);
        if (r->tr.world > 1)
            fprintf(r->log,
                    "%d processes: each generates and scores its share of the %d groups of a "
                    "generation batch and trains micro-batches of %lld; %s\n",
                    r->tr.world, r->prompts_per_generation, (long long)cfg->micro_batch_size,
                    r->tr.sharded ? "AdamW moments sharded over the ranks (zero_stage 1)"
                                  : "each rank keeps the whole optimizer state");
        grpo_trainer_init(&r->gt, r->g, &r->tr, r->ref, (int)cfg->micro_batch_size,
                          (int)cfg->gradient_accumulation_steps, (uint64_t)cfg->seed);
        r->gt.replay_on = r->replay.capacity > 0; /* replayed groups need their old log-probs */
        CheckpointTarget target = {.output_dir = cfg->output_dir,
                                   .model_dir = cfg->base_model,
                                   .tokenizer_dir = cfg->tokenizer_config,
                                   .save_total_limit = cfg->save_total_limit,
                                   .write_extra = r->replay.capacity > 0 ? save_replay : NULL,
                                   .extra_ctx = &r->replay};
        rc = run_loop(r, &target, log_history, &metrics);
        grpo_trainer_free(&r->gt);
    }
    metrics_file_close(&metrics);
    if (out) {
        *out = (TrainOutcome){.log_history = log_history,
                              .global_step = r->tr.step,
                              .max_steps = r->total,
                              .first_step = r->first_step,
                              .epoch = (double)r->tr.step / (double)r->steps_per_epoch,
                              .loss_sum = r->loss_sum,
                              .loss_steps = r->loss_steps,
                              .seconds = r->loop_s};
    } else {
        json_decref(log_history);
    }
    trainer_free(&r->tr);
    return rc;
}

/* Whether a reward function or a dataset transform is Python (module.fn). */
static bool uses_python(const TrainConfig *cfg) {
    for (size_t i = 0; i < json_array_size(cfg->grpo.reward_funcs); i++) {
        const json_t *spec = json_array_get(cfg->grpo.reward_funcs, i);
        const json_t *fn = json_is_object(spec) ? json_object_get(spec, "function") : spec;
        if (json_is_string(fn) && strncmp(json_string_value(fn), "builtin.", 8) != 0) return true;
    }
    for (int d = 0; d < cfg->n_datasets; d++)
        if (cfg->datasets[d].type && strchr(cfg->datasets[d].type, '.')) return true;
    for (int d = 0; d < cfg->n_test_datasets; d++)
        if (cfg->test_datasets[d].type && strchr(cfg->test_datasets[d].type, '.')) return true;
    return false;
}

/* Python modules are looked up in the working directory first (Axolotl's rule), then next to the
 * config file: `rlhf train examples/grpo.yaml` finds examples/rewards.py. */
static int python_search_path(const TrainConfig *cfg) {
    if (!uses_python(cfg)) return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", cfg->source);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0; /* the config is in the working directory */
    *slash = '\0';
    return py_embed_add_path(*dir ? dir : "/");
}

/* The test hook RLHF_TEST_SCRIPTED_COMPLETIONS=1 (generate_scripted): completions that cannot
 * depend on the policy's last bits, for the tests that compare one process with several. */
static bool scripted_completions(void) {
    const char *v = getenv("RLHF_TEST_SCRIPTED_COMPLETIONS");
    return v && strcmp(v, "1") == 0;
}

int grpo_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
             const TrainHooks *hooks, FILE *log) {
    GrpoRun r = {.cfg = cfg, .g = &cfg->grpo, .log = log, .order_epoch = -1};
    replay_buffer_init(&r.replay, cfg->grpo.replay_buffer_size);
    int32_t eos = -1, pad = 0;
    int rc = python_search_path(cfg);
    if (rc == 0) rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = grpo_dataset_load(&r.train, cfg, cfg->datasets, cfg->n_datasets, tok, log);
    if (rc == 0) rc = held_out_prompts(&r, tok);
    if (rc == 0) rc = plan_steps(&r);
    int n_funcs = r.g->n_reward_funcs;
    r.funcs = xcalloc((size_t)n_funcs, sizeof *r.funcs);
    if (rc == 0)
        rc = reward_funcs_open(r.funcs, r.g->reward_funcs, cfg->source,
                               hooks ? hooks->rewards : NULL);
    bool funcs_open = rc == 0;
    /* the reference, only when the KL term needs one (beta != 0) */
    Model frozen;
    LoraAdapter initial = {0};
    ReferencePolicy ref;
    bool has_frozen = false, with_ref = r.g->beta != 0;
    if (rc == 0 && with_ref)
        rc = make_reference(cfg, m, lora, &frozen, &has_frozen, &initial, &ref, log);
    m->logit_temperature = (float)r.g->temperature; /* TRL scores at the sampling temperature */
    if (has_frozen) frozen.logit_temperature = m->logit_temperature;
    if (rc == 0) {
        const char **names = xmalloc((size_t)n_funcs * sizeof *names);
        for (int k = 0; k < n_funcs; k++)
            names[k] = r.funcs[k].name;
        r.rollout = (GrpoRollout){.cfg = r.g,
                                  .model = m,
                                  .tok = tok,
                                  .eos_id = eos,
                                  .pad_id = pad,
                                  .funcs = r.funcs,
                                  .seed = (uint64_t)cfg->seed,
                                  .log = log,
                                  .scripted = scripted_completions()};
        reward_metric_keys_init(&r.rollout.keys, names, n_funcs);
        free(names);
        r.order = xmalloc((r.train.n ? r.train.n : 1) * sizeof *r.order);
        r.ref = with_ref ? &ref : NULL;
        rc = train(&r, m, lora, hooks ? hooks->outcome : NULL);
        reward_metric_keys_free(&r.rollout.keys);
        packed_model_free(&r.rollout.packed);
        free(r.order);
    }
    if (rc == 0) {
        int64_t steps = r.total;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double gen = r.times.generate_s / (double)steps, rew = r.times.reward_s / (double)steps,
               trn = r.train_s / (double)steps;
        fprintf(log,
                "done: %lld steps; per step: generation %.2f s, rewards %.3f s, training %.2f s; "
                "peak memory %.0f MB\n",
                (long long)steps, gen, rew, trn, ru.ru_maxrss / 1024.0);
    }
    if (funcs_open) reward_funcs_close(r.funcs, n_funcs);
    free(r.funcs);
    if (has_frozen) model_free(&frozen);
    lora_free(&initial);
    grpo_dataset_free(&r.held_out);
    grpo_dataset_free(&r.train);
    replay_buffer_free(&r.replay);
    return rc;
}
