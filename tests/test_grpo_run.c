/* `rlhf train` with rl: grpo end to end on the llama_text fixture: TRL's metric keys are logged;
 * a run resumed from a checkpoint ends at the weights of the uninterrupted run (the checkpoint
 * keeps torch's generator, so the resumed run samples the same completions);
 * Ctrl-C saves a checkpoint (replay buffer included), exits 130 and resumes to the same weights;
 * a reward command that fails stops the run with an error naming it and leaves the last
 * checkpoint whole; bad GRPO settings are clear errors. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/model_dir.h"
#include "python/py_embed.h"
#include "trained_weights.h"
#include "model/model.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *write_config(const char *name, const char *extra_trl, const char *extra) {
    static char path[4096];
    char text[16384], model[2048], prompts[4096];
    snprintf(prompts, sizeof prompts, "%s", harness_write_grpo_prompts());
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n  beta: 0.05\n"
             "  reward_funcs:\n    - {function: builtin.length, target: 3}\n%s"
             "micro_batch_size: 8\ngradient_accumulation_steps: 1\nmax_steps: 4\n"
             "learning_rate: 5e-3\nlr_scheduler: constant\nwarmup_steps: 0\nseed: 5\n%s",
             model, prompts, extra_trl, extra);
    snprintf(path, sizeof path, "%s", harness_tmp_path(name));
    harness_write_file(path, text, strlen(text));
    return path;
}

static int train(const char *config, const char *out, const char *resume) {
    char *args[] = {(char *)config, "--output_dir", (char *)out, "--resume_from_checkpoint",
                    (char *)resume};
    err_clear();
    return cli_train(resume ? 5 : 3, args);
}

static void test_metrics(void) {
    const char *cfg = write_config("basic.yaml", "", "");
    char out[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("basic"));
    CHECK(train(cfg, out, NULL) == CLI_EXIT_OK, "%s", err_msg());
    json_t *rows = harness_read_metrics(out);
    CHECK(json_array_size(rows) == 4, "4 log lines, got %zu", json_array_size(rows));
    static const char *const keys[] = {"loss",
                                       "grad_norm",
                                       "learning_rate",
                                       "num_tokens",
                                       "completions/mean_length",
                                       "completions/clipped_ratio",
                                       "completions/mean_terminated_length",
                                       "rewards/length/mean",
                                       "rewards/length/std",
                                       "reward",
                                       "reward_std",
                                       "frac_reward_zero_std",
                                       "kl",
                                       "entropy",
                                       "clip_ratio/region_mean",
                                       "step_time",
                                       "time/generation",
                                       "time/training",
                                       "epoch"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CHECK(json_object_get(json_array_get(rows, 0), keys[k]) != NULL, "no \"%s\" logged",
              keys[k]);
    /* invariants: the first step starts at the reference (KL 0); the length reward is in [0, 1];
     * tokens only grow */
    CHECK(fabs(harness_metric(rows, 0, "kl")) < 1e-6, "kl at step 1: %g",
          harness_metric(rows, 0, "kl"));
    for (size_t i = 0; i < json_array_size(rows); i++) {
        double r = harness_metric(rows, i, "reward");
        CHECK(r >= 0 && r <= 1, "reward %g in [0, 1]", r);
        /* logging_steps 1: the split of a step lies within it */
        double gen = harness_metric(rows, i, "time/generation"),
               rew = harness_metric(rows, i, "time/rewards"),
               trn = harness_metric(rows, i, "time/training");
        CHECK(gen > 0 && rew >= 0 && trn > 0 &&
                  gen + rew + trn <= harness_metric(rows, i, "step_time") + 1e-6,
              "line %zu: generation %g + rewards %g + training %g s within the step's %g s", i + 1,
              gen, rew, trn, harness_metric(rows, i, "step_time"));
        if (i)
            CHECK(harness_metric(rows, i, "num_tokens") > harness_metric(rows, i - 1, "num_tokens"),
                  "num_tokens grows");
    }
    json_decref(rows);
}

