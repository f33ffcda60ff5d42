/* GRPO training against TRL 1.9's own GRPOTrainer (tests/fixtures/grpo_train, made by
 * tools/reference/make_grpo_train_fixtures.py): the generation batches TRL trained on (its prompt
 * order, its completions after the EOS cut, its rewards, fed in rather than sampled) go through
 * rlhf.c's advantages, old/reference log-probs, micro-steps and optimizer; every generation's
 * advantages and log-probs, every step's logged loss, grad_norm, learning rate and GRPO metric,
 * and the final weights must match TRL's. TRL's row shuffle was the identity in the fixtures, so
 * it is off here. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "config/grpo_config.h"
#include "harness.h"
#include "methods/grpo_advantages.h"
#include "model/reference_policy.h"
#include "grpo/grpo_metrics.h"
#include "grpo/grpo_trainer.h"
#include "trained_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double worst_logged, worst_advantage, worst_logp;

/* The trl: block equal to the fixture's GRPOConfig. */
static json_t *trl_block(const json_t *c) {
    static const char *const keys[] = {"loss_type",
                                       "beta",
                                       "epsilon",
                                       "epsilon_high",
                                       "delta",
                                       "scale_rewards",
                                       "num_iterations",
                                       "num_generations",
                                       "steps_per_generation",
                                       "temperature",
                                       "max_completion_length",
                                       "reward_weights",
                                       "importance_sampling_level",
                                       "multi_objective_aggregation",
                                       "mask_truncated_completions",
                                       "top_entropy_quantile",
                                       "use_bias_correction_kl"};
    json_t *trl = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(c, keys[i]);
        if (v && !json_is_null(v)) json_object_set(trl, keys[i], v);
    }
    json_object_set(trl, "reward_funcs", json_object_get(c, "reward_funcs"));
    return trl;
}

static int int_at(const json_t *a, size_t i) {
    return (int)json_integer_value(json_array_get(a, i));
}

static int longest(const json_t *rows) {
    int w = 0;
    for (size_t r = 0; r < json_array_size(rows); r++)
        if ((int)json_array_size(json_array_get(rows, r)) > w)
            w = (int)json_array_size(json_array_get(rows, r));
    return w;
}

/* One of TRL's generation batches as a GrpoBatch, with its rewards (NaN for None). */
static void load_generation(const json_t *gen, int G, int32_t pad, GrpoBatch *b, bool *truncated,
                            double **rewards, int *n_funcs) {
    const json_t *prompts = json_object_get(gen, "prompt_ids"),
                 *comps = json_object_get(gen, "completion_ids"),
                 *masks = json_object_get(gen, "completion_mask"),
                 *rw = json_object_get(gen, "rewards");
    int n = (int)json_array_size(prompts);
    grpo_batch_alloc(b, n, G, longest(prompts), longest(comps), pad, false, false);
    *n_funcs = (int)json_array_size(json_array_get(rw, 0));
    *rewards = malloc((size_t)n * *n_funcs * sizeof **rewards);
    for (int r = 0; r < n; r++) {
        const json_t *p = json_array_get(prompts, (size_t)r), *c = json_array_get(comps, (size_t)r),
                     *m = json_array_get(masks, (size_t)r);
        int lp = (int)json_array_size(p), lc = (int)json_array_size(c);
        b->prompt_len[r] = lp, b->completion_len[r] = lc;
        for (int t = 0; t < lp; t++) {
            size_t at = (size_t)r * b->prompt_w + (b->prompt_w - lp) + t;
            b->prompt_ids[at] = int_at(p, (size_t)t), b->prompt_mask[at] = 1;
        }
        for (int t = 0; t < lc; t++) {
            size_t at = (size_t)r * b->completion_w + t;
            b->completion_ids[at] = int_at(c, (size_t)t);
            b->completion_mask[at] = (uint8_t)int_at(m, (size_t)t);
        }
        truncated[r] =
            json_is_true(json_array_get(json_object_get(gen, "is_truncated"), (size_t)r));
        for (int k = 0; k < *n_funcs; k++) {
            const json_t *v = json_array_get(json_array_get(rw, (size_t)r), (size_t)k);
            (*rewards)[(size_t)r * *n_funcs + k] = json_is_number(v) ? json_number_value(v) : NAN;
        }
    }
}

