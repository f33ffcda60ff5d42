#include "grpo/grpo_rollout.h"

#include "common/clock.h"
#include "common/error.h"
#include "dist/dist.h"
#include "methods/grpo_advantages.h"
#include "rollout/generate.h"
#include "grpo/grpo_share.h"
#include "grpo/vllm_server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The trl settings, with trl.generation_kwargs over them (TRL updates its generation kwargs so). */
static SamplingParams sampling_of(const GrpoConfig *c) {
#define OVER(x, base) (isnan(x) ? (base) : (x))
    return (SamplingParams){.do_sample = c->gen_do_sample != 0,
                            .temperature = (float)OVER(c->gen_temperature, c->temperature),
                            .top_k = c->gen_top_k >= 0 ? c->gen_top_k : c->top_k,
                            .top_p = (float)OVER(c->gen_top_p, c->top_p),
                            .min_p = (float)OVER(c->gen_min_p, c->min_p),
                            .repetition_penalty =
                                (float)OVER(c->gen_repetition_penalty, c->repetition_penalty)};
#undef OVER
}

/* generation_kwargs' stop strings: a completion ends with the token that completes one (kept, as
 * transformers' StopStringCriteria and vLLM's token ids keep it; TRL then decodes it with the
 * rest). The whole completion is decoded after each token: the text a stop string ends in may
 * be spread over several tokens. */
static bool stop_string_done(int job, const int32_t *ids, int len, void *ctx) {
    (void)job;
    const GrpoRollout *r = ctx;
    char *text;
    size_t n;
    if (tokenizer_decode(r->tok, ids, (size_t)len, false, &text, &n) != 0) return false;
    bool hit = false;
    size_t i;
    json_t *s;
    json_array_foreach(r->cfg->stop_strings, i, s) {
        size_t k = json_string_length(s);
        for (size_t at = 0; !hit && k <= n && at + k <= n; at++)
            hit = memcmp(text + at, json_string_value(s), k) == 0;
    }
    free(text);
    return hit;
}

/* Row i's prompt: the rollout function's (TRL's contract), else its dataset row's. */
static const int32_t *row_prompt(const GrpoDataset *ds, const size_t *idx, int G,
                                 const RolloutOutput *x, int i, int *len) {
    if (x && x->prompt_ids) return *len = x->prompt_lens[i], x->prompt_ids[i];
    return *len = ds->prompt_lens[idx[i / G]], ds->prompt_ids[idx[i / G]];
}

/* The generated completions as a GrpoBatch (TRL's padding and masks; a rollout function's
 * env_mask as the batch's). */
static void fill_batch(const GrpoRollout *r, const GrpoDataset *ds, const size_t *idx,
                       int n_prompts, int G, const Completion *comp, const RolloutOutput *x,
                       GrpoBatch *b, bool *truncated) {
    int rows = n_prompts * G, pw = 1, cw = 1, lp;
    for (int i = 0; i < rows; i++) {
        row_prompt(ds, idx, G, x, i, &lp);
        if (lp > pw) pw = lp;
        if (comp[i].len > cw) cw = comp[i].len;
    }
    grpo_batch_alloc(b, rows, G, pw, cw, r->pad_id, false, false);
    if (x && x->env_mask) b->env_mask = xcalloc((size_t)rows * (size_t)cw, 1);
    for (int i = 0; i < rows; i++) {
        const int32_t *prompt = row_prompt(ds, idx, G, x, i, &lp);
        int lc = comp[i].len;
        b->prompt_len[i] = lp, b->completion_len[i] = lc;
        for (int t = 0; t < lp; t++) {
            size_t at = (size_t)i * pw + (pw - lp) + t;
            b->prompt_ids[at] = prompt[t], b->prompt_mask[at] = 1;
        }
        for (int t = 0; b->env_mask && t < lc; t++)
            b->env_mask[(size_t)i * cw + t] = x->env_mask[i][t];
        int32_t last = lc ? comp[i].ids[lc - 1] : r->pad_id;
        truncated[i] = last != r->eos_id && last != r->pad_id;
        bool masked = truncated[i] && r->cfg->mask_truncated_completions;
        for (int t = 0; t < lc; t++) {
            b->completion_ids[(size_t)i * cw + t] = comp[i].ids[t];
            b->completion_mask[(size_t)i * cw + t] = !masked;
        }
    }
}

