/* The public C API (include/rlhf.h) through librlhf.so, as an embedding program uses it: a
 * trainer from JSON text, a GRPO run with a C reward function (the batch it receives, the scores
 * it gives, its failure), the weights read before and after, the state and TrainOutput,
 * save_model, a stop request and a SIGINT that end the run with a checkpoint and leave the
 * host's SIGINT handler in place (and let a second SIGINT reach it), resuming, and errors
 * carrying the messages `rlhf train` prints. */
#include "rlhf.h"

#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *model_dir(void) {
    static char path[4096];
    snprintf(path, sizeof path, "%s", harness_source_path("models/tiny-arith"));
    return path;
}

static const char *prompts_file(void) {
    static char path[4096];
    if (!path[0]) {
        char rows[4096];
        size_t n = 0;
        for (int i = 0; i < 8; i++)
            n += (size_t)snprintf(rows + n, sizeof rows - n,
                                  "{\"prompt\": \"What is %d + %d?\", \"answer\": \"%d\"}\n", i,
                                  i + 1, 2 * i + 1);
        snprintf(path, sizeof path, "%s", harness_tmp_path("prompts.jsonl"));
        harness_write_file(path, rows, n);
    }
    return path;
}

/* A GRPO config as JSON text: 4 completions of 1 prompt per step, `steps` steps. */
static char *grpo_config(const char *out, const char *reward_name, int steps) {
    json_t *cfg = json_pack(
        "{s:s, s:s, s:[{s:s}], s:f, s:i, s:i, s:s, s:i, s:s, s:i, s:{s:i, s:i, s:[{s:s}]}}",
        "base_model", model_dir(), "rl", "grpo", "datasets", "path", prompts_file(),
        "learning_rate", 1e-3, "micro_batch_size", 4, "max_steps", steps, "output_dir", out,
        "logging_steps", 1, "lr_scheduler", "constant", "save_steps", 0, "trl", "num_generations",
        4, "max_completion_length", 4, "reward_funcs", "callback", reward_name);
    char *text = json_dumps(cfg, 0);
    json_decref(cfg);
    return text;
}

/* ---- reward functions ---- */

typedef struct {
    int calls;
    int stop_at;     /* call rlhf_request_stop on this call (0: never) */
    int signal_at;   /* raise SIGINT (twice) on this call (0: never) */
    int fail_at;     /* fail on this call (0: never) */
    int bad_batches; /* batches that did not look as rlhf.h says */
} RewardState;

/* Scores each completion by its length plus its place in the group (so that every group has
 * a spread to learn from); checks the batch is what rlhf.h promises. */
static int length_reward(void *user_data, const char *batch_json, size_t n, double *scores,
                         char *error, size_t error_size) {
    RewardState *st = user_data;
    st->calls++;
    json_t *batch = json_loads(batch_json, 0, NULL);
    const json_t *completions = json_object_get(batch, "completions");
    bool ok = json_array_size(json_object_get(batch, "prompts")) == n &&
              json_array_size(completions) == n &&
              json_array_size(json_object_get(batch, "completion_ids")) == n &&
              json_array_size(json_object_get(batch, "answer")) == n &&
              json_is_object(json_object_get(batch, "trainer_state"));
    for (size_t i = 0; ok && i < n; i++)
        ok = isnan(scores[i]); /* they arrive as "no score" */
    if (!ok) st->bad_batches++;
    for (size_t i = 0; i < n; i++) {
        const char *text = json_string_value(json_array_get(completions, i));
        scores[i] = (text ? (double)strlen(text) : 0.0) + (double)(i % 4); /* spread */
    }
    if (n > 1) scores[n - 1] = NAN; /* one "None" per batch is allowed */
    json_decref(batch);
    if (st->calls == st->stop_at) rlhf_request_stop();
    if (st->calls == st->signal_at) {
        raise(SIGINT); /* the library's handler: stop after this step */
        raise(SIGINT); /* the second one reaches the host's handler again */
    }
    if (st->calls == st->fail_at) {
        snprintf(error, error_size, "the judge is out to lunch");
        return 1;
    }
    return 0;
}

static json_t *state_of(rlhf_trainer *t) {
    return json_loads(rlhf_trainer_state(t), 0, NULL);
}

static bool dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- the tests ---- */

