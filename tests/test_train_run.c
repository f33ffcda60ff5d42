/* `rlhf train` end to end on the llama_text fixture (a tiny Llama with a tokenizer): an alpaca
 * and a completion dataset train, the loss falls, metrics.jsonl has HF's keys, the output
 * directory loads again, a second identical run gives bitwise identical weights, and bad inputs
 * are clear errors. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

static char base[4096];

static void write_text(const char *name, const char *text) {
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

static void write_datasets(void) {
    char *alpaca = xmalloc(1 << 16), *completion = xmalloc(1 << 16);
    size_t na = 0, nc = 0;
    for (int i = 0; i < 16; i++) {
        na += (size_t)snprintf(alpaca + na, (1 << 16) - na,
                               "{\"instruction\": \"What is %d plus %d?\", \"input\": \"\", "
                               "\"output\": \"%d\"}\n",
                               i, 2 * i, 3 * i);
        nc += (size_t)snprintf(completion + nc, (1 << 16) - nc,
                               "{\"text\": \"The number %d comes after %d.\"}\n", i + 1, i);
    }
    write_text("alpaca.jsonl", alpaca);
    write_text("completion.jsonl", completion);
    free(alpaca);
    free(completion);
}

static int train(const char *config, const char *out_dir) {
    char *args[] = {(char *)config, "--output_dir", (char *)out_dir};
    return cli_train(3, args);
}

static void write_config(const char *name, const char *extra) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\n"
             "datasets:\n"
             "  - path: %s\n    type: alpaca\n"
             "  - path: %s\n    type: completion\n"
             "sequence_len: 128\nmicro_batch_size: 4\ngradient_accumulation_steps: 2\n"
             "num_epochs: 3\nlearning_rate: 3e-3\nwarmup_steps: 1\nlogging_steps: 1\nseed: 7\n"
             "dataset_prepared_path: %s\n%s",
             base, harness_tmp_path("alpaca.jsonl"), harness_tmp_path("completion.jsonl"),
             harness_tmp_path("prepared"), extra);
    write_text(name, text);
}

static void test_training(void) {
    write_config("sft.yaml", "");
    char config[4096], out1[4096], out2[4096];
    snprintf(config, sizeof config, "%s", harness_tmp_path("sft.yaml"));
    snprintf(out1, sizeof out1, "%s", harness_tmp_path("run1"));
    snprintf(out2, sizeof out2, "%s", harness_tmp_path("run2"));
    CHECK(train(config, out1) == CLI_EXIT_OK, "train: %s", err_msg());

    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out1);
    char *text = NULL;
    CHECK(read_file(path, &text, NULL) == 0, "metrics.jsonl");
    int lines = 0;
    double first = 0, last = 0;
    for (char *save = NULL, *l = text ? strtok_r(text, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *row;
        CHECK(json_load_text(l, strlen(l), "metrics", &row) == 0, "metrics line: %s", l);
        const char *keys[] = {"loss", "grad_norm", "learning_rate", "epoch", "step"};
        for (int k = 0; k < 5; k++)
            CHECK(json_object_get(row, keys[k]) != NULL, "key %s", keys[k]);
        double loss = json_number_value(json_object_get(row, "loss"));
        if (lines++ == 0) first = loss;
        last = loss;
        json_decref(row);
    }
    free(text);
    /* 32 examples / 4 = 8 micro-batches / 2 = 4 steps per epoch, 3 epochs */
    CHECK(lines == 12, "%d metrics lines, expected 12 (one per step)", lines);
    CHECK(last < first - 1.0, "the loss falls: first %.3f, last %.3f", first, last);

    Model m;
    CHECK(model_load(&m, out1) == 0, "the output directory loads: %s", err_msg());
    model_free(&m);
    snprintf(path, sizeof path, "%s/tokenizer.json", out1);
    CHECK(file_exists(path), "tokenizer.json copied");

    /* same config, seed and thread count: bitwise identical weights */
    CHECK(train(config, out2) == CLI_EXIT_OK, "second run: %s", err_msg());
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/model.safetensors", out1);
    snprintf(b, sizeof b, "%s/model.safetensors", out2);
    char *wa = NULL, *wb = NULL;
    size_t la = 0, lb = 0;
    CHECK(read_file(a, &wa, &la) == 0 && read_file(b, &wb, &lb) == 0, "read weights");
    CHECK(la == lb && wa && wb && memcmp(wa, wb, la) == 0, "two runs give identical weights");
    free(wa);
    free(wb);
}

