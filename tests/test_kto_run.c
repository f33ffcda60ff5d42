/* `rlhf train` with rl: kto end to end on the llama_text fixture: the first step sits at the
 * invariant of trl-methods.md §9 (policy = reference: kl 0, every row loss 0.5), the rewards
 * move apart, TRL's KTO metric keys are logged, the rows are never reshuffled per epoch (with
 * Axolotl's merged-dataset shuffle off, shuffle_merged_datasets: false, the seed changes
 * nothing), precomputed reference log-probs train as the live reference does, apo_zero_unpaired
 * runs with one row per micro-batch, and bad input is a clear error: a row without its label,
 * micro_batch_size 1 with the kto loss, an unknown trl.loss_type. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "trained_weights.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char config[4096];

static void write_config(void) {
    char text[8192], model[2048];
    harness_write_arith_kto_rows("rows.jsonl", 16);
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: kto\nrl_beta: 0.1\ndatasets:\n  - path: %s\n"
             "sequence_len: 64\nmicro_batch_size: 4\ngradient_accumulation_steps: 2\n"
             "num_epochs: 3\nlearning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\n"
             "remove_unused_columns: false\nseed: 3\nshuffle_merged_datasets: false\n",
             model, harness_tmp_path("rows.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("kto.yaml"));
    harness_write_file(config, text, strlen(text));
}

static int train(const char *const *kv, int n) {
    char *args[32];
    args[0] = config;
    for (int i = 0; i < 2 * n; i++)
        args[1 + i] = (char *)kv[i];
    return cli_train(1 + 2 * n, args);
}

static void test_full_run(void) {
    const char *out = harness_tmp_path("full");
    const char *kv[] = {"--output_dir", out};
    CHECK(train(kv, 1) == CLI_EXIT_OK, "kto: %s", err_msg());
    json_t *m = harness_read_metrics(out);
    size_t n = json_array_size(m);
    CHECK(n == 6, "%zu log lines for 16 rows x 3 epochs / 8 per step", n);
    CHECK(fabs(harness_metric(m, 0, "loss") - 0.5) < 1e-6 &&
              fabs(harness_metric(m, 0, "kl")) < 1e-6 &&
              fabs(harness_metric(m, 0, "rewards/margins")) < 1e-6,
          "step 1: policy = reference, loss %.7f (0.5), kl %.2g, margin %.2g",
          harness_metric(m, 0, "loss"), harness_metric(m, 0, "kl"),
          harness_metric(m, 0, "rewards/margins"));
    CHECK(n == 6 && harness_metric(m, 5, "rewards/margins") > 0.05 &&
              harness_metric(m, 5, "loss") < 0.5,
          "the rewards move apart: margin %.4f, loss %.4f", harness_metric(m, 5, "rewards/margins"),
          harness_metric(m, 5, "loss"));
    const char *keys[] = {"loss",
                          "grad_norm",
                          "learning_rate",
                          "kl",
                          "entropy",
                          "num_tokens",
                          "logits/chosen",
                          "logits/rejected",
                          "rewards/chosen",
                          "logps/chosen",
                          "rewards/rejected",
                          "logps/rejected",
                          "rewards/margins",
                          "epoch",
                          "step"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CHECK(json_object_get(json_array_get(m, 0), keys[k]) != NULL, "metric %s logged", keys[k]);
    CHECK(json_object_get(json_array_get(m, 0), "rewards/accuracies") == NULL &&
              json_object_get(json_array_get(m, 0), "mean_token_accuracy") == NULL,
          "no DPO-only keys");
    json_decref(m);

    /* rows in dataset order: another seed trains the same weights (no adapter, no dropout) */
    const char *seeded = harness_tmp_path("seed9");
    const char *kv9[] = {"--output_dir", seeded, "--seed", "9"};
    CHECK(train(kv9, 2) == CLI_EXIT_OK, "seed 9: %s", err_msg());
    double scale, gap = saved_weights_gap(out, seeded, &scale);
    CHECK(gap == 0, "another seed changed the weights by %.3g: rows were shuffled", gap);

    /* the reference computed once up front (KL rows included) trains to the same weights */
    const char *pre_out = harness_tmp_path("precomputed");
    const char *pre[] = {"--output_dir", pre_out, "--precompute_ref_log_probs", "true"};
    CHECK(train(pre, 2) == CLI_EXIT_OK, "precomputed: %s", err_msg());
    gap = saved_weights_gap(out, pre_out, &scale);
    CHECK(gap <= 1e-4 * scale, "precomputed reference: weights off by %.3g (scale %.3g)", gap,
          scale);
}