/* What reward functions receive (axolotl-config.md §12.1). */
static int reward_inputs(const GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int rows,
                         int G, const Completion *comp, const RolloutOutput *x, json_t **prompts,
                         json_t **completions, json_t **columns) {
    *prompts = json_array(), *completions = json_array(), *columns = json_object();
    for (int i = 0; i < rows; i++) {
        const json_t *row = json_array_get(ds->rows, idx[i / G]);
        json_array_append(*prompts, json_object_get(row, "prompt"));
        char *text;
        size_t len;
        if (tokenizer_decode(r->tok, comp[i].ids, (size_t)comp[i].len, true, &text, &len) != 0)
            return err_prefix("decoding completion %d", i);
        json_t *s = json_stringn(text, len);
        free(text);
        if (!s) s = json_string(""); /* invalid UTF-8 cannot happen: decode replaces it */
        if (ds->conversational) {
            json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", s);
            json_array_append_new(*completions, json_pack("[o]", msg));
        } else {
            json_array_append_new(*completions, s);
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)row, key, v) {
            if (!strcmp(key, "prompt") || !strcmp(key, "completion") ||
                !strcmp(key, "completion_ids"))
                continue;
            json_t *col = json_object_get(*columns, key);
            if (!col) json_object_set_new(*columns, key, col = json_array());
            /* a column some rows lack reads as None for them, as a datasets column would */
            while ((int)json_array_size(col) < i)
                json_array_append_new(col, json_null());
            json_array_append(col, v);
        }
    }
    const char *key;
    json_t *col;
    json_object_foreach(*columns, key, col) {
        while ((int)json_array_size(col) < rows)
            json_array_append_new(col, json_null());
    }
    /* a rollout function's extra fields, over a dataset column of the same name (TRL merges
     * them into the inputs the same way) */
    if (x && x->columns) json_object_update(*columns, x->columns);
    return 0;
}

static int score(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int rows, int G,
                 const Completion *comp, const RolloutOutput *x, const json_t *trainer_state,
                 double *rewards) {
    json_t *prompts, *completions, *columns;
    int rc = reward_inputs(r, ds, idx, rows, G, comp, x, &prompts, &completions, &columns);
    const int32_t **ids = xmalloc((size_t)rows * sizeof *ids);
    int *lens = xmalloc((size_t)rows * sizeof *lens);
    for (int i = 0; i < rows; i++)
        ids[i] = comp[i].ids, lens[i] = comp[i].len;
    RewardBatch rb = {rows, prompts, completions, ids, lens, columns, trainer_state};
    int K = r->cfg->n_reward_funcs;
    double *col = xmalloc((size_t)rows * sizeof *col);
    for (int k = 0; k < K && rc == 0; k++) {
        rc = r->funcs[k].score(r->funcs[k].impl, &rb, col);
        for (int i = 0; i < rows && rc == 0; i++)
            rewards[(size_t)i * K + k] = col[i];
    }
    free(col), free(ids), free(lens);
    json_decref(prompts), json_decref(completions), json_decref(columns);
    return rc;
}

/* The n_prompts x G completions of prompts idx[] from the sampler (scripted, on the server or
 * in-process), the first of them completion `first` of the generation batch (its stream
 * numbers the batch's), into comp. */
static int generate_rows(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int n_prompts,
                         int G, uint64_t stream, uint64_t first, const json_t *trainer_state,
                         Completion *comp) {
    const int32_t **prompts = xmalloc((size_t)n_prompts * sizeof *prompts);
    int *lens = xmalloc((size_t)n_prompts * sizeof *lens);
    for (int i = 0; i < n_prompts; i++)
        prompts[i] = ds->prompt_ids[idx[i]], lens[i] = ds->prompt_lens[idx[i]];
    GenerateOptions opt = {.max_new_tokens = r->cfg->gen_max_new_tokens > 0
                                                 ? r->cfg->gen_max_new_tokens
                                                 : r->cfg->max_completion_length,
                           .stop_after = r->cfg->stop_strings ? stop_string_done : NULL,
                           .stop_ctx = r,
                           .eos_ids = &r->eos_id,
                           .n_eos = r->eos_id >= 0,
                           .n_per_prompt = G,
                           .sampling = sampling_of(r->cfg),
                           .seed = r->seed * 0x9E3779B97F4A7C15ull + stream,
                           .first_stream = first,
                           .packed = &r->packed};
    int rc = 0;
    if (r->scripted) {
        generate_scripted(r->model->cfg.vocab_size, n_prompts, &opt, comp);
    } else if (r->cfg->vllm_server_url) { /* the same draws, on the server, with this step's
                                             weights (only rank 0 holds the connection) */
        json_int_t step = json_integer_value(json_object_get(trainer_state, "global_step"));
        rc = r->server ? 0 : err_set("vllm_mode: server: rank %d has no server", dist_rank());
        if (rc == 0) rc = vllm_server_sync(r->server, r->model, trainer_state ? step : -1);
        if (rc == 0) rc = vllm_server_generate(r->server, prompts, lens, n_prompts, &opt, comp);
    } else {
        opt.torch_rng = r->torch_rng;
        rc = generate(r->model, prompts, lens, n_prompts, &opt, comp);
    }
    free(prompts), free(lens);
    return rc == 0 ? 0 : err_prefix("GRPO generation");
}