/* Log-probs against TRL's (where the loss mask is on: elsewhere TRL's values mean nothing). */
static void check_logps(const char *name, const char *what, const GrpoBatch *b, const float *mine,
                        const json_t *want) {
    if (!want || json_is_null(want)) return;
    CHECK(mine != NULL, "%s: TRL has %s, rlhf.c computed none", name, what);
    if (!mine) return;
    for (int r = 0; r < b->n_rows; r++)
        for (int t = 0; t < b->completion_len[r]; t++) {
            if (!b->completion_mask[(size_t)r * b->completion_w + t]) continue;
            double w =
                json_number_value(json_array_get(json_array_get(want, (size_t)r), (size_t)t));
            double g = mine[(size_t)r * b->completion_w + t];
            worst_logp = fmax(worst_logp, fabs(g - w) / fmax(fabs(w), 1e-3));
            CHECK(harness_close(g, w, 1e-4, 1e-5), "%s: %s row %d token %d: %.7g, TRL %.7g", name,
                  what, r, t, g, w);
        }
}

static void check_step(const char *name, int step, json_t *got, const json_t *want) {
    const char *key;
    json_t *w;
    json_object_foreach((json_t *)want, key, w) {
        if (strcmp(key, "epoch") == 0 || strcmp(key, "step") == 0) continue;
        json_t *g = json_object_get(got, key);
        CHECK(g != NULL, "%s step %d: no \"%s\"", name, step, key);
        if (!g) continue;
        double gv = json_number_value(g), wv = json_number_value(w);
        if (fabs(wv) > 1e-3) worst_logged = fmax(worst_logged, fabs(gv - wv) / fabs(wv));
        CHECK(harness_close(gv, wv, 1e-4, 2e-6), "%s step %d: %s = %.9g, TRL %.9g", name, step, key,
              gv, wv);
    }
    const char *gkey;
    json_t *gval;
    json_object_foreach(got, gkey, gval) { /* and nothing TRL did not log */
        CHECK(json_object_get(want, gkey) != NULL, "%s step %d: \"%s\" logged, TRL has none", name,
              step, gkey);
    }
}

static LrScheduleType schedule_of(const char *name) {
    LrScheduleType t = LR_LINEAR;
    lr_schedule_parse(name, &t);
    return t;
}