static void test_train_with_callback(void) {
    const char *out = harness_tmp_path("grpo");
    char *cfg = grpo_config(out, "length", 3);
    rlhf_trainer *t = NULL;
    CHECK(rlhf_trainer_create(cfg, "<test>", &t) == RLHF_OK, "%s", rlhf_last_error());
    free(cfg);
    if (!t) return;
    RewardState st = {0};
    CHECK(rlhf_trainer_set_reward(t, "length", length_reward, &st) == RLHF_OK, "set");

    /* the weights before */
    size_t count = rlhf_trainer_param_count(t);
    CHECK(count > 10, "%zu tensors", count);
    rlhf_param_info info;
    CHECK(rlhf_trainer_param_info(t, 0, &info) == RLHF_OK, "%s", rlhf_last_error());
    CHECK(strcmp(info.name, "model.embed_tokens.weight") == 0, "%s", info.name);
    CHECK(info.ndim == 2 && info.trainable && (size_t)(info.shape[0] * info.shape[1]) == info.numel,
          "shape");
    float *before = malloc(info.numel * sizeof *before),
          *after = malloc(info.numel * sizeof *after);
    CHECK(rlhf_trainer_param_read(t, 0, before, info.numel) == RLHF_OK, "read");
    CHECK(rlhf_trainer_param_read(t, 0, before, info.numel - 1) == RLHF_ERROR, "wrong size");
    CHECK(strstr(rlhf_last_error(), "model.embed_tokens.weight holds"), "%s", rlhf_last_error());
    CHECK(rlhf_trainer_param_info(t, count, &info) == RLHF_ERROR, "out of range");

    int rc = rlhf_trainer_train(t, NULL, 0);
    CHECK(rc == RLHF_OK, "train: %s", rlhf_last_error());
    CHECK(st.calls == 3 && st.bad_batches == 0, "calls %d, bad batches %d", st.calls,
          st.bad_batches);
    CHECK(rlhf_trainer_param_read(t, 0, after, info.numel) == RLHF_OK, "read after");
    CHECK(memcmp(before, after, info.numel * sizeof *after) != 0, "the weights did not change");
    free(before), free(after);

    json_t *state = state_of(t);
    CHECK(json_integer_value(json_object_get(state, "global_step")) == 3, "global_step");
    const json_t *output = json_object_get(state, "train_output");
    CHECK(json_integer_value(json_object_get(output, "global_step")) == 3, "train_output");
    CHECK(json_is_number(json_object_get(output, "training_loss")), "training_loss");
    const json_t *history = json_object_get(state, "log_history");
    CHECK(json_array_size(history) == 4, "3 steps and the summary: %zu", json_array_size(history));
    CHECK(json_object_get(json_array_get(history, 0), "rewards/length/mean"), "reward metric");
    CHECK(json_object_get(json_array_get(history, 3), "train_runtime"), "summary entry");
    json_decref(state);

    /* train() does not write the model; save_model does */
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors", out);
    CHECK(access(file, F_OK) != 0, "train wrote the model");
    CHECK(rlhf_trainer_save_model(t, out) == RLHF_OK, "%s", rlhf_last_error());
    CHECK(access(file, F_OK) == 0, "save_model wrote nothing");
    rlhf_trainer_free(t);
}

static void test_reward_failures(void) {
    char *cfg = grpo_config(harness_tmp_path("fail"), "judge", 3);
    rlhf_trainer *t = NULL;
    CHECK(rlhf_trainer_create(cfg, "<test>", &t) == RLHF_OK, "%s", rlhf_last_error());
    free(cfg);
    if (!t) return;
    /* nothing registered under the name the config uses */
    CHECK(rlhf_trainer_train(t, NULL, 0) == RLHF_ERROR, "unregistered");
    CHECK(strstr(rlhf_last_error(), "trl.reward_funcs[0]: no reward function is registered "
                                    "under the name 'judge'"),
          "%s", rlhf_last_error());
    RewardState st = {.fail_at = 2};
    rlhf_trainer_set_reward(t, "judge", length_reward, &st);
    CHECK(rlhf_trainer_train(t, NULL, 0) == RLHF_ERROR, "failing reward");
    CHECK(strcmp(rlhf_last_error(), "reward function judge failed: the judge is out to lunch") == 0,
          "%s", rlhf_last_error());
    json_t *state = state_of(t);
    CHECK(json_integer_value(json_object_get(state, "global_step")) == 1, "one step done");
    CHECK(json_is_null(json_object_get(state, "train_output")), "no TrainOutput");
    json_decref(state);
    rlhf_trainer_free(t);
}

static volatile sig_atomic_t host_sigints;
static void host_handler(int sig) {
    (void)sig;
    host_sigints++;
}