static int train_with(const char *config, const char *const *kv, int n) {
    char *args[32];
    args[0] = (char *)config;
    for (int i = 0; i < 2 * n; i++)
        args[1 + i] = (char *)kv[i];
    return cli_train(1 + 2 * n, args);
}

/* Resumes `config` from `straight`'s checkpoint-3 to step 6 in `resumed` and checks that the
 * final weights are those of the straight 6-step run, bit for bit. */
static void check_resume_matches(const char *config, const char *straight, const char *resumed,
                                 const char *what) {
    char ckpt[4200], path_a[4300], path_b[4300];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-3", straight);
    const char *args[] = {"--max_steps",
                          "6",
                          "--save_steps",
                          "3",
                          "--output_dir",
                          resumed,
                          "--resume_from_checkpoint",
                          ckpt};
    CHECK(train_with(config, args, 4) == CLI_EXIT_OK, "%s, resumed run: %s", what, err_msg());
    snprintf(path_a, sizeof path_a, "%s/model.safetensors", straight);
    snprintf(path_b, sizeof path_b, "%s/model.safetensors", resumed);
    CHECK(harness_same_file(path_a, path_b), "%s: 3 steps + resume gives the weights of 6 steps",
          what);
}

/* 6 steps straight vs 3 steps + resume for 3 (the run crosses an epoch boundary at step 4):
 * identical final weights, bit for bit. */
static void test_resume(void) {
    char config[4096], a[4096], b[4096], c[4096], ckpt[4200], path_a[4300], path_b[4300];
    snprintf(config, sizeof config, "%s", harness_tmp_path("sft.yaml"));
    snprintf(a, sizeof a, "%s", harness_tmp_path("straight"));
    snprintf(b, sizeof b, "%s", harness_tmp_path("resumed"));
    snprintf(c, sizeof c, "%s", harness_tmp_path("latest"));
    const char *straight[] = {"--max_steps", "6", "--save_steps", "3", "--output_dir", a};
    CHECK(train_with(config, straight, 3) == CLI_EXIT_OK, "straight run: %s", err_msg());
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-3", a);
    CHECK(dir_exists(ckpt), "checkpoint-3 written");
    snprintf(path_a, sizeof path_a, "%s/checkpoint-6/trainer_state.json", a);
    json_t *state = NULL;
    CHECK(json_load_path(path_a, &state) == 0, "trainer_state.json: %s", err_msg());
    CHECK(json_integer_value(json_object_get(state, "global_step")) == 6 &&
              json_array_size(json_object_get(state, "log_history")) == 6,
          "trainer_state.json: global_step and log_history");
    json_decref(state);

    check_resume_matches(config, a, b, "fp32 AdamW");
    snprintf(path_a, sizeof path_a, "%s/model.safetensors", a);

    /* resume_from_checkpoint: true takes the latest checkpoint-N; a half-written temporary
     * directory from an interrupted save is not a checkpoint */
    char copy_cmd[16384], stray[4300];
    snprintf(copy_cmd, sizeof copy_cmd, "mkdir -p '%s' && cp -r '%s' '%s/'", c, ckpt, c);
    CHECK(system(copy_cmd) == 0, "copy checkpoint");
    snprintf(stray, sizeof stray, "%s/.checkpoint-5.tmp", c);
    CHECK(mkdir(stray, 0755) == 0, "stray temp dir");
    const char *latest[] = {"--max_steps", "6", "--output_dir", c, "--resume_from_checkpoint",
                            "true"};
    CHECK(train_with(config, latest, 3) == CLI_EXIT_OK, "resume true: %s", err_msg());
    snprintf(path_b, sizeof path_b, "%s/model.safetensors", c);
    CHECK(harness_same_file(path_a, path_b),
          "resume from the latest checkpoint gives the same weights");

    /* rotation keeps the newest save_total_limit checkpoints */
    const char *rotating[] = {
        "--max_steps",        "6", "--save_steps", "1",
        "--save_total_limit", "2", "--output_dir", harness_tmp_path("rotating")};
    CHECK(train_with(config, rotating, 4) == CLI_EXIT_OK, "rotating run: %s", err_msg());
    for (int step = 1; step <= 6; step++) {
        char dir[4300];
        snprintf(dir, sizeof dir, "%s/checkpoint-%d", harness_tmp_path("rotating"), step);
        CHECK(dir_exists(dir) == (step >= 5), "checkpoint-%d %s", step,
              step >= 5 ? "kept" : "rotated out");
    }
    const char *none[] = {"--output_dir", harness_tmp_path("empty-out"), "--resume_from_checkpoint",
                          "true"};
    CHECK(train_with(config, none, 2) == CLI_EXIT_FAILURE && strstr(err_msg(), "no checkpoint"),
          "resume with no checkpoint: %s", err_msg());
}

