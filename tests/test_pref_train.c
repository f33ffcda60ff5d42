/* Preference training against TRL's own trainers (tests/fixtures/pref_train, made by
 * tools/reference/make_pref_train_fixtures.py with TRL 1.9): the same rows, loaded and tokenised
 * by rlhf.c, collate into TRL's micro-batches token for token; 3 optimizer steps then log TRL's
 * loss, grad_norm, learning rate and every TRL metric, and end at TRL's weights (or adapter). */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "config/train_config.h"
#include "data/pref_dataset.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/reference_policy.h"
#include "train/pref_method.h"
#include "trained_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A YAML config equal to the fixture's TRL configuration. */
static const char *write_config(const char *name, const json_t *c) {
    char text[16384], loss_types[256] = "", model[2048], pairs[2048], method[512] = "";
    const char *kind = json_string_value(json_object_get(c, "kind"));
    bool dpo = strcmp(kind, "dpo") == 0;
    const char *model_name = json_string_value(json_object_get(c, "model")); /* another family */
    char rel[600];
    snprintf(rel, sizeof rel, "tests/fixtures/models/%s", model_name ? model_name : "llama_text");
    snprintf(model, sizeof model, "%s", harness_source_path(rel));
    snprintf(pairs, sizeof pairs, "%s",
             harness_source_path(dpo ? "tests/fixtures/pref_train/pairs.jsonl"
                                     : "tests/fixtures/pref_train/pairs_orpo.jsonl"));
    char weights[256] = "";
    const json_t *types = json_object_get(c, "loss_type"), *w = json_object_get(c, "loss_weights");
    if (strcmp(kind, "cpo") == 0)
        snprintf(method, sizeof method, "cpo_loss_type: %s\n", json_string_value(types));
    if (json_object_get(c, "simpo_gamma"))
        snprintf(method + strlen(method), sizeof method - strlen(method), "simpo_gamma: %.17g\n",
                 json_number_value(json_object_get(c, "simpo_gamma")));
    if (json_object_get(c, "cpo_alpha"))
        snprintf(method + strlen(method), sizeof method - strlen(method), "cpo_alpha: %.17g\n",
                 json_number_value(json_object_get(c, "cpo_alpha")));
    char smoothing[64] = "";
    if (json_object_get(c, "label_smoothing"))
        snprintf(smoothing, sizeof smoothing, "dpo_label_smoothing: %.17g\n",
                 json_number_value(json_object_get(c, "label_smoothing")));
    for (size_t i = 0; i < json_array_size(types); i++)
        snprintf(loss_types + strlen(loss_types), sizeof loss_types - strlen(loss_types), "%s%s",
                 i ? ", " : "", json_string_value(json_array_get(types, i)));
    for (size_t i = 0; i < json_array_size(w); i++)
        snprintf(weights + strlen(weights), sizeof weights - strlen(weights), "%s%.17g",
                 i ? ", " : "", json_number_value(json_array_get(w, i)));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: %s\nrl_beta: %.17g\ndatasets:\n  - path: %s\n"
             "sequence_len: %lld\nmicro_batch_size: %lld\ngradient_accumulation_steps: %lld\n"
             "max_steps: %lld\nlearning_rate: %.17g\nlr_scheduler: %s\nwarmup_steps: 0\n"
             "shuffle_merged_datasets: false\n%s%s%s%s%s%s%s%s",
             model, kind, json_number_value(json_object_get(c, "beta")), pairs,
             (long long)json_integer_value(json_object_get(c, "max_length")),
             (long long)json_integer_value(json_object_get(c, "per_device_train_batch_size")),
             (long long)json_integer_value(json_object_get(c, "gradient_accumulation_steps")),
             (long long)json_integer_value(json_object_get(c, "max_steps")),
             json_number_value(json_object_get(c, "learning_rate")),
             json_string_value(json_object_get(c, "lr_scheduler_type")),
             dpo ? "dpo_loss_type: [" : "", dpo ? loss_types : "", dpo ? "]\n" : "", smoothing,
             *weights ? "dpo_loss_weights: [" : "", weights, *weights ? "]\n" : "", method);
    const char *path = harness_tmp_path(name);
    harness_write_file(path, text, strlen(text));
    return path;
}