static void test_lora_and_apo(void) {
    /* a LoRA run: the reference is the base with the adapter off, so step 1 is at 0.5 */
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
    CHECK(train(kv, 6) == CLI_EXIT_OK, "kto lora: %s", err_msg());
    json_t *m = harness_read_metrics(lora_out);
    CHECK(fabs(harness_metric(m, 0, "loss") - 0.5) < 1e-6, "lora step 1: loss %.7f",
          harness_metric(m, 0, "loss"));
    double margin = harness_metric(m, json_array_size(m) - 1, "rewards/margins");
    CHECK(margin > 0.05, "the adapter learns: margin %.4f", margin);
    json_decref(m);

    /* apo_zero_unpaired has no KL rows and takes one row per micro-batch */
    const char *apo_out = harness_tmp_path("apo");
    const char *apo[] = {"--output_dir", apo_out, "--micro_batch_size", "1", "--max_steps", "2"};
    char apo_cfg[8192], *text = NULL;
    CHECK(read_file(config, &text, NULL) == 0, "%s", err_msg());
    snprintf(apo_cfg, sizeof apo_cfg, "%strl:\n  loss_type: apo_zero_unpaired\n", text);
    free(text);
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", config);
    snprintf(config, sizeof config, "%s", harness_tmp_path("apo.yaml"));
    harness_write_file(config, apo_cfg, strlen(apo_cfg));
    CHECK(train(apo, 3) == CLI_EXIT_OK, "apo_zero_unpaired: %s", err_msg());
    m = harness_read_metrics(apo_out);
    CHECK(json_array_size(m) == 2 && fabs(harness_metric(m, 0, "loss") - 0.5) < 1e-6 &&
              harness_metric(m, 0, "kl") == 0,
          "apo_zero_unpaired: step 1 loss %.7f, kl %g", harness_metric(m, 0, "loss"),
          harness_metric(m, 0, "kl"));
    json_decref(m);
    snprintf(config, sizeof config, "%s", saved);
}

/* Runs `rlhf train` on a config with `extra` appended to the KTO config, expecting an error
 * that contains both needles. */
static void expect_error(const char *name, const char *rows_text, const char *extra,
                         const char *needle1, const char *needle2) {
    char rows_path[1024], text[8192], model[2048], yaml[1024];
    snprintf(rows_path, sizeof rows_path, "%s", harness_tmp_path("bad.jsonl"));
    harness_write_file(rows_path, rows_text, strlen(rows_text));
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: kto\nlearning_rate: 1e-3\n"
             "datasets:\n  - path: %s\n%s",
             model, rows_path, extra);
    snprintf(yaml, sizeof yaml, "%s", harness_tmp_path("bad.yaml"));
    harness_write_file(yaml, text, strlen(text));
    char *args[] = {yaml, "--output_dir", (char *)harness_tmp_path("bad-out")};
    err_clear();
    CHECK(cli_train(3, args) == CLI_EXIT_FAILURE, "%s fails", name);
    CHECK(strstr(err_msg(), needle1) && strstr(err_msg(), needle2), "%s: %s", name, err_msg());
}

static void test_errors(void) {
    const char *good = "{\"prompt\": \"a\", \"completion\": \"b\", \"label\": true}\n"
                       "{\"prompt\": \"c\", \"completion\": \"d\", \"label\": false}\n";
    expect_error("a row without label",
                 "{\"prompt\": \"a\", \"completion\": \"b\", \"label\": true}\n"
                 "{\"prompt\": \"a\", \"completion\": \"b\"}\n",
                 "micro_batch_size: 2\n", "bad.jsonl:2", "missing field \"label\"");
    expect_error("micro_batch_size 1", good, "micro_batch_size: 1\n", "micro_batch_size",
                 "Actual (not effective) batch size must be > 1");
    expect_error("an unknown loss type", good, "micro_batch_size: 2\ntrl:\n  loss_type: kto_pair\n",
                 "trl.loss_type", "kto_pair");
}

/* Evaluation: held-out rows give eval_ keys; with weights that do not move (steps of 1e-30),
 * policy = reference, so every row's loss is 1 - σ(0) = 0.5 and the KL estimate 0. */
static void test_evaluation(void) {
    for (int pre = 0; pre < 2; pre++) {
        const char *out = harness_tmp_path(pre ? "eval-pre" : "eval");
        const char *kv[] = {"--output_dir",
                            out,
                            "--val_set_size",
                            "4",
                            "--eval_steps",
                            "1",
                            "--learning_rate",
                            "1e-30",
                            "--precompute_ref_log_probs",
                            pre ? "true" : "false"};
        CHECK(train(kv, 5) == CLI_EXIT_OK, "kto eval: %s", err_msg());
        json_t *m = harness_read_metrics(out);
        int evals = 0;
        for (size_t i = 0; i < json_array_size(m); i++) {
            const json_t *row = json_array_get(m, i);
            if (!json_object_get(row, "eval_loss")) continue;
            evals++;
            CHECK(fabs(harness_metric(m, i, "eval_loss") - 0.5) < 1e-6 &&
                      fabs(harness_metric(m, i, "eval_kl")) < 1e-6,
                  "policy = reference: eval_loss %.8f (0.5), eval_kl %.2g",
                  harness_metric(m, i, "eval_loss"), harness_metric(m, i, "eval_kl"));
            CHECK(json_object_get(row, "eval_rewards/chosen") &&
                      json_object_get(row, "eval_logps/chosen") &&
                      !json_object_get(row, "eval_num_tokens"),
                  "eval keys");
        }
        CHECK(evals >= 1, "%d evaluations", evals);
        json_decref(m);
    }
}

int main(void) {
    write_config();
    test_full_run();
    test_lora_and_apo();
    test_evaluation();
    test_errors();
    return harness_finish("test_kto_run");
}
