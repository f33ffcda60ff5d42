/* `rlhf train` with rl: dpo / ipo end to end on the llama_text fixture: the first step sits at
 * the invariants of trl-methods.md §9 (policy = reference: DPO loss ln 2, rewards 0; IPO
 * (1/(2β))²), the loss falls, TRL's metric keys are logged, precomputed reference log-probs
 * train as the live reference does, and the reference follows TRL's rules with an adapter
 * (switched off; the loaded adapter when continuing from lora_model_dir; a frozen copy with
 * rl_adapter_ref_model). bf16: true keeps the reference in bf16. Bad rows are clear errors. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/model_dir.h"
#include "model/model.h"
#include "trained_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char config[4096];

static void write_config(void) {
    char text[8192], model[2048];
    harness_write_arith_pairs("pairs.jsonl", 16);
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: 0.1\ndatasets:\n  - path: %s\n"
             "sequence_len: 64\nmicro_batch_size: 4\ngradient_accumulation_steps: 2\n"
             "num_epochs: 3\nlearning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\n"
             "seed: 3\n",
             model, harness_tmp_path("pairs.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("dpo.yaml"));
    harness_write_file(config, text, strlen(text));
}

static int train(const char *const *kv, int n) {
    char *args[32];
    args[0] = config;
    for (int i = 0; i < 2 * n; i++)
        args[1 + i] = (char *)kv[i];
    return cli_train(1 + 2 * n, args);
}

static void test_full_and_precomputed(void) {
    const char *out = harness_tmp_path("full");
    const char *kv[] = {"--output_dir", out};
    CHECK(train(kv, 1) == CLI_EXIT_OK, "dpo: %s", err_msg());
    json_t *m = harness_read_metrics(out);
    size_t n = json_array_size(m);
    CHECK(n == 6, "%zu log lines for 16 pairs x 3 epochs / 8 per step", n);
    CHECK(fabs(harness_metric(m, 0, "loss") - log(2.0)) < 1e-5 &&
              fabs(harness_metric(m, 0, "rewards/margins")) < 1e-5,
          "step 1: policy = reference, loss %.7f (ln 2), margin %.2g", harness_metric(m, 0, "loss"),
          harness_metric(m, 0, "rewards/margins"));
    CHECK(n == 6 && harness_metric(m, 5, "loss") < 0.5 &&
              harness_metric(m, 5, "rewards/accuracies") > 0.7,
          "the loss falls to %.4f, accuracy %.2f", harness_metric(m, 5, "loss"),
          harness_metric(m, 5, "rewards/accuracies"));
    const char *keys[] = {"rewards/chosen",
                          "rewards/rejected",
                          "rewards/accuracies",
                          "rewards/margins",
                          "logps/chosen",
                          "logps/rejected",
                          "logits/chosen",
                          "logits/rejected",
                          "entropy",
                          "num_tokens",
                          "mean_token_accuracy",
                          "grad_norm",
                          "learning_rate",
                          "epoch",
                          "step"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CHECK(json_object_get(json_array_get(m, 0), keys[k]) != NULL, "metric %s logged", keys[k]);
    json_decref(m);

    /* the reference computed once up front trains to the same weights */
    const char *pre_out = harness_tmp_path("precomputed");
    const char *pre[] = {"--output_dir", pre_out, "--precompute_ref_log_probs", "true"};
    CHECK(train(pre, 2) == CLI_EXIT_OK, "precomputed: %s", err_msg());
    double scale, err = saved_weights_gap(out, pre_out, &scale);
    CHECK(err <= 1e-4 * scale, "precomputed reference: weights off by %.3g (scale %.3g)", err,
          scale);

    /* rl: ipo starts at (1/(2β))² */
    const char *ipo[] = {"--output_dir", harness_tmp_path("ipo"), "--rl",
                         "ipo",          "--max_steps",           "1"};
    CHECK(train(ipo, 3) == CLI_EXIT_OK, "ipo: %s", err_msg());
    m = harness_read_metrics(harness_tmp_path("ipo"));
    CHECK(fabs(harness_metric(m, 0, "loss") - 25.0) < 1e-3, "ipo step 1: loss %.6f, expected 25",
          harness_metric(m, 0, "loss"));
    json_decref(m);
}