static void test_resume(void) {
    const char *cfg = write_config("resume.yaml", "", "save_steps: 2\n");
    char full[4096], resumed[4096], ckpt[4200];
    snprintf(full, sizeof full, "%s", harness_tmp_path("full"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("resumed"));
    CHECK(train(cfg, full, NULL) == CLI_EXIT_OK, "%s", err_msg());
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", full);
    CHECK(train(cfg, resumed, ckpt) == CLI_EXIT_OK, "%s", err_msg());
    double gap = saved_weights_gap(full, resumed, NULL);
    CHECK(gap == 0, "resumed run ends %g from the uninterrupted one", gap);
    json_t *a = harness_read_metrics(full), *b = harness_read_metrics(resumed);
    CHECK(json_array_size(b) == 2 &&
              harness_metric(a, 2, "num_tokens") == harness_metric(b, 0, "num_tokens"),
          "the token count goes on from the checkpoint's");
    json_decref(a);
    json_decref(b);
}

/* The replay buffer: its metrics are logged, it travels in the checkpoint, and a run resumed
 * from there ends where the uninterrupted one does. */
/* val_set_size: held-out prompts are generated and scored every eval_steps, never trained on. */
static void test_evaluation(void) {
    const char *cfg = write_config("eval.yaml", "", "val_set_size: 4\neval_steps: 2\n");
    char out[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("eval"));
    CHECK(train(cfg, out, NULL) == CLI_EXIT_OK, "%s", err_msg());
    json_t *rows = harness_read_metrics(out);
    int evals = 0;
    double trained_tokens = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        if (json_object_get(r, "num_tokens"))
            trained_tokens = harness_metric(rows, i, "num_tokens");
        if (!json_object_get(r, "eval_reward")) continue;
        evals++;
        CHECK(json_object_get(r, "eval_completions/mean_length") && !json_object_get(r, "loss"),
              "an eval line has eval_ metrics only");
        /* TRL: eval_num_tokens is its training token counter (evaluation adds nothing). */
        CHECK(trained_tokens > 0 && harness_metric(rows, i, "eval_num_tokens") == trained_tokens,
              "eval_num_tokens %.0f = tokens trained on so far %.0f",
              harness_metric(rows, i, "eval_num_tokens"), trained_tokens);
    }
    CHECK(evals == 2, "%d evaluations in 4 steps with eval_steps 2", evals);
    json_decref(rows);
}

