/* LoRA training end to end on the llama_text fixture: `rlhf train` with adapter: lora trains the
 * adapter alone (the loss falls; the checkpoint's optimizer state covers the adapter only), saves
 * PEFT files, resumes bit for bit (dropout on), gives the same adapter with gradient
 * checkpointing, continues from lora_model_dir; `rlhf merge-lora`
 * gives a model that computes what base + adapter computes; bad adapters are clear errors. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/model.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char base[4096], config[4096];

static void write_text(const char *name, const char *text) {
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

/* 24 alpaca examples and an adapter config over them (3 epochs of 3 steps). */
static void write_config(void) {
    char data[8192];
    size_t n = 0;
    for (int i = 0; i < 24; i++)
        n += (size_t)snprintf(data + n, sizeof data - n,
                              "{\"instruction\": \"Add %d and %d.\", \"input\": \"\", "
                              "\"output\": \"%d\"}\n",
                              i, i + 3, 2 * i + 3);
    write_text("add.jsonl", data);
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\n"
             "datasets:\n  - path: %s\n    type: alpaca\n"
             "sequence_len: 512\nmicro_batch_size: 4\ngradient_accumulation_steps: 2\n"
             "num_epochs: 3\nlearning_rate: 2e-2\nwarmup_steps: 1\nseed: 11\n"
             "dataset_prepared_path: %s\n"
             "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.1\n"
             "lora_target_linear: true\n",
             base, harness_tmp_path("add.jsonl"), harness_tmp_path("prepared"));
    write_text("lora.yaml", text);
    snprintf(config, sizeof config, "%s", harness_tmp_path("lora.yaml"));
}

static int run(int (*command)(int, char **), const char *const *kv, int n) {
    char *args[32];
    args[0] = config;
    for (int i = 0; i < 2 * n; i++)
        args[1 + i] = (char *)kv[i];
    return command(1 + 2 * n, args);
}

/* The first and last logged losses of a run. */
static void loss_range(const char *out_dir, double *first, double *last, int *lines) {
    char path[4200], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    *lines = 0;
    if (read_file(path, &text, NULL) != 0) return;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *row;
        if (json_load_text(l, strlen(l), "metrics", &row) != 0) continue;
        double loss = json_number_value(json_object_get(row, "loss"));
        if ((*lines)++ == 0) *first = loss;
        *last = loss;
        json_decref(row);
    }
    free(text);
}

/* Whether two `rlhf generate` outputs have the same token_ids, line by line. */
static bool same_token_ids(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    bool same = read_file(a, &x, NULL) == 0 && read_file(b, &y, NULL) == 0;
    int lines = 0;
    for (char *sx = NULL, *sy = NULL, *lx = same ? strtok_r(x, "\n", &sx) : NULL,
              *ly = same ? strtok_r(y, "\n", &sy) : NULL;
         same && (lx || ly); lx = strtok_r(NULL, "\n", &sx), ly = strtok_r(NULL, "\n", &sy)) {
        json_t *jx = NULL, *jy = NULL;
        same = lx && ly && json_load_text(lx, strlen(lx), a, &jx) == 0 &&
               json_load_text(ly, strlen(ly), b, &jy) == 0;
        if (same) {
            json_t *ix = json_object_get(json_array_get(json_object_get(jx, "completions"), 0),
                                         "token_ids"),
                   *iy = json_object_get(json_array_get(json_object_get(jy, "completions"), 0),
                                         "token_ids");
            same = ix && json_array_size(ix) > 0 && json_equal(ix, iy);
        }
        json_decref(jx);
        json_decref(jy);
        lines++;
    }
    free(x);
    free(y);
    return same && lines == 2;
}

/* Token log-probs of the llama_text reference batch under `m`. */
static float *batch_logprobs(Model *m, int *cells) {
    json_t *ref;
    char path[4200];
    snprintf(path, sizeof path, "%s/reference.json", base);
    if (json_load_path(path, &ref) != 0) return NULL;
    json_t *ids = json_object_get(ref, "input_ids"), *mask = json_object_get(ref, "attention_mask");
    int B = (int)json_array_size(ids), T = (int)json_array_size(json_array_get(ids, 0));
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens);
    uint8_t *attn = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] =
                (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            attn[b * T + t] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(mask, b), t));
        }
    json_decref(ref);
    float *logp = calloc((size_t)B * T, sizeof *logp);
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = attn};
    if (model_token_logprobs(m, &batch, attn, logp) != 0) {
        free(logp);
        logp = NULL;
    }
    *cells = B * T;
    free(tokens);
    free(attn);
    return logp;
}

