#include "train/grpo_rollout.h"

#include "common/error.h"
#include "methods/grpo_advantages.h"
#include "rollout/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static SamplingParams sampling_of(const GrpoConfig *c) {
    return (SamplingParams){.do_sample = true,
                            .temperature = (float)c->temperature,
                            .top_k = c->top_k,
                            .top_p = (float)c->top_p,
                            .min_p = (float)c->min_p,
                            .repetition_penalty = (float)c->repetition_penalty};
}

/* The generated completions as a GrpoBatch (TRL's padding and masks). */
static void fill_batch(const GrpoRollout *r, const GrpoDataset *ds, const size_t *idx,
                       int n_prompts, int G, const Completion *comp, GrpoBatch *b,
                       bool *truncated) {
    int rows = n_prompts * G, pw = 1, cw = 1;
    for (int i = 0; i < rows; i++) {
        if (ds->prompt_lens[idx[i / G]] > pw) pw = ds->prompt_lens[idx[i / G]];
        if (comp[i].len > cw) cw = comp[i].len;
    }
    grpo_batch_alloc(b, rows, G, pw, cw, r->pad_id, false, false);
    for (int i = 0; i < rows; i++) {
        size_t p = idx[i / G];
        int lp = ds->prompt_lens[p], lc = comp[i].len;
        b->prompt_len[i] = lp, b->completion_len[i] = lc;
        for (int t = 0; t < lp; t++) {
            size_t at = (size_t)i * pw + (pw - lp) + t;
            b->prompt_ids[at] = ds->prompt_ids[p][t], b->prompt_mask[at] = 1;
        }
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
                         int G, const Completion *comp, json_t **prompts, json_t **completions,
                         json_t **columns) {
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
    return 0;
}

static int score(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int rows, int G,
                 const Completion *comp, const json_t *trainer_state, double *rewards) {
    json_t *prompts, *completions, *columns;
    int rc = reward_inputs(r, ds, idx, rows, G, comp, &prompts, &completions, &columns);
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

int grpo_rollout(GrpoRollout *r, const GrpoDataset *ds, const size_t *idx, int n_prompts, int G,
                 uint64_t stream, const json_t *trainer_state, StepMetrics *metrics, bool training,
                 GrpoBatch *out, float *group_std, RolloutTimes *times) {
    int rows = n_prompts * G, K = r->cfg->n_reward_funcs;
    const int32_t **prompts = xmalloc((size_t)n_prompts * sizeof *prompts);
    int *lens = xmalloc((size_t)n_prompts * sizeof *lens);
    for (int i = 0; i < n_prompts; i++)
        prompts[i] = ds->prompt_ids[idx[i]], lens[i] = ds->prompt_lens[idx[i]];
    GenerateStats gs = {0};
    GenerateOptions opt = {.max_new_tokens = r->cfg->max_completion_length,
                           .eos_ids = &r->eos_id,
                           .n_eos = r->eos_id >= 0,
                           .n_per_prompt = G,
                           .sampling = sampling_of(r->cfg),
                           .seed = r->seed * 0x9E3779B97F4A7C15ull + stream,
                           .stats = &gs};
    Completion *comp = xcalloc((size_t)rows, sizeof *comp);
    double t0 = seconds();
    int rc = generate(r->model, prompts, lens, n_prompts, &opt, comp);
    double t1 = seconds();
    free(prompts), free(lens);
    if (rc != 0) {
        free(comp);
        return err_prefix("GRPO generation");
    }
    bool *truncated = xmalloc((size_t)rows * sizeof *truncated);
    fill_batch(r, ds, idx, n_prompts, G, comp, out, truncated);
    double *rewards = xmalloc((size_t)rows * K * sizeof *rewards);
    rc = score(r, ds, idx, rows, G, comp, trainer_state, rewards);
    double t2 = seconds();
    if (rc == 0) {
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
        grpo_metrics_generation(metrics, out, truncated, &rs, &r->keys, training);
        free(fm), free(fs);
    } else {
        grpo_batch_free(out);
    }
    if (times) {
        times->generate_s += t1 - t0;
        times->reward_s += t2 - t1;
        times->generated_tokens += gs.decode_tokens;
    }
    free(rewards);
    free(truncated);
    completions_free(comp, rows);
    free(comp);
    return rc;
}