static void test_replay_resume(void) {
    const char *trl = "    - {function: builtin.format, pattern: '^[a-m]', match: search}\n"
                      "  replay_buffer_size: 3\n";
    const char *cfg = write_config("replay.yaml", trl, "save_steps: 2\n");
    char full[4096], resumed[4096], ckpt[4200], file[4300];
    snprintf(full, sizeof full, "%s", harness_tmp_path("replay-full"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("replay-resumed"));
    CHECK(train(cfg, full, NULL) == CLI_EXIT_OK, "%s", err_msg());
    json_t *rows = harness_read_metrics(full);
    double size = harness_metric(rows, 1, "replay/buffer_size");
    CHECK(size >= 1 && size <= 3, "replay/buffer_size %g within capacity 3", size);
    double replaced = 0;
    for (size_t i = 0; i < json_array_size(rows); i++)
        replaced += harness_metric(rows, i, "replay/num_replaced");
    CHECK(replaced > 0, "zero-spread groups were replaced from the buffer");
    json_decref(rows);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", full);
    snprintf(file, sizeof file, "%s/replay_buffer.safetensors", ckpt);
    CHECK(file_exists(file), "the checkpoint holds the replay buffer");
    CHECK(train(cfg, resumed, ckpt) == CLI_EXIT_OK, "%s", err_msg());
    double gap = saved_weights_gap(full, resumed, NULL);
    CHECK(gap == 0, "resumed replay run ends %g from the uninterrupted one", gap);
}

/* Ctrl-C in a GRPO run with a replay buffer: the step finishes, checkpoint-<step> is saved with
 * the buffer (save_steps 0), the exit status is 130, and the resumed run ends at the weights of
 * an uninterrupted one. */
static void test_sigint_resumes(void) {
    const char *trl = "    - {function: builtin.format, pattern: '^[a-m]', match: search}\n"
                      "  replay_buffer_size: 3\n";
    char cfg[4096], full[4096], stopped[4096], log[4096], path[4300];
    snprintf(cfg, sizeof cfg, "%s", write_config("sigint.yaml", trl, ""));
    snprintf(full, sizeof full, "%s", harness_tmp_path("sigint-full"));
    snprintf(stopped, sizeof stopped, "%s", harness_tmp_path("sigint-stopped"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("sigint.log"));
    const char *steps[] = {"--max_steps", "16", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, full, log, steps)) == 0, "straight run");
    pid_t pid = harness_spawn_train(cfg, stopped, log, steps);
    snprintf(path, sizeof path, "%s/metrics.jsonl", stopped);
    for (int i = 0; i < 60000; i++) { /* up to 60 s for the first logged step */
        char *text = NULL;
        bool logged = read_file(path, &text, NULL) == 0 && strchr(text, '\n');
        free(text);
        if (logged) break;
        usleep(1000);
    }
    kill(pid, SIGINT);
    int rc = harness_wait_child(pid);
    CHECK(rc == 130, "SIGINT: exit %d, expected 130", rc);
    json_t *rows = harness_read_metrics(stopped);
    long long reached = (long long)harness_metric(rows, json_array_size(rows) - 1, "step");
    json_decref(rows);
    CHECK(reached >= 1 && reached < 16, "stopped at step %lld", reached);
    snprintf(path, sizeof path, "%s/checkpoint-%lld/replay_buffer.safetensors", stopped, reached);
    CHECK(file_exists(path), "checkpoint-%lld saved with the replay buffer", reached);
    const char *resume[] = {"--max_steps", "16", "--resume_from_checkpoint", "true", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, stopped, log, resume)) == 0, "resumed run");
    double gap = saved_weights_gap(full, stopped, NULL);
    CHECK(gap == 0, "stopped at %lld + resumed ends %g from the uninterrupted run", reached, gap);
}

/* Axolotl's documentation rewards.py, unchanged (tests/fixtures/axolotl_rewards): its GSM8K
 * transform makes chat prompts and the answer column, its random reward and builtin.accuracy
 * score the completions, in a real run. rewards.py sits next to the config, not in the working
 * directory. A build without Python refuses the run, saying so. */