static void test_stop_and_resume(void) {
    const char *out = harness_tmp_path("stop");
    char *cfg = grpo_config(out, "length", 5);
    rlhf_trainer *t = NULL;
    CHECK(rlhf_trainer_create(cfg, "<test>", &t) == RLHF_OK, "%s", rlhf_last_error());
    free(cfg);
    if (!t) return;
    RewardState st = {.stop_at = 2};
    rlhf_trainer_set_reward(t, "length", length_reward, &st);

    CHECK(rlhf_trainer_train(t, NULL, 0) == RLHF_INTERRUPTED, "%s", rlhf_last_error());
    CHECK(strstr(rlhf_last_error(), "interrupted by a stop request: stopped after step 2"), "%s",
          rlhf_last_error());
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    CHECK(dir_exists(ckpt), "no %s", ckpt);

    /* the host's SIGINT handler: untouched by a run, and the second SIGINT of a run reaches it */
    struct sigaction sa = {0}, now;
    sa.sa_handler = host_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    st = (RewardState){.signal_at = 1};
    CHECK(rlhf_trainer_train(t, "true", 0) == RLHF_INTERRUPTED, "%s", rlhf_last_error());
    CHECK(strstr(rlhf_last_error(), "interrupted by SIGINT: stopped after step 3"), "%s",
          rlhf_last_error());
    CHECK(host_sigints == 1, "the host's handler saw %d signals", (int)host_sigints);
    sigaction(SIGINT, NULL, &now);
    CHECK(now.sa_handler == host_handler, "the host's SIGINT handler was not put back");

    /* a stop request after the last step does not stop the next run */
    rlhf_request_stop();
    st = (RewardState){0};
    CHECK(rlhf_trainer_train(t, "true", 0) == RLHF_OK, "%s", rlhf_last_error());
    CHECK(st.calls == 2, "resumed at step 3 of 5: %d calls", st.calls);
    json_t *state = state_of(t);
    CHECK(json_integer_value(json_object_get(state, "global_step")) == 5, "global_step");
    /* the history runs on from the checkpoint's: steps 1..5 and the summary */
    CHECK(json_array_size(json_object_get(state, "log_history")) == 6, "%zu",
          json_array_size(json_object_get(state, "log_history")));
    json_decref(state);
    signal(SIGINT, SIG_DFL);
    rlhf_trainer_free(t);
}

static void test_config_errors(void) {
    rlhf_trainer *t = (rlhf_trainer *)1;
    /* the message `rlhf train` gives for the same file, with the name given for the source */
    CHECK(rlhf_trainer_create("base_model: x\nlearning_rate: fast\n", "cfg.yaml", &t) == RLHF_ERROR,
          "bad value");
    CHECK(t == NULL, "out not cleared");
    CHECK(strstr(rlhf_last_error(), "cfg.yaml:2: key 'learning_rate'"), "%s", rlhf_last_error());
    CHECK(rlhf_trainer_create("{\"base_model\": [1]", NULL, &t) == RLHF_ERROR, "bad JSON");
    CHECK(strncmp(rlhf_last_error(), "<config>:", 9) == 0 && strstr(rlhf_last_error(), "YAML"),
          "%s", rlhf_last_error());
    char text[4096];
    snprintf(text, sizeof text,
             "{\"base_model\": \"%s/nowhere\", \"learning_rate\": 1.0e-3, \"datasets\": "
             "[{\"path\": \"x.jsonl\", \"type\": \"completion\"}]}",
             harness_tmpdir());
    CHECK(rlhf_trainer_create(text, NULL, &t) == RLHF_ERROR, "missing model");
    CHECK(strstr(rlhf_last_error(), "nowhere") && strstr(rlhf_last_error(), "config.json"), "%s",
          rlhf_last_error());
    CHECK(rlhf_trainer_create(NULL, NULL, &t) == RLHF_ERROR, "NULL config");
    rlhf_trainer_free(NULL);
    CHECK(rlhf_trainer_warning_count(NULL) == 0 && !rlhf_trainer_warning(NULL, 0), "NULL");
}