/* Generates and scores the n_prompts x G completions of prompts idx[], the first of them
 * completion `first` of the generation batch, into comp and rewards (n_prompts x G rows of
 * K). Nothing to do for a rank whose share is empty. */
static int generate_and_score(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx,
                              int n_prompts, int G, uint64_t stream, uint64_t first,
                              const json_t *trainer_state, Completion *comp, double *rewards,
                              RolloutTimes *times, RolloutOutput *x) {
    int rows = n_prompts * G;
    if (rows == 0) return 0;
    if (r->python) { /* the rollout function in the sampler's place (never shared: one rank) */
        double t0 = clock_seconds();
        if (python_rollout_run(r->python, r, ds, idx, n_prompts, G, stream, trainer_state, x) != 0)
            return -1;
        memcpy(comp, x->comp, (size_t)rows * sizeof *comp); /* comp owns the ids from here */
        free(x->comp);
        x->comp = NULL;
        double t1 = clock_seconds();
        int rc = score(r, ds, idx, rows, G, comp, x, trainer_state, rewards);
        if (times) times->generate_s += t1 - t0, times->reward_s += clock_seconds() - t1;
        return rc;
    }
    double t0 = clock_seconds(), cpu0 = cpu_seconds();
    if (generate_rows(r, ds, idx, n_prompts, G, stream, first, trainer_state, comp) != 0) return -1;
    double t1 = clock_seconds();
    if (times) times->generate_cpu_s += cpu_seconds() - cpu0;
    int rc = score(r, ds, idx, rows, G, comp, NULL, trainer_state, rewards);
    if (times) times->generate_s += t1 - t0, times->reward_s += clock_seconds() - t1;
    return rc;
}

/* A shared batch on the server over several ranks, as TRL's VLLMGeneration.generate in server
 * mode: rank 0 alone asks the server, for the whole batch in one request (TRL gathers every
 * process's prompts to the main process; here every rank knows them already), and each rank
 * receives its own run of rows [lo, hi) (TRL's broadcast, then each process's slice), which it
 * scores as in-process generation would have it do. Collective. */
static int server_generate_and_score(GrpoRollout *r, const RolloutRequest *req, int lo, int hi,
                                     Completion *comp, double *rewards) {
    int G = req->group_size, rows = req->n_prompts * G, K = r->cfg->n_reward_funcs;
    RolloutTimes *times = req->times;
    double t0 = clock_seconds();
    int rc = 0;
    if (dist_is_root())
        rc = generate_rows(r, req->ds, req->idx, req->n_prompts, G, req->stream, 0,
                           req->trainer_state, comp);
    if (dist_agree(rc) != 0) return -1; /* rank 0's error; the others: "rank 0 failed" */
    grpo_share_scatter_completions(comp, rows, lo * G, hi * G);
    double t1 = clock_seconds();
    if (hi > lo)
        rc = score(r, req->ds, req->idx + lo, (hi - lo) * G, G, comp + (size_t)lo * G, NULL,
                   req->trainer_state, rewards + (size_t)lo * G * K);
    if (times) times->generate_s += t1 - t0, times->reward_s += clock_seconds() - t1;
    return rc;
}

/* The whole batch's advantages and metrics from its completions and rewards. */
static void finish_batch(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int n_prompts,
                         int G, const Completion *comp, const RolloutOutput *x,
                         const double *rewards, StepMetrics *metrics, bool training, GrpoBatch *out,
                         float *group_std) {
    int rows = n_prompts * G, K = r->cfg->n_reward_funcs;
    bool *truncated = xmalloc((size_t)(rows ? rows : 1) * sizeof *truncated);
    fill_batch(r, ds, idx, n_prompts, G, comp, x, out, truncated);
    RewardTable t = {rows,
                     K,
                     G,
                     rewards,
                     r->cfg->reward_weights,
                     r->cfg->scale_rewards,
                     r->cfg->normalize_then_sum};
    double *fm = xmalloc((size_t)K * sizeof *fm), *fs = xmalloc((size_t)K * sizeof *fs);
    RewardStats rs = {.func_mean = fm, .func_std = fs};
    grpo_advantages(&t, out->advantages, group_std, &rs);
    if (rs.n_unscorable && !r->warned_unscorable) {
        fprintf(r->log,
                "warning: every reward function returned None for %d of %d completions; they "
                "get advantage 0\n",
                rs.n_unscorable, rows);
        r->warned_unscorable = true;
    }
    if (metrics) grpo_metrics_generation(metrics, out, truncated, &rs, &r->keys, training);
    free(fm), free(fs);
    free(truncated);
}