/* optimizer: adamw_8bit: the checkpoint keeps the lm_head's moments as bitsandbytes' codes and
 * the embedding's in fp32; 3 steps + resume give the weights of 6 straight steps; the run differs
 * from one with fp32 moments; a checkpoint of the other optimizer is refused by name. */
static void test_eight_bit(void) {
    char saved_base[sizeof base];
    snprintf(saved_base, sizeof saved_base, "%s", base);
    snprintf(base, sizeof base, "%s", harness_write_untied_llama_text());
    write_config("adam8.yaml", "optimizer: adamw_8bit\n");
    write_config("adam32.yaml", "");
    snprintf(base, sizeof base, "%s", saved_base);
    char c8[4096], c32[4096], a[4096], b[4096], f32[4096], ckpt[4200], path[4300], other[4300];
    snprintf(c8, sizeof c8, "%s", harness_tmp_path("adam8.yaml"));
    snprintf(c32, sizeof c32, "%s", harness_tmp_path("adam32.yaml"));
    snprintf(a, sizeof a, "%s", harness_tmp_path("adam8-straight"));
    snprintf(b, sizeof b, "%s", harness_tmp_path("adam8-resumed"));
    snprintf(f32, sizeof f32, "%s", harness_tmp_path("adam32"));
    const char *straight[] = {"--max_steps", "6", "--save_steps", "3", "--output_dir", a};
    CHECK(train_with(c8, straight, 3) == CLI_EXIT_OK, "8-bit run: %s", err_msg());

    snprintf(path, sizeof path, "%s/checkpoint-3/optimizer.safetensors", a);
    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    const SafetensorsTensor *codes = safetensors_find(&f, "state1.lm_head.weight"),
                            *scales = safetensors_find(&f, "absmax2.lm_head.weight"),
                            *embed = safetensors_find(&f, "exp_avg_sq.model.embed_tokens.weight");
    CHECK(codes && codes->dtype == ST_U8 && scales && scales->dtype == ST_F32 &&
              scales->numel == (codes->numel + 255) / 256,
          "lm_head: uint8 codes and one scale per 256 values");
    CHECK(embed && embed->dtype == ST_F32, "embedding: fp32 moments");
    CHECK(!safetensors_find(&f, "exp_avg.lm_head.weight"), "lm_head: no fp32 moments");
    safetensors_close(&f);

    check_resume_matches(c8, a, b, "8-bit AdamW");
    snprintf(path, sizeof path, "%s/model.safetensors", a);

    const char *plain[] = {"--max_steps", "6", "--save_steps", "3", "--output_dir", f32};
    CHECK(train_with(c32, plain, 3) == CLI_EXIT_OK, "fp32 run: %s", err_msg());
    snprintf(other, sizeof other, "%s/model.safetensors", f32);
    CHECK(!harness_same_file(path, other), "8-bit moments change the trained weights");

    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-3", f32);
    /* the checkpoint's run record names the optimizer that differs */
    const char *recorded[] = {"--max_steps",
                              "6",
                              "--output_dir",
                              harness_tmp_path("adam-recorded"),
                              "--resume_from_checkpoint",
                              ckpt};
    CHECK(train_with(c8, recorded, 3) == CLI_EXIT_FAILURE && strstr(err_msg(), "another config") &&
              strstr(err_msg(), "optimizer (unset -> \"adamw_8bit\")"),
          "a checkpoint of another optimizer, by its run record: %s", err_msg());
    /* without the record (a checkpoint of an older rlhf.c), the moments themselves tell */
    snprintf(path, sizeof path, "%s/rlhf_run.json", ckpt);
    CHECK(remove(path) == 0, "remove %s", path);
    const char *mixed[] = {"--max_steps",
                           "6",
                           "--output_dir",
                           harness_tmp_path("adam-mixed"),
                           "--resume_from_checkpoint",
                           ckpt};
    CHECK(train_with(c8, mixed, 3) == CLI_EXIT_FAILURE &&
              strstr(err_msg(), "state1.lm_head.weight") && strstr(err_msg(), "another optimizer"),
          "an fp32 checkpoint resumed with 8-bit moments: %s", err_msg());
}