static void test_training_and_resume(void) {
    char straight[4096], resumed[4096], path[4300], other[4300];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("straight"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("resumed"));
    const char *kv[] = {"--output_dir", straight, "--save_steps", "4"};
    CHECK(run(cli_train, kv, 2) == CLI_EXIT_OK, "train: %s", err_msg());
    double first = 0, last = 0;
    int lines;
    loss_range(straight, &first, &last, &lines);
    CHECK(lines == 9 && last < first - 0.5, "%d steps, loss %.3f -> %.3f", lines, first, last);

    const char *present[] = {"adapter_config.json",
                             "adapter_model.safetensors",
                             "config.json",
                             "tokenizer.json",
                             "checkpoint-4/adapter_model.safetensors",
                             "checkpoint-4/optimizer.safetensors"};
    for (size_t i = 0; i < sizeof present / sizeof *present; i++) {
        snprintf(path, sizeof path, "%s/%s", straight, present[i]);
        CHECK(file_exists(path), "%s written", present[i]);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", straight);
    CHECK(!file_exists(path), "no full weights in an adapter run's output");

    /* the optimizer state is the adapter's: two moments per adapter tensor, nothing more */
    Model m;
    CHECK(model_load(&m, base) == 0, "%s", err_msg());
    LoraAdapter lora;
    CHECK(lora_load(&lora, &m.cfg, straight) == 0, "the output adapter loads: %s", err_msg());
    CHECK(lora.r == 4 && lora.alpha == 8 && fabs(lora.dropout - 0.1) < 1e-12 &&
              lora.n_info == 2 * 7 * m.cfg.n_layers,
          "adapter_config.json: r %d alpha %g dropout %g, %d tensors", lora.r, lora.alpha,
          lora.dropout, lora.n_info);
    snprintf(path, sizeof path, "%s/checkpoint-4/optimizer.safetensors", straight);
    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    size_t state = 0;
    for (size_t i = 0; i < f.n_tensors; i++)
        state += (size_t)f.tensors[i].numel;
    CHECK(f.n_tensors == 2 * (size_t)lora.n_info && state == 2 * lora.n_params,
          "optimizer state: %zu tensors, %zu floats for %zu adapter parameters", f.n_tensors, state,
          lora.n_params);
    safetensors_close(&f);

    /* base + adapter differs from the base: the adapter learnt something */
    int cells;
    float *plain = batch_logprobs(&m, &cells);
    m.lora = &lora;
    float *adapted = batch_logprobs(&m, &cells);
    double moved = 0;
    for (int i = 0; plain && adapted && i < cells; i++)
        moved = fmax(moved, fabs(plain[i] - adapted[i]));
    CHECK(moved > 1e-2, "the trained adapter changes the log-probs (by %.3g)", moved);

    /* merge-lora from the config: output_dir/merged computes what base + adapter computes */
    const char *merge_kv[] = {"--output_dir", straight};
    CHECK(run(cli_merge_lora, merge_kv, 1) == CLI_EXIT_OK, "merge-lora: %s", err_msg());
    snprintf(path, sizeof path, "%s/merged", straight);
    Model merged;
    CHECK(model_load(&merged, path) == 0, "the merged directory loads: %s", err_msg());
    float *from_merged = batch_logprobs(&merged, &cells);
    int bad = 0;
    for (int i = 0; from_merged && adapted && i < cells; i++)
        bad += !harness_close(from_merged[i], adapted[i], 1e-5, 1e-6);
    CHECK(from_merged && bad == 0, "%d log-probs of the merged model differ from base + adapter",
          bad);
    model_free(&merged);
    free(from_merged);

    /* rlhf generate --adapter: greedy tokens equal to those of the merged model */
    write_text("prompts.jsonl", "{\"prompt\": \"Add 5 and 8.\"}\n{\"prompt\": \"Add 1\"}\n");
    char gen_a[4200], gen_m[4200];
    snprintf(gen_a, sizeof gen_a, "%s", harness_tmp_path("gen-adapter.jsonl"));
    snprintf(gen_m, sizeof gen_m, "%s", harness_tmp_path("gen-merged.jsonl"));
    char *with_adapter[] = {"--model",
                            base,
                            "--adapter",
                            straight,
                            "--prompts",
                            (char *)harness_tmp_path("prompts.jsonl"),
                            "--temperature",
                            "0",
                            "--max-new-tokens",
                            "12",
                            "--out",
                            gen_a};
    CHECK(cli_generate(12, with_adapter) == CLI_EXIT_OK, "generate --adapter: %s", err_msg());
    char *with_merged[] = {
        "--model",       path, "--prompts",        (char *)harness_tmp_path("prompts.jsonl"),
        "--temperature", "0",  "--max-new-tokens", "12",
        "--out",         gen_m};
    CHECK(cli_generate(10, with_merged) == CLI_EXIT_OK, "generate merged: %s", err_msg());
    CHECK(same_token_ids(gen_a, gen_m), "greedy tokens with --adapter equal the merged model's");
    free(plain);
    free(adapted);
    lora_free(&lora);
    model_free(&m);

    /* resume from checkpoint-4 (mid-epoch, dropout on): the adapter of the straight run */
    snprintf(path, sizeof path, "%s/checkpoint-4", straight);
    const char *resume_kv[] = {"--output_dir", resumed, "--resume_from_checkpoint", path};
    CHECK(run(cli_train, resume_kv, 2) == CLI_EXIT_OK, "resume: %s", err_msg());
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", straight);
    snprintf(other, sizeof other, "%s/adapter_model.safetensors", resumed);
    CHECK(harness_same_file(path, other), "4 steps + resume give the adapter of 9 straight steps");

    /* gradient checkpointing recomputes the same dropout masks: the same adapter, bit for bit */
    const char *gc_kv[] = {"--output_dir", harness_tmp_path("checkpointed"),
                           "--gradient_checkpointing", "true"};
    CHECK(run(cli_train, gc_kv, 2) == CLI_EXIT_OK, "gradient checkpointing: %s", err_msg());
    snprintf(other, sizeof other, "%s/adapter_model.safetensors", harness_tmp_path("checkpointed"));
    CHECK(harness_same_file(path, other), "gradient checkpointing changes the trained adapter");

    /* continue from the trained adapter with lora_model_dir */
    const char *cont_kv[] = {"--output_dir",     harness_tmp_path("continued"),
                             "--lora_model_dir", straight,
                             "--max_steps",      "2"};
    CHECK(run(cli_train, cont_kv, 3) == CLI_EXIT_OK, "lora_model_dir: %s", err_msg());
    double c_first = 0, c_last = 0;
    loss_range(harness_tmp_path("continued"), &c_first, &c_last, &lines);
    CHECK(lines == 2 && c_first < first - 0.5,
          "continuing starts from the trained adapter: loss %.3f (fresh %.3f)", c_first, first);
}

static void expect_failure(int (*command)(int, char **), const char *const *kv, int n,
                           const char *what, const char *want1, const char *want2) {
    err_clear();
    int rc = run(command, kv, n);
    CHECK(rc == CLI_EXIT_FAILURE, "%s: exit %d", what, rc);
    CHECK(strstr(err_msg(), want1) != NULL, "%s: \"%s\" lacks \"%s\"", what, err_msg(), want1);
    CHECK(!want2 || strstr(err_msg(), want2) != NULL, "%s: \"%s\" lacks \"%s\"", what, err_msg(),
          want2);
}

static void test_errors(void) {
    const char *out = harness_tmp_path("bad-out");
    const char *nothing[] = {"--output_dir",          out,
                             "--lora_target_linear",  "false",
                             "--lora_target_modules", "c_attn,c_proj"};
    expect_failure(cli_train, nothing, 3, "targets matching nothing", "lora.yaml",
                   "matches no module");
    const char *zero[] = {"--output_dir", out, "--lora_r", "0"};
    expect_failure(cli_train, zero, 2, "r 0", "'lora_r': must be positive", NULL);
    const char *missing[] = {"--output_dir", out, "--lora_model_dir",
                             harness_tmp_path("no-adapter")};
    expect_failure(cli_train, missing, 2, "missing lora_model_dir", "lora_model_dir",
                   "does not exist");

    /* an adapter made for a model with another MLP width: its down_proj A is (r, 48) */
    Model m;
    CHECK(model_load(&m, base) == 0, "%s", err_msg());
    ModelConfig narrow = m.cfg;
    narrow.intermediate_size = 48;
    const char *targets[] = {"down_proj"};
    LoraAdapter a;
    CHECK(lora_create(&a, &narrow, 2, 4, false, 0, targets, 1, 1) == 0, "%s", err_msg());
    const char *dir = harness_tmp_path("narrow-adapter");
    CHECK(mkdir(dir, 0755) == 0 && lora_save(&a, dir, base) == 0, "%s", err_msg());
    lora_free(&a);
    model_free(&m);
    const char *misfit[] = {"--output_dir", out, "--lora_model_dir", dir};
    expect_failure(cli_train, misfit, 2, "misfit adapter", "adapter_model.safetensors",
                   "down_proj.lora_A.weight");
    char *score_args[] = {"--model", base, "--adapter", (char *)dir, "--data", "x.jsonl"};
    err_clear();
    CHECK(cli_score(6, score_args) == CLI_EXIT_FAILURE, "score with a misfit adapter fails");

    const char *merge_missing[] = {"--output_dir", harness_tmp_path("nothing-here")};
    expect_failure(cli_merge_lora, merge_missing, 1, "merge without an adapter",
                   "LoRA adapter weights does not exist", NULL);
}

int main(void) {
    snprintf(base, sizeof base, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    write_config();
    test_training_and_resume();
    test_errors();
    return harness_finish("test_lora_train");
}