/* A decoded text as a JSON string (special tokens skipped, as TRL's batch_decode). */
static json_t *decoded(const GrpoRollout *r, const int32_t *ids, int n) {
    char *text;
    size_t len;
    if (tokenizer_decode(r->tok, ids, (size_t)n, true, &text, &len) != 0) return NULL;
    json_t *s = json_stringn(text, len);
    free(text);
    return s;
}

/* trl.log_completions' rows of the whole batch (completion_log.h), appended to rows. */
static int log_rows(const GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int rows, int G,
                    const Completion *comp, const RolloutOutput *x, const double *rewards,
                    const GrpoBatch *b, json_t *out) {
    int K = r->cfg->n_reward_funcs;
    for (int i = 0; i < rows; i++) {
        int lp;
        const int32_t *p = row_prompt(ds, idx, G, x, i, &lp);
        json_t *prompt = decoded(r, p, lp);
        json_t *completion = decoded(r, comp[i].ids, comp[i].len);
        if (!prompt || !completion) {
            json_decref(prompt), json_decref(completion);
            return err_prefix("log_completions: decoding completion %d", i);
        }
        json_t *row = json_pack("{s:o,s:o}", "prompt", prompt, "completion", completion);
        for (int k = 0; k < K; k++) {
            double v = rewards[(size_t)i * K + k];
            json_object_set_new(row, r->funcs[k].name, isnan(v) ? json_null() : json_real(v));
        }
        json_object_set_new(row, "advantage", json_real(b->advantages[i]));
        json_array_append_new(out, row);
    }
    return 0;
}

int grpo_rollout(GrpoRollout *r, const RolloutRequest *req, GrpoBatch *out, float *group_std) {
    const GrpoDataset *ds = req->ds;
    const size_t *idx = req->idx;
    int n_prompts = req->n_prompts, G = req->group_size;
    bool shared = req->shared;
    RolloutTimes *times = req->times;
    int rows = n_prompts * G, K = r->cfg->n_reward_funcs, lo = 0, hi = n_prompts;
    if (shared) { /* this rank's run of whole groups */
        DistShards part;
        if (dist_shards_init(&part, (size_t)n_prompts) != 0) return -1;
        lo = (int)part.offset[dist_rank()], hi = (int)part.offset[dist_rank() + 1];
        dist_shards_free(&part);
    }
    Completion *comp = xcalloc((size_t)(rows ? rows : 1), sizeof *comp);
    size_t cells = (size_t)rows * (size_t)K;
    double *rewards = xmalloc((cells ? cells : 1) * sizeof *rewards);
    RolloutOutput x = {0}; /* what a rollout function adds (lo is 0 then: never shared) */
    int rc;
    if (shared && dist_size() > 1 && r->cfg->vllm_server_url && !r->python)
        rc = server_generate_and_score(r, req, lo, hi, comp, rewards);
    else
        rc = generate_and_score(r, ds, idx + lo, hi - lo, G, req->stream, (uint64_t)lo * G,
                                req->trainer_state, comp + (size_t)lo * G,
                                rewards + (size_t)lo * G * K, times, &x);
    /* a rank whose reward function failed must not leave the others in the gather */
    if (shared && dist_agree(rc) != 0) rc = -1;
    if (shared && rc == 0) grpo_share_completions(comp, rewards, rows, K, lo * G, hi * G);
    if (rc == 0)
        finish_batch(r, ds, idx, n_prompts, G, comp, &x, rewards, req->metrics, req->training, out,
                     group_std);
    if (rc == 0 && req->log_rows) {
        rc = log_rows(r, ds, idx, rows, G, comp, &x, rewards, out, req->log_rows);
        if (rc != 0) grpo_batch_free(out);
    }
    for (int i = 0; times && rc == 0 && i < rows; i++) /* the whole job's, for tokens/s */
        times->generated_tokens += comp[i].len;
    free(rewards);
    rollout_output_free(&x, rows);
    completions_free(comp, rows);
    free(comp);
    return rc;
}