/* val_set_size holds examples out; eval_loss is logged every eval_steps with HF's eval_ prefix. */
static void test_evaluation(void) {
    char config[4096], out[4096], path[4300];
    snprintf(config, sizeof config, "%s", harness_tmp_path("sft.yaml"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("eval-run"));
    const char *kv[] = {"--max_steps",  "4", "--val_set_size", "0.25",
                        "--eval_steps", "2", "--output_dir",   out};
    CHECK(train_with(config, kv, 4) == CLI_EXIT_OK, "eval run: %s", err_msg());
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    char *text = NULL;
    CHECK(read_file(path, &text, NULL) == 0, "metrics");
    int evals = 0;
    for (char *save = NULL, *l = text ? strtok_r(text, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *row;
        if (json_load_text(l, strlen(l), "metrics", &row) != 0) continue;
        json_t *e = json_object_get(row, "eval_loss");
        if (e) {
            evals++;
            int64_t step = json_integer_value(json_object_get(row, "step"));
            CHECK(step == 2 * evals, "eval at step %lld", (long long)step);
            CHECK(json_number_value(e) > 0 && json_number_value(e) < 20, "eval_loss %g",
                  json_number_value(e));
        }
        json_decref(row);
    }
    free(text);
    CHECK(evals == 2, "%d eval lines for 4 steps every 2", evals);
    /* test_datasets: held-out data from its own files, evaluated at the end */
    char extra[4200];
    snprintf(extra, sizeof extra, "test_datasets:\n  - path: %s\n    type: completion\n",
             harness_tmp_path("completion.jsonl"));
    write_config("sft_test.yaml", extra);
    snprintf(path, sizeof path, "%s", harness_tmp_path("sft_test.yaml"));
    char eval_out[4096]; /* (harness_tmp_path's buffers are reused by the calls below) */
    snprintf(eval_out, sizeof eval_out, "%s", harness_tmp_path("eval-test"));
    const char *two[] = {"--max_steps", "2", "--output_dir", eval_out};
    CHECK(train_with(path, two, 2) == CLI_EXIT_OK, "test_datasets: %s", err_msg());
    snprintf(out, sizeof out, "%s/metrics.jsonl", harness_tmp_path("eval-test"));
    text = NULL;
    CHECK(read_file(out, &text, NULL) == 0 && text && strstr(text, "\"eval_loss\""),
          "test_datasets: eval_loss logged");
    free(text);
    snprintf(extra, sizeof extra, "test_datasets:\n  - path: %s\n    type: completion\n",
             harness_tmp_path("no-such.jsonl"));
    write_config("sft_test_missing.yaml", extra);
    snprintf(path, sizeof path, "%s", harness_tmp_path("sft_test_missing.yaml"));
    snprintf(eval_out, sizeof eval_out, "%s", harness_tmp_path("eval-missing"));
    CHECK(train_with(path, two, 2) == CLI_EXIT_FAILURE && strstr(err_msg(), "test_datasets") &&
              strstr(err_msg(), "no-such.jsonl") && !strstr(err_msg(), "another run"),
          "a missing test dataset: %s", err_msg());
    const char *all[] = {"--val_set_size", "32", "--output_dir", harness_tmp_path("eval-bad")};
    CHECK(train_with(config, all, 2) == CLI_EXIT_FAILURE && strstr(err_msg(), "leaves no training"),
          "val_set_size too large: %s", err_msg());
}

/* rlhf preprocess fills the cache, train reuses it with the same result, another dataset gets
 * another key, and a damaged cache is rebuilt with a warning. */
static void test_preprocess_cache(void) {
    char config[4096], prep[4096], out_cached[4096], out_fresh[4096];
    snprintf(config, sizeof config, "%s", harness_tmp_path("sft.yaml"));
    snprintf(prep, sizeof prep, "%s", harness_tmp_path("prep-cache"));
    snprintf(out_cached, sizeof out_cached, "%s", harness_tmp_path("out-cached"));
    snprintf(out_fresh, sizeof out_fresh, "%s", harness_tmp_path("out-fresh"));
    char *pre[] = {config, "--dataset_prepared_path", prep};
    CHECK(cli_preprocess(3, pre) == CLI_EXIT_OK, "preprocess: %s", err_msg());
    char find[8192];
    snprintf(find, sizeof find, "ls '%s' | wc -l | grep -qx 1", prep);
    CHECK(system(find) == 0, "one cache directory");

    const char *cached[] = {"--max_steps",  "3",       "--dataset_prepared_path", prep,
                            "--output_dir", out_cached};
    CHECK(train_with(config, cached, 3) == CLI_EXIT_OK, "train from the cache: %s", err_msg());
    /* a prepared path whose parent does not exist yet (the quickstart's outputs/prepared) */
    char prep_nested[4096];
    snprintf(prep_nested, sizeof prep_nested, "%s", harness_tmp_path("prep-other/nested"));
    const char *fresh[] = {"--max_steps",  "3",      "--dataset_prepared_path", prep_nested,
                           "--output_dir", out_fresh};
    CHECK(train_with(config, fresh, 3) == CLI_EXIT_OK, "train without a cache: %s", err_msg());
    snprintf(find, sizeof find, "ls '%s' | wc -l | grep -qx 1", prep_nested);
    CHECK(system(find) == 0, "the cache is written under a prepared path with missing parents");
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/model.safetensors", out_cached);
    snprintf(b, sizeof b, "%s/model.safetensors", out_fresh);
    CHECK(harness_same_file(a, b), "the cached dataset trains to the same weights");

    /* damage the cache: truncate examples.bin; train warns, rebuilds, and gets the same weights */
    snprintf(find, sizeof find, "f=$(ls -d '%s'/*/examples.bin) && truncate -s 100 \"$f\"", prep);
    CHECK(system(find) == 0, "truncate the cache");
    CHECK(train_with(config, cached, 3) == CLI_EXIT_OK, "train over a damaged cache: %s",
          err_msg());
    CHECK(harness_same_file(a, b), "a rebuilt cache trains to the same weights");

    /* another dataset, another key */
    char other[16384];
    snprintf(other, sizeof other,
             "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\nlearning_rate: 1e-3\n"
             "dataset_prepared_path: %s\n",
             base, harness_tmp_path("completion.jsonl"), prep);
    write_text("other.yaml", other);
    char other_path[4096];
    snprintf(other_path, sizeof other_path, "%s", harness_tmp_path("other.yaml"));
    char *pre2[] = {other_path};
    CHECK(cli_preprocess(1, pre2) == CLI_EXIT_OK, "preprocess other: %s", err_msg());
    snprintf(find, sizeof find, "ls '%s' | wc -l | grep -qx 2", prep);
    CHECK(system(find) == 0, "a second cache directory for another dataset");
}

static void expect_train_error(const char *name, const char *config_text, const char *want1,
                               const char *want2) {
    write_text(name, config_text);
    err_clear();
    int rc = train(harness_tmp_path(name), harness_tmp_path("bad-out"));
    CHECK(rc == CLI_EXIT_FAILURE, "%s: exit %d", name, rc);
    CHECK(strstr(err_msg(), want1) != NULL, "%s: \"%s\" lacks \"%s\"", name, err_msg(), want1);
    CHECK(!want2 || strstr(err_msg(), want2) != NULL, "%s: \"%s\" lacks \"%s\"", name, err_msg(),
          want2);
}

static void test_errors(void) {
    char text[8192];
    write_text("bad-row.jsonl",
               "{\"instruction\": \"a\", \"output\": \"b\"}\n{\"instruction\": \"c\"}\n");
    snprintf(text, sizeof text,
             "base_model: %s\nlearning_rate: 1e-3\ndatasets:\n  - path: %s\n    type: alpaca\n",
             base, harness_tmp_path("bad-row.jsonl"));
    expect_train_error("row.yaml", text, "bad-row.jsonl:2:", "missing field \"output\"");
    snprintf(text, sizeof text,
             "base_model: %s\nlearning_rate: 1e-3\ndatasets:\n  - path: %s\n    type: alpaca\n",
             base, harness_tmp_path("no-such.jsonl"));
    expect_train_error("missing.yaml", text, "no-such.jsonl", "datasets[0].path: ");
    snprintf(text, sizeof text,
             "base_model: %s\nlearning_rate: 1e-3\nrl: grpo\ndatasets:\n  - path: %s\n    type: "
             "alpaca\n",
             base, harness_tmp_path("alpaca.jsonl"));
    /* GRPO's defaults (8 generations) do not fit one completion per step: Axolotl's advice */
    expect_train_error("rl.yaml", text, "rl.yaml: GRPO: generation batch size must be divisible",
                       "set `gradient_accumulation_steps: 8`");
    snprintf(text, sizeof text,
             "base_model: %s\nlearning_rate: 1e-3\ndatasets:\n  - path: %s\n    type: sharegpt\n",
             base, harness_tmp_path("alpaca.jsonl"));
    expect_train_error("type.yaml", text, "datasets[0].type", "\"sharegpt\" is not supported");
    expect_train_error("rlval.yaml",
                       "base_model: x\nlearning_rate: 1\nrl: ppo\ndatasets: [{path: a}]\n",
                       "rlval.yaml:3: key 'rl'", "unknown method");
}

int main(void) {
    snprintf(base, sizeof base, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    write_datasets();
    test_training();
    test_resume();
    test_eight_bit();
    test_evaluation();
    test_preprocess_cache();
    test_errors();
    return harness_finish("test_train_run");
}