static void test_axolotl_docs_rewards(void) {
    char *py = NULL, dir[4096], path[4200], text[8192], rows[4096];
    size_t len = 0, n = 0;
    CHECK(read_file(harness_source_path("tests/fixtures/axolotl_rewards/rewards.py"), &py, &len) ==
              0,
          "%s", err_msg());
    snprintf(dir, sizeof dir, "%s", harness_tmp_path("docs"));
    CHECK(make_dirs(dir) == 0, "%s", err_msg());
    snprintf(path, sizeof path, "%s/rewards.py", dir);
    harness_write_file(path, py, len);
    free(py);
    for (int i = 0; i < 8; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"question\": \"Tom has %d apples and buys %d more. How many?\", "
                              "\"answer\": \"He has %d + %d = %d apples.\\n#### %d\"}\n",
                              i, 3 * i, i, 3 * i, 4 * i, 4 * i);
    snprintf(path, sizeof path, "%s/gsm8k.jsonl", dir);
    harness_write_file(path, rows, n);
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\nchat_template: chatml\ndatasets:\n  - path: %s\n"
             "    type: rewards.oai_gsm8k_transform\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n"
             "  reward_funcs: [rewards.rand_reward_func, builtin.accuracy]\n"
             "micro_batch_size: 8\nmax_steps: 2\nlearning_rate: 1e-3\nseed: 1\n",
             harness_source_path("tests/fixtures/models/llama_text"), path);
    snprintf(path, sizeof path, "%s/grpo.yaml", dir);
    harness_write_file(path, text, strlen(text));
    char out[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    int rc = train(path, out, NULL);
    if (!py_embed_compiled()) {
        /* a build without Python refuses the transform, the first Python the run meets */
        CHECK(rc == CLI_EXIT_FAILURE &&
                  strstr(err_msg(), "datasets[0]: dataset type "
                                    "'rewards.oai_gsm8k_transform' is a "
                                    "Python dataset transform, " PY_EMBED_ABSENT),
              "without Python: %s", err_msg());
        return;
    }
    CHECK(rc == CLI_EXIT_OK, "Axolotl's docs rewards.py: %s", err_msg());
    json_t *m = harness_read_metrics(out);
    double r = harness_metric(m, 0, "rewards/rand_reward_func/mean");
    CHECK(r > 0 && r < 1, "the random reward's mean %g is in (0, 1)", r);
    CHECK(json_object_get(json_array_get(m, 0), "rewards/accuracy/mean") != NULL,
          "builtin.accuracy read the transform's answer column");
    json_decref(m);
}

/* A reward command that answers two batches, then exits with status 3. */
static void test_failing_reward(void) {
    const char *trl = "    - {command: 'n=0; while read l; do n=$((n+1)); [ $n -gt 2 ] && exit 3; "
                      "echo \"[1,0,1,0,1,0,1,0]\"; done', name: flaky, timeout: 30}\n";
    const char *cfg = write_config("flaky.yaml", trl, "save_steps: 1\n");
    char out[4096], state[4300];
    snprintf(out, sizeof out, "%s", harness_tmp_path("flaky"));
    CHECK(train(cfg, out, NULL) == CLI_EXIT_FAILURE, "the run fails");
    CHECK(strstr(err_msg(), "flaky") && strstr(err_msg(), "status 3"),
          "the error names the reward function: %s", err_msg());
    snprintf(state, sizeof state, "%s/checkpoint-2/trainer_state.json", out);
    json_t *s = NULL;
    CHECK(json_load_path(state, &s) == 0, "checkpoint-2 is whole: %s", err_msg());
    CHECK(json_integer_value(json_object_get(s, "global_step")) == 2, "at step 2");
    json_decref(s);
    snprintf(state, sizeof state, "%s/checkpoint-3", out);
    CHECK(!dir_exists(state), "no checkpoint-3");
}

static void expect_error(const char *name, const char *trl, const char *extra, const char *want) {
    const char *cfg = write_config(name, trl, extra);
    CHECK(train(cfg, harness_tmp_path("bad-out"), NULL) == CLI_EXIT_FAILURE, "%s fails", name);
    CHECK(strstr(err_msg(), want) != NULL, "%s: \"%s\" lacks \"%s\"", name, err_msg(), want);
}

static void test_errors(void) {
    expect_error("agg.yaml", "  multi_objective_aggregation: sum_then_normalize\n", "rl: gdpo\n",
                 "=> GRPO, but GDPO was selected");
    expect_error("gen.yaml", "  num_generations: 3\n", "",
                 "generation batch size must be divisible by `trl.num_generations`");
    expect_error("fn.yaml", "    - builtin.nope\n", "", "trl.reward_funcs[1]");
    expect_error("loss.yaml", "  loss_type: sapo\n", "", "not supported by rlhf.c yet");
    expect_error("few.yaml", "", "micro_batch_size: 64\n", "a generation batch needs 16 distinct");
}

int main(void) {
    test_metrics();
    test_resume();
    test_evaluation();
    test_replay_resume();
    test_sigint_resumes();
    test_axolotl_docs_rewards();
    test_failing_reward();
    test_errors();
    return harness_finish("test_grpo_run");
}