/* bf16: true keeps the frozen reference's weights in bf16 and trains in mixed precision. On a
 * checkpoint stored in bf16 the stored reference rounds nothing, and policy and reference
 * compute alike under autocast: step 1 sits at ln 2. The run then trains near the fp32 run's
 * weights, but not to them: its products rounded their inputs (test_autocast_parity holds the
 * bf16 run to torch's autocast). */
static void test_bf16_reference(void) {
    Model m;
    char text_bf16[4096];
    snprintf(text_bf16, sizeof text_bf16, "%s", harness_tmp_path("text_bf16"));
    const char *src = harness_source_path("tests/fixtures/models/llama_text");
    CHECK(model_load(&m, src) == 0 && model_dir_write(&m, src, src, text_bf16, ST_BF16) == 0,
          "a bf16 copy of llama_text: %s", err_msg());
    model_free(&m);
    char fp32_out[4096], bf16_out[4096];
    snprintf(fp32_out, sizeof fp32_out, "%s", harness_tmp_path("ref_fp32"));
    snprintf(bf16_out, sizeof bf16_out, "%s", harness_tmp_path("ref_bf16"));
    const char *a[] = {"--base_model", text_bf16, "--max_steps", "3", "--output_dir", fp32_out};
    const char *b[] = {"--base_model", text_bf16, "--max_steps", "3",
                       "--output_dir", bf16_out,  "--bf16",      "true"};
    CHECK(train(a, 3) == CLI_EXIT_OK, "fp32 reference: %s", err_msg());
    CHECK(train(b, 4) == CLI_EXIT_OK, "bf16 reference: %s", err_msg());
    json_t *metrics = harness_read_metrics(bf16_out);
    CHECK(fabs(harness_metric(metrics, 0, "loss") - log(2.0)) < 1e-5,
          "bf16 reference, step 1: loss %.7f (ln 2)", harness_metric(metrics, 0, "loss"));
    json_decref(metrics);
    double scale, err = saved_weights_gap(fp32_out, bf16_out, &scale);
    CHECK(err > 1e-5 * scale && err <= 2e-2 * scale,
          "bf16 mixed precision: weights %.3g from the fp32 run's (scale %.3g)", err, scale);
}

static void test_adapter_references(void) {
    /* a LoRA run: the reference is the base with the adapter off */
    const char *lora_out = harness_tmp_path("lora");
    const char *kv[] = {"--output_dir",
                        lora_out,
                        "--adapter",
                        "lora",
                        "--lora_r",
                        "4",
                        "--lora_alpha",
                        "16",
                        "--lora_target_linear",
                        "true",
                        "--learning_rate",
                        "2e-2"};
    CHECK(train(kv, 6) == CLI_EXIT_OK, "dpo lora: %s", err_msg());
    json_t *m = harness_read_metrics(lora_out);
    CHECK(fabs(harness_metric(m, 0, "loss") - log(2.0)) < 1e-5, "lora step 1: loss %.7f",
          harness_metric(m, 0, "loss"));
    double trained_margin = harness_metric(m, json_array_size(m) - 1, "rewards/margins");
    CHECK(trained_margin > 0.1, "the adapter learns: margin %.4f", trained_margin);
    json_decref(m);

    /* continuing from that adapter: the reference is the adapter as loaded, so step 1 is
     * back at ln 2 (against the base it would start at the trained margin) */
    const char *cont[] = {"--output_dir",     harness_tmp_path("continued"),
                          "--adapter",        "lora",
                          "--lora_model_dir", lora_out,
                          "--max_steps",      "1"};
    CHECK(train(cont, 4) == CLI_EXIT_OK, "lora_model_dir: %s", err_msg());
    m = harness_read_metrics(harness_tmp_path("continued"));
    CHECK(fabs(harness_metric(m, 0, "loss") - log(2.0)) < 1e-5 &&
              fabs(harness_metric(m, 0, "rewards/margins")) < 1e-5,
          "continuing: step 1 loss %.7f, margin %.3g", harness_metric(m, 0, "loss"),
          harness_metric(m, 0, "rewards/margins"));
    json_decref(m);

    /* rl_adapter_ref_model: a separate frozen base; with the trained adapter loaded the policy
     * starts away from it */
    const char *sep[] = {"--output_dir",
                         harness_tmp_path("separate"),
                         "--adapter",
                         "lora",
                         "--lora_model_dir",
                         lora_out,
                         "--rl_adapter_ref_model",
                         "true",
                         "--max_steps",
                         "1"};
    CHECK(train(sep, 5) == CLI_EXIT_OK, "rl_adapter_ref_model: %s", err_msg());
    m = harness_read_metrics(harness_tmp_path("separate"));
    CHECK(harness_metric(m, 0, "rewards/margins") > 0.05,
          "against the frozen base the loaded adapter starts with a margin (%.4f)",
          harness_metric(m, 0, "rewards/margins"));
    json_decref(m);
}