/* Whether rlhf.c's micro-batch equals TRL's recorded one (ids, attention, completion mask). */
static bool same_micro_batch(const PrefMicroBatch *b, const json_t *want) {
    const json_t *ids = json_object_get(want, "input_ids"),
                 *attn = json_object_get(want, "attention_mask"),
                 *comp = json_object_get(want, "completion_mask");
    int rows = b->mb.batch.batch, T = b->mb.batch.t_len;
    if ((int)json_array_size(ids) != rows || (int)json_array_size(json_array_get(ids, 0)) != T)
        return false;
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            if (json_integer_value(json_array_get(json_array_get(ids, r), t)) != b->tokens[i] ||
                json_integer_value(json_array_get(json_array_get(attn, r), t)) != b->attn[i])
                return false;
            /* TRL marks a response token at position 0 too; it has no log-prob either way */
            bool c = json_integer_value(json_array_get(json_array_get(comp, r), t)) != 0;
            if (t > 0 && c != (b->completion[i] != 0)) return false;
        }
    return true;
}

/* The largest relative difference from TRL of a case's logged values (those above 1e-3). */
static double worst_logged;

/* Compares one logged step with TRL's: 1e-4 relative, 2e-6 absolute (values that are near 0,
 * such as step 1's margins, compare rounding noise). */
static void check_step(const char *name, int step, json_t *got, const json_t *want) {
    const char *key;
    json_t *w;
    double margin = json_number_value(json_object_get(want, "rewards/margins"));
    /* ORPO/CPO fixtures carry TRL's own logits/chosen|rejected (every padded position) and,
     * from the same logits, completion_logits/chosen|rejected: the completion-token mean that
     * rlhf.c reports under the logits/ keys */
    bool completion_logits = json_object_get(want, "completion_logits/chosen") != NULL;
    json_object_foreach((json_t *)want, key, w) {
        if (strcmp(key, "epoch") == 0 || strcmp(key, "step") == 0) continue;
        if (completion_logits && strncmp(key, "logits/", 7) == 0) continue;
        json_t *g = json_object_get(got, strncmp(key, "completion_", 11) == 0 ? key + 11 : key);
        CHECK(g != NULL, "%s step %d: no \"%s\"", name, step, key);
        if (!g) continue;
        /* at step 1 policy == reference: the accuracy compares rounding noise */
        if (strcmp(key, "rewards/accuracies") == 0 && fabs(margin) < 1e-5) continue;
        double gv = json_number_value(g), wv = json_number_value(w);
        if (fabs(wv) > 1e-3) worst_logged = fmax(worst_logged, fabs(gv - wv) / fabs(wv));
        CHECK(harness_close(gv, wv, 1e-4, 2e-6), "%s step %d: %s = %.9g, TRL %.9g", name, step, key,
              gv, wv);
    }
}