static void test_warnings_and_versions(void) {
    CHECK(rlhf_api_version() == RLHF_API_VERSION, "version");
#ifdef RLHF_WITH_PYTHON
    CHECK(strchr(rlhf_python_version(), '.') != NULL, "%s", rlhf_python_version());
#else
    /* a library built without Python (RLHF_PYTHON=OFF) says so by an empty version */
    CHECK(strcmp(rlhf_python_version(), "") == 0, "%s", rlhf_python_version());
#endif
    char text[4096];
    snprintf(text, sizeof text,
             "base_model: %s\nlearning_rate: 1.0e-3\nlearning_rat: 2\ndatasets:\n"
             "  - {path: x.jsonl, type: completion}\n",
             model_dir());
    rlhf_trainer *t = NULL;
    CHECK(rlhf_trainer_create(text, "w.yaml", &t) == RLHF_OK, "%s", rlhf_last_error());
    CHECK(rlhf_trainer_warning_count(t) == 1, "%zu", rlhf_trainer_warning_count(t));
    /* A Python callable from a program that is not Python: refused before it is looked at (the
     * object is never dereferenced), saying why. */
    static int not_an_object;
    CHECK(rlhf_trainer_set_python_reward(t, "f", &not_an_object) == RLHF_ERROR, "accepted");
#ifdef RLHF_WITH_PYTHON
    CHECK(strstr(rlhf_last_error(), "not running inside a Python interpreter"), "%s",
          rlhf_last_error());
#else
    CHECK(strcmp(rlhf_last_error(), "reward function f is a Python callable, but this build of "
                                    "rlhf has no Python (rebuild with libpython3-dev installed, "
                                    "or -DRLHF_PYTHON=ON)") == 0,
          "%s", rlhf_last_error());
#endif
    CHECK(rlhf_trainer_warning(t, 0) && strstr(rlhf_trainer_warning(t, 0), "learning_rat"),
          "warning");
    rlhf_trainer_free(t);
}

/* The replay buffer: the max_size greatest scores held (strictly greater replaces the held
 * minimum), heap layout with the minimum first, draws among the held ids, bad scores refused. */
static void test_replay_buffer(void) {
    rlhf_replay_buffer *rb = NULL;
    CHECK(rlhf_replay_buffer_create(3, &rb) == RLHF_OK && rb, "create");
    const double scores[] = {0.5, 2.0, 1.0, 3.0, 1.0};
    const int want_kept[] = {1, 1, 1, 1, 0}; /* 3.0 evicts 0.5; 1.0 is not above the held 1.0 */
    for (int i = 0; i < 5; i++) {
        uint64_t id = 99;
        int kept = -1;
        CHECK(rlhf_replay_buffer_add(rb, scores[i], &id, &kept) == RLHF_OK, "%s",
              rlhf_last_error());
        CHECK(id == (uint64_t)i && kept == want_kept[i], "offer %d: id %llu kept %d", i,
              (unsigned long long)id, kept);
    }
    CHECK(rlhf_replay_buffer_size(rb) == 3, "size %zu", rlhf_replay_buffer_size(rb));
    double s0 = 0;
    uint64_t id0 = 0;
    CHECK(rlhf_replay_buffer_entry(rb, 0, &s0, &id0) == RLHF_OK && s0 == 1.0 && id0 == 2,
          "heap[0] is the minimum: score %g id %llu", s0, (unsigned long long)id0);
    uint64_t drawn[3];
    CHECK(rlhf_replay_buffer_sample(rb, 3, 7, drawn) == RLHF_OK, "%s", rlhf_last_error());
    CHECK(drawn[0] != drawn[1] && drawn[1] != drawn[2] && drawn[0] != drawn[2],
          "3 draws from 3 held items: without replacement");
    for (int k = 0; k < 3; k++)
        CHECK(drawn[k] == 1 || drawn[k] == 2 || drawn[k] == 3, "drew id %llu",
              (unsigned long long)drawn[k]);
    uint64_t id;
    int kept;
    CHECK(rlhf_replay_buffer_add(rb, -1, &id, &kept) == RLHF_ERROR &&
              strstr(rlhf_last_error(), "not a finite number >= 0"),
          "negative score: %s", rlhf_last_error());
    CHECK(rlhf_replay_buffer_size(rb) == 3, "a refused score changes nothing");
    rlhf_replay_buffer_free(rb);
    CHECK(rlhf_replay_buffer_create(2, &rb) == RLHF_OK, "create");
    CHECK(rlhf_replay_buffer_sample(rb, 1, 7, drawn) == RLHF_ERROR, "sampling an empty buffer");
    rlhf_replay_buffer_free(rb);
}

int main(void) {
    test_replay_buffer();
    test_warnings_and_versions();
    test_config_errors();
    test_train_with_callback();
    test_reward_failures();
    test_stop_and_resume();
    return harness_finish("test_api");
}