/* Evaluation: val_set_size and test_datasets give eval_ keys every eval_steps. */
static void test_evaluation(void) {
    /* no learning (steps of 1e-30 leave every fp32 weight as it is): the policy stays the
     * reference, so the held-out loss is ln 2 exactly */
    const char *still[] = {"--output_dir",    harness_tmp_path("eval-still"),
                           "--val_set_size",  "4",
                           "--eval_steps",    "2",
                           "--learning_rate", "1e-30"};
    CHECK(train(still, 4) == CLI_EXIT_OK, "eval: %s", err_msg());
    json_t *m = harness_read_metrics(harness_tmp_path("eval-still"));
    int evals = 0;
    double trained_tokens = 0;
    for (size_t i = 0; i < json_array_size(m); i++) {
        const json_t *row = json_array_get(m, i);
        if (json_object_get(row, "num_tokens")) trained_tokens = harness_metric(m, i, "num_tokens");
        if (!json_object_get(row, "eval_loss")) continue;
        evals++;
        CHECK(fabs(harness_metric(m, i, "eval_loss") - log(2.0)) < 1e-6 &&
                  fabs(harness_metric(m, i, "eval_rewards/margins")) < 1e-6,
              "policy = reference: eval_loss %.8f (ln 2), margin %.2g",
              harness_metric(m, i, "eval_loss"), harness_metric(m, i, "eval_rewards/margins"));
        const char *keys[] = {"eval_rewards/chosen", "eval_logps/rejected", "eval_logits/chosen",
                              "eval_entropy"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK(json_object_get(row, keys[k]) != NULL, "%s logged", keys[k]);
        /* TRL: eval_num_tokens is its training token counter (evaluation adds nothing). */
        CHECK(trained_tokens > 0 && harness_metric(m, i, "eval_num_tokens") == trained_tokens,
              "eval_num_tokens %.0f = tokens trained on so far %.0f",
              harness_metric(m, i, "eval_num_tokens"), trained_tokens);
    }
    CHECK(evals >= 2, "%d evaluations every 2 steps", evals);
    json_decref(m);

    /* learning on the other pairs lowers the held-out loss; a precomputed reference (training
     * and held-out pairs) gives the same evaluation */
    double first[2] = {0, 0}, last[2] = {0, 0};
    for (int pre = 0; pre < 2; pre++) {
        const char *out = harness_tmp_path(pre ? "eval-pre" : "eval-learn");
        const char *kv[] = {"--output_dir",
                            out,
                            "--val_set_size",
                            "4",
                            "--eval_steps",
                            "1",
                            "--precompute_ref_log_probs",
                            pre ? "true" : "false"};
        CHECK(train(kv, 4) == CLI_EXIT_OK, "eval: %s", err_msg());
        m = harness_read_metrics(out);
        bool seen = false;
        for (size_t i = 0; i < json_array_size(m); i++) {
            if (!json_object_get(json_array_get(m, i), "eval_loss")) continue;
            if (!seen) first[pre] = harness_metric(m, i, "eval_loss"), seen = true;
            last[pre] = harness_metric(m, i, "eval_loss");
        }
        json_decref(m);
    }
    CHECK(last[0] < first[0], "held-out loss %.4f -> %.4f", first[0], last[0]);
    CHECK(fabs(first[0] - first[1]) < 1e-5 * first[0] && fabs(last[0] - last[1]) < 1e-4 * last[0],
          "precomputed reference: eval_loss %.7f/%.7f vs %.7f/%.7f", first[1], last[1], first[0],
          last[0]);

    /* test_datasets: another file; with val_set_size too it is Axolotl's error */
    char text[8192];
    size_t n = 0;
    for (int i = 0; i < 3; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"prompt\": \"Q%d: %d plus 1 is\", \"chosen\": \" %d.\", "
                              "\"rejected\": \" no idea\"}\n",
                              40 + i, 40 + i, 41 + i);
    harness_write_file(harness_tmp_path("test_pairs.jsonl"), text, n);
    char *base = NULL;
    CHECK(read_file(config, &base, NULL) == 0, "%s", err_msg());
    snprintf(text, sizeof text, "%stest_datasets:\n  - path: %s\n", base,
             harness_tmp_path("test_pairs.jsonl"));
    free(base);
    const char *with_test = harness_tmp_path("with_test.yaml");
    harness_write_file(with_test, text, strlen(text));
    char *args[] = {(char *)with_test, "--output_dir", (char *)harness_tmp_path("eval-test"),
                    "--max_steps", "2"};
    CHECK(cli_train(5, args) == CLI_EXIT_OK, "test_datasets: %s", err_msg());
    m = harness_read_metrics(harness_tmp_path("eval-test"));
    const json_t *lastrow = json_array_get(m, json_array_size(m) - 1);
    CHECK(json_object_get(lastrow, "eval_loss") && json_object_get(lastrow, "eval_rewards/margins"),
          "test_datasets evaluated at the end");
    json_decref(m);
    char *both[] = {(char *)with_test, "--output_dir", (char *)harness_tmp_path("eval-both"),
                    "--val_set_size", "2"};
    err_clear();
    CHECK(cli_train(5, both) == CLI_EXIT_FAILURE &&
              strstr(err_msg(), "non-zero val_set_size should not be used with test_datasets"),
          "val_set_size with test_datasets: %s", err_msg());
}

/* ORPO, SimPO and CPO: no reference model; each logs its own keys and its loss falls. */
static void test_reference_free_methods(void) {
    const struct {
        const char *name, *rl, *loss_type, *key;
    } runs[] = {{"orpo", "orpo", NULL, "log_odds_ratio"},
                {"simpo", "simpo", NULL, "nll_loss"},
                {"cpo_hinge", "cpo", "hinge", "nll_loss"}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        const char *out = harness_tmp_path(runs[r].name);
        const char *kv[] = {"--output_dir",   out, "--rl", runs[r].rl, "--cpo_loss_type",
                            runs[r].loss_type};
        CHECK(train(kv, runs[r].loss_type ? 3 : 2) == CLI_EXIT_OK, "%s: %s", runs[r].name,
              err_msg());
        json_t *m = harness_read_metrics(out);
        size_t n = json_array_size(m);
        CHECK(n == 6 && harness_metric(m, n - 1, "loss") < harness_metric(m, 0, "loss"),
              "%s: %zu log lines, loss %.4f -> %.4f", runs[r].name, n, harness_metric(m, 0, "loss"),
              harness_metric(m, n - 1, "loss"));
        const char *keys[] = {runs[r].key, "rewards/margins", "logps/chosen", "logits/chosen"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK(json_object_get(json_array_get(m, 0), keys[k]) != NULL, "%s: metric %s logged",
                  runs[r].name, keys[k]);
        json_decref(m);
    }
    const char *wrong[] = {
        "--output_dir", harness_tmp_path("simpo-hinge"), "--rl", "simpo", "--cpo_loss_type",
        "hinge"};
    err_clear();
    CHECK(train(wrong, 3) == CLI_EXIT_FAILURE && strstr(err_msg(), "cpo_loss_type"),
          "cpo_loss_type with rl: simpo is refused: %s", err_msg());
}

static void test_errors(void) {
    harness_write_file(harness_tmp_path("bad.jsonl"),
                       "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n"
                       "{\"prompt\": \"a\", \"chosen\": \"b\"}\n",
                       strlen("{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n"
                              "{\"prompt\": \"a\", \"chosen\": \"b\"}\n"));
    char text[4096], model[2048];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nlearning_rate: 1e-3\ndatasets:\n  - path: %s\n", model,
             harness_tmp_path("bad.jsonl"));
    harness_write_file(harness_tmp_path("bad.yaml"), text, strlen(text));
    char *args[] = {(char *)harness_tmp_path("bad.yaml"), "--output_dir",
                    (char *)harness_tmp_path("bad-out")};
    err_clear();
    CHECK(cli_train(3, args) == CLI_EXIT_FAILURE, "a row without rejected fails");
    CHECK(strstr(err_msg(), "bad.jsonl:2") && strstr(err_msg(), "missing field \"rejected\""),
          "the error names the file, the line and the field: %s", err_msg());
}

int main(void) {
    write_config();
    test_full_and_precomputed();
    test_adapter_references();
    test_bf16_reference();
    test_reference_free_methods();
    test_evaluation();
    test_errors();
    return harness_finish("test_pref_run");
}