static void check_case(const char *name) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", harness_source_path("tests/fixtures/pref_train"));
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref;
    if (json_load_path(path, &ref) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    worst_logged = 0;
    const json_t *c = json_object_get(ref, "config");
    bool lora_case = json_is_true(json_object_get(c, "lora"));
    TrainConfig cfg;
    char yaml[320];
    snprintf(yaml, sizeof yaml, "%s.yaml", name);
    CHECK(train_config_load(&cfg, write_config(yaml, c), NULL, 0) == 0, "%s", err_msg());
    Tokenizer tok;
    CHECK(tokenizer_load(&tok, cfg.tokenizer_config) == 0, "%s", err_msg());
    PrefDataset ds;
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(pref_dataset_load(&ds, &cfg, &tok, devnull) == 0, "%s", err_msg());
    fclose(devnull);
    CHECK(ds.n_pairs == 12 && ds.dropped == 1, "%s: %zu pairs, %zu dropped (TRL: 12, 1)", name,
          ds.n_pairs, ds.dropped);

    PrefMethod pm;
    CHECK(pref_method_init(&pm, &cfg) == 0, "%s", err_msg());
    bool with_ref = pref_method_needs_reference(&pm);
    Model m, frozen;
    CHECK(model_load(&m, cfg.base_model) == 0, "%s", err_msg());
    LoraAdapter lora = {0};
    ReferencePolicy refp;
    if (lora_case) {
        snprintf(path, sizeof path, "%s/initial_adapter", dir);
        CHECK(lora_load(&lora, &m.cfg, path) == 0, "%s", err_msg());
        m.lora = &lora;
        reference_policy_from_adapter(&refp, &m, &lora);
    } else if (with_ref) {
        CHECK(model_load(&frozen, cfg.base_model) == 0, "%s", err_msg());
        reference_policy_from_model(&refp, &frozen);
    }
    pm.ref = with_ref ? &refp : NULL;
    TrainerOptions opt = {.learning_rate = cfg.learning_rate,
                          .max_grad_norm = cfg.max_grad_norm,
                          .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0},
                          .schedule = LR_LINEAR,
                          .warmup_steps = 0,
                          .total_steps = cfg.max_steps,
                          .disable_dropout = true};
    Trainer tr;
    CHECK(trainer_init(&tr, &m, lora_case ? &lora : NULL, &opt) == 0, "%s", err_msg());
    size_t *order = malloc(ds.n_pairs * sizeof *order);
    for (size_t i = 0; i < ds.n_pairs; i++)
        order[i] = i;
    const json_t *mbs = json_object_get(ref, "micro_batches"),
                 *history = json_object_get(ref, "log_history");
    int gas = (int)cfg.gradient_accumulation_steps, bs = (int)cfg.micro_batch_size;
    TrainMethod method = pref_method_train_method(&pm);
    for (int step = 0; step < (int)cfg.max_steps; step++) {
        PrefMicroBatch window[8];
        MicroBatch mb[8];
        for (int k = 0; k < gas; k++) {
            pref_batch_build(&window[k], &ds, order, (size_t)(step * gas + k) * bs, bs,
                             cfg.sequence_len, 3019, pref_method_all_positions(&pm));
            mb[k] = window[k].mb;
            CHECK(same_micro_batch(&window[k], json_array_get(mbs, (size_t)(step * gas + k))),
                  "%s: micro-batch %d differs from TRL's collation", name, step * gas + k);
        }
        pm.window = window;
        pm.n_window = gas;
        StepStats st;
        CHECK(trainer_step(&tr, mb, gas, &method, &st) == 0, "%s", err_msg());
        json_t *entry = json_object();
        json_object_set_new(entry, "loss", json_real(st.loss));
        json_object_set_new(entry, "grad_norm", json_real(st.grad_norm));
        json_object_set_new(entry, "learning_rate", json_real(st.lr));
        pref_method_flush_metrics(&pm, entry, "");
        check_step(name, step + 1, entry, json_array_get(history, (size_t)step));
        json_decref(entry);
        for (int k = 0; k < gas; k++)
            pref_batch_free(&window[k]);
    }
    printf("%s: logged values within %.2e of TRL's\n", name, worst_logged);
    snprintf(path, sizeof path, "%s/final.safetensors", dir);
    double worst_weight;
    trained_weights_check(name, path, &m, lora_case ? &lora : NULL, &worst_weight);
    trainer_free(&tr);
    free(order);
    if (lora_case)
        lora_free(&lora);
    else if (with_ref)
        model_free(&frozen);
    model_free(&m);
    pref_dataset_free(&ds);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    json_decref(ref);
}

int main(void) {
    int n = harness_foreach_case("tests/fixtures/pref_train", "reference.json", check_case);
    CHECK(n >= 25, "%d cases", n);
    return harness_finish("test_pref_train");
}
