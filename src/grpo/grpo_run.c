#include "grpo/grpo_run.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/test_hooks.h"
#include "data/grpo_dataset.h"
#include "data/sft_dataset.h"
#include "dist/dist.h"
#include "grpo/completion_log.h"
#include "grpo/grpo_rollout.h"
#include "grpo/grpo_trainer.h"
#include "grpo/replay_buffer.h"
#include "grpo/vllm_server.h"
#include "python/py_embed.h"
#include "rewards/reward_registry.h"
#include "train/data_order.h"
#include "train/metrics_log.h"
#include "train/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Everything one GRPO run holds: the training loop's StepSource context.
 *
 * Invariants:
 *  1. Generation batch number k (counted over the whole run, from 0) takes prompts
 *     order[(k % generations_per_epoch) x prompts_per_generation ...] of epoch
 *     k / generations_per_epoch, and its draws are stream k: a resumed run regenerates the
 *     batches its checkpoint had not used up, from next_generation on, exactly.
 *  2. order holds epoch order_epoch's prompt order (-1: none yet).
 *  3. torch_draws (one process): torch_rng has made exactly TRL's draws from its global
 *     generator so far: one random64 per epoch begun, then per generation batch the sampling
 *     steps' exponentials and the row shuffle's randperm, in that order. A checkpoint keeps its
 *     state (TRL's rng_state.pth): a run resumed at a generation batch's end draws on as the
 *     uninterrupted one does. */
typedef struct {
    const TrainConfig *cfg;
    const GrpoConfig *g;
    GrpoDataset train, held_out;
    RewardFunc *funcs;
    ReferencePolicy *ref; /* beta != 0 only */
    GrpoRollout rollout;
    GrpoTrainer gt;
    Trainer *tr;         /* the loop's, from start on */
    ReplayBuffer replay; /* capacity 0: off */
    size_t *order;
    int64_t order_epoch;
    int64_t next_generation;
    int prompts_per_generation;
    int64_t generations_per_epoch, steps_per_epoch, total;
    RolloutTimes times;
    double train_s, step_start;
    double train_cpu_s;        /* CPU time of training (all threads), as train_s */
    RolloutTimes logged_times; /* times, train_s and the step at the last metrics line */
    double logged_train_s, logged_train_cpu_s;
    int64_t logged_step;
    /* torch's global generator as TRL's GRPOTrainer leaves it after set_seed(seed) (one
     * process only; see grpo_run): the DataLoader's draw at each epoch, the sampling of every
     * generation batch and its row shuffle, in TRL's order (invariant 3) */
    TorchGenerator torch_rng;
    bool torch_draws;
    CompletionLog completions; /* trl.log_completions, rank 0 only */
    bool log_completions;
    FILE *log;
} GrpoRun;

/* Held-out prompts: test_datasets, or a val_set_size draw from the training prompts. */
static int held_out_prompts(GrpoRun *r, const Tokenizer *tok) {
    const TrainConfig *cfg = r->cfg;
    if (cfg->n_test_datasets)
        return grpo_dataset_load(&r->held_out, cfg, cfg->test_datasets, cfg->n_test_datasets, tok,
                                 r->log);
    size_t *order, n_val;
    if (data_order_validation_draw(r->train.n, cfg, &order, &n_val) != 0) return -1;
    if (order) grpo_dataset_split(&r->train, order, n_val, &r->held_out);
    free(order);
    return 0;
}

/* trl.max_prompt_length, as TRL up to 0.27 applied it (its tokenizer loaded with
 * truncation_side="left", prompts tokenised with truncation to max_prompt_length; TRL 1.x
 * dropped the key): a longer prompt keeps its last tokens, after the special tokens the
 * tokenizer put in front of a text prompt (a BOS), which truncation keeps. */
static void truncate_prompts(GrpoDataset *ds, int max, const Tokenizer *tok) {
    for (size_t i = 0; max > 0 && i < ds->n; i++) {
        int32_t *ids = ds->prompt_ids[i];
        int len = ds->prompt_lens[i], lead = 0;
        if (len <= max) continue;
        while (!ds->conversational && lead < len && lead < max - 1 &&
               tokenizer_is_special(tok, ids[lead]))
            lead++;
        memmove(ids + lead, ids + len - (max - lead), (size_t)(max - lead) * sizeof *ids);
        ds->prompt_lens[i] = max;
    }
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
    return json_pack("{s:I,s:I,s:f}", "global_step", (json_int_t)r->tr->step, "max_steps",
                     (json_int_t)r->total, "epoch",
                     (double)r->tr->step / (double)r->steps_per_epoch);
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

/* A checkpoint's GRPO state: the replay buffer, and torch's generator (invariant 3). */
static int save_extra(void *ctx, const char *dir) {
    GrpoRun *r = ctx;
    char path[4200];
    if (r->replay.capacity > 0) {
        snprintf(path, sizeof path, "%s/replay_buffer.safetensors", dir);
        if (replay_buffer_save(&r->replay, path) != 0) return -1;
    }
    if (!r->torch_draws) return 0;
    snprintf(path, sizeof path, "%s/torch_generator.json", dir);
    return torch_generator_save(&r->torch_rng, path);
}

/* Generation batch number `index` (invariant 1): its prompts, generated, scored and queued.
 * Collective: the ranks share the generation (grpo_rollout), and every rank queues the whole
 * batch; rank 0 alone adds the generation metrics, which describe the whole batch. */
static int add_generation(GrpoRun *r, int64_t index) {
    int64_t epoch = index / r->generations_per_epoch, pos = index % r->generations_per_epoch;
    if (epoch != r->order_epoch) {
        if (r->g->shuffle_dataset)
            data_order_shuffle_repeat_sampler(r->order, r->train.n, r->cfg->seed, epoch);
        else
            for (size_t i = 0; i < r->train.n; i++)
                r->order[i] = i;
        r->order_epoch = epoch;
    }
    /* iter(DataLoader) at the epoch's start draws its base seed from the global generator
     * (torch.utils.data _BaseDataLoaderIter: random_() of one int64, random64; invariant 3) */
    if (r->torch_draws && pos == 0) (void)torch_generator_random64(&r->torch_rng);
    GrpoBatch b;
    float *group_std = xmalloc((size_t)r->prompts_per_generation * sizeof *group_std);
    json_t *state = state_for_rewards(r);
    trainer_release_activations(r->tr); /* generation's KV cache takes their place */
    RolloutRequest req = {.ds = &r->train,
                          .idx = r->order + pos * r->prompts_per_generation,
                          .n_prompts = r->prompts_per_generation,
                          .group_size = r->g->num_generations,
                          .stream = (uint64_t)index,
                          .trainer_state = state,
                          .shared = true,
                          .training = true,
                          .metrics = dist_is_root() ? &r->gt.metrics : NULL,
                          .times = &r->times,
                          .log_rows = r->log_completions ? json_array() : NULL};
    int rc = grpo_rollout(&r->rollout, &req, &b, group_std);
    json_decref(state);
    if (rc == 0 && req.log_rows)
        completion_log_keep(&r->completions, req.log_rows); /* TRL keeps the latest batch's */
    else
        json_decref(req.log_rows);
    if (rc == 0) {
        double t0 = clock_seconds(), cpu0 = cpu_seconds();
        rc = grpo_trainer_logprobs(&r->gt, &b);
        r->train_s += clock_seconds() - t0;
        r->train_cpu_s += cpu_seconds() - cpu0;
        if (rc == 0 && r->replay.capacity > 0) rc = replay(r, &b, group_std, index);
        if (rc == 0)
            grpo_trainer_add(&r->gt, &b);
        else
            grpo_batch_free(&b);
    }
    free(group_std);
    return rc;
}

/* The loop's step: the generation batches the step needs (the policy does not move between two
 * optimizer steps, grpo_trainer.h), then the step over the queue. */
static int grpo_step(void *ctx, Trainer *tr, StepStats *st, double *tokens) {
    GrpoRun *r = ctx;
    r->step_start = clock_seconds();
    long generated = r->times.generated_tokens;
    while (grpo_trainer_queued(&r->gt) < grpo_trainer_window(&r->gt))
        if (add_generation(r, r->next_generation++) != 0) return -1;
    double t0 = clock_seconds(), cpu0 = cpu_seconds();
    int rc = grpo_trainer_step(&r->gt, st);
    /* TRL's SyncRefModelCallback.on_step_end: after the optimizer step, every
     * ref_model_sync_steps steps (tr->step counts this one already) */
    if (rc == 0 && r->g->sync_ref_model && tr->step % r->g->ref_model_sync_steps == 0)
        rc = train_reference_sync(r->ref, tr->model, r->g->ref_model_mixup_alpha);
    r->train_s += clock_seconds() - t0;
    r->train_cpu_s += cpu_seconds() - cpu0;
    *tokens += (double)(r->times.generated_tokens - generated); /* generated tokens/s */
    return rc;
}

/* The logging step's metrics, and trl.log_completions' table of the latest generation batch
 * (rank 0). A table that cannot be written is a warning: training goes on. */
static void grpo_flush(void *ctx, json_t *entry) {
    GrpoRun *r = ctx;
    step_metrics_flush_ranks(&r->gt.metrics, entry, "");
    if (r->log_completions && completion_log_write(&r->completions, r->tr->step, r->log) != 0)
        fprintf(r->log, "warning: trl.log_completions: %s\n", err_msg());
}

/* The step's wall time, and the time of generation, rewards and training per step averaged
 * over the steps since the last metrics line: the split of each logged step, where the closing
 * lines give only means over the whole run. */
static void grpo_timing(void *ctx, json_t *entry, int64_t step) {
    GrpoRun *r = ctx;
    json_object_set_new(entry, "step_time", json_real(clock_seconds() - r->step_start));
    double steps = step > r->logged_step ? (double)(step - r->logged_step) : 1;
    json_object_set_new(entry, "time/generation",
                        json_real((r->times.generate_s - r->logged_times.generate_s) / steps));
    json_object_set_new(entry, "time/rewards",
                        json_real((r->times.reward_s - r->logged_times.reward_s) / steps));
    json_object_set_new(entry, "time/training",
                        json_real((r->train_s - r->logged_train_s) / steps));
    /* CPU seconds of the same two phases (in-process generation only): what they cost whatever
     * the machine's load */
    json_object_set_new(
        entry, "cpu_time/generation",
        json_real((r->times.generate_cpu_s - r->logged_times.generate_cpu_s) / steps));
    json_object_set_new(entry, "cpu_time/training",
                        json_real((r->train_cpu_s - r->logged_train_cpu_s) / steps));
    r->logged_times = r->times;
    r->logged_train_s = r->train_s;
    r->logged_train_cpu_s = r->train_cpu_s;
    r->logged_step = step;
}

/* Evaluation: G_eval completions for every held-out prompt, scored, their metrics logged with
 * the eval_ prefix. Over several ranks, evaluation batch k is rank k % world's alone (whole
 * batches: its draws are the batch's own, whoever makes them), and rank 0 logs the mean over
 * every rank's batches, as one process would over all of them. */
static int grpo_evaluate(void *ctx, Model *m, json_t *entry) {
    GrpoRun *r = ctx;
    (void)m; /* the rollout's model is the one trained */
    int G = r->g->num_generations_eval, per = r->cfg->micro_batch_size / G;
    if (per < 1) per = 1;
    StepMetrics metrics = {0};
    json_t *state = state_for_rewards(r);
    size_t *idx = xmalloc((size_t)per * sizeof *idx);
    int rc = 0;
    /* on a generation server over several ranks, every batch is shared as a training batch
     * (rank 0 asks the server for it, each rank scores its run), and rank 0 alone adds the
     * metrics of the whole batch: the same completions and means */
    bool shared = r->g->vllm_server_url && dist_size() > 1;
    size_t stride = (size_t)per * (shared ? 1 : (size_t)dist_size());
    for (size_t first = shared ? 0 : (size_t)per * (size_t)dist_rank();
         first < r->held_out.n && rc == 0; first += stride) {
        int n = (int)(r->held_out.n - first < (size_t)per ? r->held_out.n - first : (size_t)per);
        for (int i = 0; i < n; i++)
            idx[i] = first + (size_t)i;
        GrpoBatch b;
        float *group_std = xmalloc((size_t)n * sizeof *group_std);
        RolloutRequest req = {.ds = &r->held_out,
                              .idx = idx,
                              .n_prompts = n,
                              .group_size = G,
                              .stream = (uint64_t)-1 - first,
                              .trainer_state = state,
                              .shared = shared,
                              .metrics = !shared || dist_is_root() ? &metrics : NULL};
        /* evaluation samples from its own streams: training's draws stay TRL's whether or not
         * the run evaluates */
        TorchGenerator *train_rng = r->rollout.torch_rng;
        r->rollout.torch_rng = NULL;
        rc = grpo_rollout(&r->rollout, &req, &b, group_std);
        r->rollout.torch_rng = train_rng;
        free(group_std);
        if (rc == 0) grpo_batch_free(&b);
    }
    free(idx);
    json_decref(state);
    if (dist_agree(rc) != 0) return -1;
    step_metrics_flush_ranks(&metrics, entry, "eval_");
    /* TRL logs its training token counter in eval mode too: eval_num_tokens is the tokens
     * trained on so far, over all ranks. */
    double tokens = r->gt.metrics.num_tokens;
    dist_allreduce_sum_f64(&tokens, 1);
    json_object_set_new(entry, "eval_num_tokens", json_real(tokens));
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

/* The loop's start: the replay buffer a resumed run had, the banner, and the GRPO trainer,
 * continuing where the checkpoint was (invariant 1; the row shuffles follow batches_added). */
static int grpo_start(void *ctx, Trainer *tr, const json_t *log_history, const char *resumed_from,
                      FILE *log) {
    GrpoRun *r = ctx;
    const TrainConfig *cfg = r->cfg;
    r->tr = tr;
    /* every rank restores (collective), though only rank 0 knows the directory */
    if (cfg->resume_from_checkpoint && r->replay.capacity > 0 &&
        restore_replay(r, resumed_from) != 0)
        return -1;
    if (cfg->resume_from_checkpoint && r->torch_draws && resumed_from[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/torch_generator.json", resumed_from);
        if (!file_exists(path))
            fprintf(log,
                    "warning: %s has no torch_generator.json; sampling goes on from the seed's "
                    "generator, not where the interrupted run was\n",
                    resumed_from);
        else if (torch_generator_load(&r->torch_rng, path) != 0)
            return err_prefix("resuming from %s", resumed_from);
    }
    fprintf(log,
            "GRPO: %zu prompts, %d per generation batch x %d completions, %lld steps (%lld per "
            "epoch), micro-batch %lld x %lld accumulation, %d iteration(s), loss %s, beta %g\n",
            r->train.n, r->prompts_per_generation, r->g->num_generations, (long long)r->total,
            (long long)r->steps_per_epoch, (long long)cfg->micro_batch_size,
            (long long)cfg->gradient_accumulation_steps, r->g->num_iterations,
            grpo_loss_type_name(r->g->loss_type), r->g->beta);
    train_loop_log_optimizer(log, tr);
    if (r->replay.capacity > 0)
        fprintf(log, "replay buffer: up to %d groups\n", r->replay.capacity);
    if (tr->world > 1)
        fprintf(log,
                "%d processes: each generates and scores its share of the %d groups of a "
                "generation batch and trains micro-batches of %lld; %s\n",
                tr->world, r->prompts_per_generation, (long long)cfg->micro_batch_size,
                tr->sharded ? "AdamW moments sharded over the ranks (zero_stage 1)"
                            : "each rank keeps the whole optimizer state");
    grpo_trainer_init(&r->gt, r->g, tr, r->ref, (int)cfg->micro_batch_size,
                      (int)cfg->gradient_accumulation_steps, (uint64_t)cfg->seed);
    r->gt.replay_on = r->replay.capacity > 0; /* replayed groups need their old log-probs */
    r->gt.torch_rng = r->torch_draws ? &r->torch_rng : NULL;
    int generate_every = r->g->steps_per_generation * r->g->num_iterations;
    r->next_generation = tr->step * cfg->gradient_accumulation_steps / generate_every;
    r->gt.batches_added = r->next_generation; /* the row shuffles continue where they were */
    r->gt.metrics.num_tokens = metrics_last_logged(log_history, "num_tokens");
    r->logged_step = tr->step;
    r->log_completions = r->g->log_completions && dist_is_root();
    if (r->log_completions &&
        completion_log_open(&r->completions, cfg->output_dir, resumed_from[0] != '\0',
                            r->g->num_completions_to_print, (uint64_t)cfg->seed) != 0)
        return -1;
    return 0;
}

/* Whether a reward function, the rollout function or a dataset transform is Python
 * (module.fn). */
static bool uses_python(const TrainConfig *cfg) {
    if (cfg->grpo.rollout_func) return true;
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

int grpo_python_search_path(const TrainConfig *cfg) {
    if (!uses_python(cfg)) return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", cfg->source);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0; /* the config is in the working directory */
    *slash = '\0';
    return py_embed_add_path(*dir ? dir : "/");
}

int grpo_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
             const RewardCallbacks *callbacks, void *rollout_callable, TrainOutcome *out,
             FILE *log) {
    GrpoRun r = {.cfg = cfg, .g = &cfg->grpo, .log = log, .order_epoch = -1};
    replay_buffer_init(&r.replay, cfg->grpo.replay_buffer_size);
    int32_t eos = -1, pad = 0;
    int rc = grpo_python_search_path(cfg);
    if (rc == 0) rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = grpo_dataset_load(&r.train, cfg, cfg->datasets, cfg->n_datasets, tok, log);
    if (rc == 0) rc = held_out_prompts(&r, tok);
    truncate_prompts(&r.train, r.g->max_prompt_length, tok);
    truncate_prompts(&r.held_out, r.g->max_prompt_length, tok);
    if (rc == 0) rc = plan_steps(&r);
    int n_funcs = r.g->n_reward_funcs;
    r.funcs = xcalloc((size_t)n_funcs, sizeof *r.funcs);
    if (rc == 0) rc = reward_funcs_open(r.funcs, r.g->reward_funcs, cfg->source, callbacks);
    bool funcs_open = rc == 0;
    PythonRollout *python = NULL; /* resolved before training: a bad name stops nothing midway */
    if (rc == 0 && r.g->rollout_func) {
        if (r.g->rollout_callback && !rollout_callable)
            rc = err_set("%s: key 'trl.rollout_func': {callback: %s} names a function an "
                         "embedding program passes (rlhf_trainer_set_python_rollout); none was",
                         cfg->source, r.g->rollout_func);
        if (rc == 0)
            rc = python_rollout_open(&python, r.g->rollout_func,
                                     r.g->rollout_callback ? rollout_callable : NULL, cfg, tok, eos,
                                     pad);
    }
    /* vllm_mode: server: reached before training, or refused; by rank 0 alone, which asks for
     * every rank's completions and pushes the weights (TRL's main process) */
    VllmServer *server = NULL;
    if (rc == 0 && r.g->vllm_server_url && dist_is_root()) rc = vllm_server_open(&server, r.g, log);
    /* the reference, only when the KL term needs one (beta != 0) */
    ReferencePolicy ref = {0};
    bool with_ref = r.g->beta != 0;
    if (rc == 0 && with_ref) rc = train_reference_open(&ref, cfg, m, lora, log);
    if (rc == 0 && r.g->sync_ref_model && train_reference_can_sync(&ref, lora) != 0)
        rc = err_prefix("%s: key 'trl.sync_ref_model'", cfg->source);
    if (rc == 0 && cfg->grpo_rng && !strcmp(cfg->grpo_rng, "torch") && dist_size() > 1)
        rc = err_set("%s: key 'grpo_rng': torch draws one process's sequence (TRL's); over %d "
                     "ranks use streams",
                     cfg->source, dist_size());
    m->logit_temperature = (float)r.g->temperature; /* TRL scores at the sampling temperature */
    if (ref.owned_model) ref.owned_model->logit_temperature = m->logit_temperature;
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
                                  .scripted = test_hook_scripted_completions(),
                                  .python = python,
                                  .server = server};
        /* One process: torch's global generator as GRPOTrainer.__init__ leaves it
         * (accelerate's set_seed(seed, device_specific=True): seed + process index 0), so the
         * same seed samples TRL's completions. Several ranks keep per-completion streams, which
         * give the same completions on any number of ranks (TRL's processes each seed
         * seed + rank, so no run of theirs on N processes equals one on 1). */
        r.torch_draws = dist_size() == 1 && (!cfg->grpo_rng || !strcmp(cfg->grpo_rng, "torch"));
        if (r.torch_draws) {
            torch_generator_seed(&r.torch_rng, cfg->seed);
            r.rollout.torch_rng = &r.torch_rng;
        }
        reward_metric_keys_init(&r.rollout.keys, names, n_funcs);
        free(names);
        r.order = xmalloc((r.train.n ? r.train.n : 1) * sizeof *r.order);
        r.ref = with_ref ? &ref : NULL;
        StepSource src = {.ctx = &r,
                          .total_steps = r.total,
                          .steps_per_epoch = r.steps_per_epoch,
                          .start = grpo_start,
                          .step = grpo_step,
                          .flush_metrics = grpo_flush,
                          .add_timing = grpo_timing,
                          .evaluate = grpo_evaluate,
                          .n_eval = r.held_out.n,
                          .eval_key = "eval_reward",
                          .eval_items = "prompts",
                          .write_extra = r.replay.capacity > 0 || r.torch_draws ? save_extra : NULL,
                          .extra_ctx = &r};
        rc = train_loop_run(cfg, m, lora, &src, out, log);
        grpo_trainer_free(&r.gt);
        completion_log_close(&r.completions);
        reward_metric_keys_free(&r.rollout.keys);
        packed_model_free(&r.rollout.packed);
        free(r.order);
    }
    if (rc == 0) {
        double steps = (double)r.total;
        fprintf(log, "GRPO per step: generation %.2f s, rewards %.3f s, training %.2f s\n",
                r.times.generate_s / steps, r.times.reward_s / steps, r.train_s / steps);
    }
    python_rollout_close(python);
    vllm_server_close(server);
    if (funcs_open) reward_funcs_close(r.funcs, n_funcs);
    free(r.funcs);
    train_reference_close(&ref); /* a reference moved to the device leaves it first */
    grpo_dataset_free(&r.held_out);
    grpo_dataset_free(&r.train);
    replay_buffer_free(&r.replay);
    return rc;
}