static void check_case(const char *name) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", harness_source_path("tests/fixtures/grpo_train"), name);
    snprintf(path, sizeof path, "%s/case.json", dir);
    json_t *ref;
    if (json_load_path(path, &ref) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    worst_logged = worst_advantage = worst_logp = 0;
    const json_t *c = json_object_get(ref, "config");
    int mb = (int)json_integer_value(json_object_get(c, "per_device_train_batch_size"));
    int ga = (int)json_integer_value(json_object_get(c, "gradient_accumulation_steps"));
    int max_steps = (int)json_integer_value(json_object_get(c, "max_steps"));
    json_t *trl = trl_block(c);
    GrpoConfig g;
    GrpoBatchShape shape = {mb, ga, false, 1};
    CHECK(grpo_config_read(&g, trl, false, json_number_value(json_object_get(c, "beta")), &shape,
                           name, 1, NULL) == 0,
          "%s: %s", name, err_msg());
    bool lora_case = !json_is_null(json_object_get(ref, "lora"));
    Model m, frozen;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/grpo_train/model")) == 0, "%s",
          err_msg());
    m.logit_temperature = (float)g.temperature;
    LoraAdapter lora = {0};
    ReferencePolicy refp;
    if (lora_case) {
        snprintf(path, sizeof path, "%s/initial_adapter", dir);
        CHECK(lora_load(&lora, &m.cfg, path) == 0, "%s", err_msg());
        m.lora = &lora;
        reference_policy_from_adapter(&refp, &m, &lora);
    } else if (g.beta != 0) {
        CHECK(model_load(&frozen, harness_source_path("tests/fixtures/grpo_train/model")) == 0,
              "%s", err_msg());
        frozen.logit_temperature = m.logit_temperature;
        reference_policy_from_model(&refp, &frozen);
    }
    TrainerOptions opt = {
        .learning_rate = json_number_value(json_object_get(c, "learning_rate")),
        .max_grad_norm = json_number_value(json_object_get(c, "max_grad_norm")),
        .adamw = {.beta1 = json_number_value(json_object_get(c, "adam_beta1")),
                  .beta2 = json_number_value(json_object_get(c, "adam_beta2")),
                  .eps = json_number_value(json_object_get(c, "adam_epsilon")),
                  .weight_decay = json_number_value(json_object_get(c, "weight_decay"))},
        .schedule = schedule_of(json_string_value(json_object_get(c, "lr_scheduler_type"))),
        .warmup_steps = json_integer_value(json_object_get(c, "warmup_steps")),
        .total_steps = max_steps,
        .disable_dropout = true};
    Trainer tr;
    CHECK(trainer_init(&tr, &m, lora_case ? &lora : NULL, &opt) == 0, "%s", err_msg());
    GrpoTrainer gt;
    grpo_trainer_init(&gt, &g, &tr, g.beta != 0 ? &refp : NULL, mb, ga, 1);
    gt.shuffle_rows = false;
    const json_t *gens = json_object_get(ref, "generation_batches"),
                 *history = json_object_get(ref, "log_history");
    const char *func_names[8];
    for (int k = 0; k < g.n_reward_funcs && k < 8; k++)
        func_names[k] = json_string_value(json_array_get(g.reward_funcs, (size_t)k));
    RewardMetricKeys keys;
    reward_metric_keys_init(&keys, func_names, g.n_reward_funcs);
    size_t next_gen = 0;
    for (int step = 1; step <= max_steps; step++) {
        while (grpo_trainer_queued(&gt) < ga && next_gen < json_array_size(gens)) {
            const json_t *gen = json_array_get(gens, next_gen++);
            GrpoBatch b;
            bool truncated[256];
            double *rewards;
            int n_funcs;
            load_generation(gen, g.num_generations, 1, &b, truncated, &rewards, &n_funcs);
            RewardTable t = {b.n_rows,         n_funcs,         g.num_generations,   rewards,
                             g.reward_weights, g.scale_rewards, g.normalize_then_sum};
            double fm[8], fs[8];
            RewardStats rs = {.func_mean = fm, .func_std = fs};
            float *group_std = malloc((size_t)(b.n_rows / g.num_generations) * sizeof(float));
            grpo_advantages(&t, b.advantages, group_std, &rs);
            const json_t *adv = json_object_get(gen, "advantages");
            for (int r = 0; r < b.n_rows; r++) {
                double w = json_number_value(json_array_get(adv, (size_t)r));
                worst_advantage = fmax(worst_advantage, fabs(b.advantages[r] - w));
                CHECK(harness_close(b.advantages[r], w, 1e-4, 1e-5),
                      "%s generation %zu row %d: advantage %.7g, TRL %.7g", name, next_gen - 1, r,
                      b.advantages[r], w);
            }
            grpo_metrics_generation(&gt.metrics, &b, truncated, &rs, &keys, true);
            CHECK(grpo_trainer_logprobs(&gt, &b) == 0, "%s: %s", name, err_msg());
            check_logps(name, "old log-probs", &b, b.old_logps,
                        json_object_get(gen, "old_per_token_logps"));
            check_logps(name, "reference log-probs", &b, b.ref_logps,
                        json_object_get(gen, "ref_per_token_logps"));
            grpo_trainer_add(&gt, &b);
            free(rewards);
            free(group_std);
        }
        StepStats st;
        CHECK(grpo_trainer_step(&gt, &st) == 0, "%s step %d: %s", name, step, err_msg());
        json_t *entry = json_object();
        json_object_set_new(entry, "loss", json_real(st.loss));
        json_object_set_new(entry, "grad_norm", json_real(st.grad_norm));
        json_object_set_new(entry, "learning_rate", json_real(st.lr));
        step_metrics_flush(&gt.metrics, entry, "");
        check_step(name, step, entry, json_array_get(history, (size_t)step - 1));
        json_decref(entry);
    }
    printf("%s: advantages within %.1e, log-probs %.1e, logged values %.2e of TRL's\n", name,
           worst_advantage, worst_logp, worst_logged);
    snprintf(path, sizeof path, "%s/final.safetensors", dir);
    double worst_weight;
    trained_weights_check(name, path, &m, lora_case ? &lora : NULL, &worst_weight);
    reward_metric_keys_free(&keys);
    grpo_trainer_free(&gt);
    trainer_free(&tr);
    if (lora_case)
        lora_free(&lora);
    else if (g.beta != 0)
        model_free(&frozen);
    model_free(&m);
    grpo_config_free(&g);
    json_decref(trl);
    json_decref(ref);
}

int main(void) {
    int n = harness_foreach_case("tests/fixtures/grpo_train", "case.json", check_case);
    CHECK(n >= 17, "%d cases", n);
    return harness_finish("test_grpo_train");
}
