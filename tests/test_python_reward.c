/* Python reward functions (rewards/python_reward.h) as Axolotl users write them: a module in the
 * working directory, called the way TRL 1.9's GRPOTrainer calls it. The Python functions below
 * return values computed from the keyword arguments they received, and this file computes the
 * same values from the batch it passed, so a wrong or missing argument shows as a wrong number.
 * Then the errors (raised, wrong count, not a number, not found, not callable, one parameter,
 * import failures), an async function, the log callbacks, Axolotl's own documentation example
 * (tests/fixtures/axolotl_rewards/rewards.py, unchanged) and that repeated calls leak no Python
 * objects. */
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "python/py_embed.h"
#include "rewards/python_reward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char checks_py[] =
    "import asyncio\n"
    "import fractions\n"
    "import gc\n"
    "import sys\n"
    "\n"
    "EXPECTED_KWARGS = ['answer', 'completion_ids', 'log_extra', 'log_metric', 'trainer_state']\n"
    "\n"
    "\n"
    "def completion_lengths(prompts, completions, **kwargs):\n"
    "    return [len(c) for c in completions]\n"
    "\n"
    "\n"
    "def prompt_and_answer(prompts, completions, answer, **kwargs):\n"
    "    return [1000 * len(p) + (1 if c == a else 0)\n"
    "            for p, c, a in zip(prompts, completions, answer)]\n"
    "\n"
    "\n"
    "def id_sums(prompts, completions, completion_ids, **kwargs):\n"
    "    return [float(sum(ids)) + 0.5 * len(ids) for ids in completion_ids]\n"
    "\n"
    "\n"
    "def keyword_names(prompts, completions, **kwargs):\n"
    "    names = sorted(kwargs)\n"
    "    if names != EXPECTED_KWARGS:\n"
    "        raise AssertionError('received ' + ', '.join(names))\n"
    "    return [float(i) for i in range(len(completions))]\n"
    "\n"
    "\n"
    "def state_probe(prompts, completions, trainer_state, **kwargs):\n"
    "    s = trainer_state\n"
    "    return [s.global_step + 100 * s.max_steps + 10000 * s.epoch] * len(completions)\n"
    "\n"
    "\n"
    "def some_none(prompts, completions, **kwargs):\n"
    "    return [None if i % 2 else 1.5 for i in range(len(completions))]\n"
    "\n"
    "\n"
    "def number_kinds(prompts, completions, **kwargs):\n"
    "    return (True, 2, fractions.Fraction(1, 4), -3.5)\n"
    "\n"
    "\n"
    "def raises(prompts, completions, **kwargs):\n"
    "    raise ValueError('no answer for ' + prompts[0])\n"
    "\n"
    "\n"
    "def wrong_count(prompts, completions, **kwargs):\n"
    "    return [1.0]\n"
    "\n"
    "\n"
    "def non_number(prompts, completions, **kwargs):\n"
    "    return [1.0, 'high'] + [0.0] * (len(completions) - 2)\n"
    "\n"
    "\n"
    "def not_a_list(prompts, completions, **kwargs):\n"
    "    return 3.0\n"
    "\n"
    "\n"
    "def one_parameter(completions):\n"
    "    return [0.0 for _ in completions]\n"
    "\n"
    "\n"
    "not_callable = 42\n"
    "\n"
    "\n"
    "async def async_lengths(prompts, completions, **kwargs):\n"
    "    await asyncio.sleep(0)\n"
    "    return [2.0 * len(c) for c in completions]\n"
    "\n"
    "\n"
    "def logs_things(prompts, completions, log_metric, log_extra, **kwargs):\n"
    "    log_metric('reward_calls', 1)\n"
    "    log_metric('reward_calls', 3)\n"
    "    log_extra('note', ['seen:' + c for c in completions])\n"
    "    return [0.0] * len(completions)\n"
    "\n"
    "\n"
    "def _renamed(prompts, completions, **kwargs):\n"
    "    return [0.0] * len(completions)\n"
    "\n"
    "\n"
    "alias = _renamed\n"
    "\n"
    "\n"
    "def conversational(prompts, completions, **kwargs):\n"
    "    return [100 * len(p) + len(c[0]['content']) + (1000 if c[0]['role'] == 'assistant' else "
    "0)\n"
    "            for p, c in zip(prompts, completions)]\n"
    "\n"
    "\n"
    "def allocated_blocks(prompts, completions, **kwargs):\n"
    "    gc.collect()  # cycles awaiting the collector are not leaks\n"
    "    return [float(sys.getallocatedblocks())] * len(completions)\n";

#define N 4
static const char *prompts[N] = {"Q: 1+1?", "Q: 1+1?", "Q: 20+3?", "Q: 20+3?"};
static const char *completions[N] = {"2", "11", "23", "twenty-three"};
static const char *answers[N] = {"2", "2", "23", "23"};
static const int32_t ids0[] = {5, 6}, ids1[] = {7}, ids3[] = {1, 2, 3};
static const int32_t *const ids[N] = {ids0, ids1, NULL, ids3};
static const int id_lens[N] = {2, 1, 0, 3};

static json_t *string_array(const char *const *s, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(s[i]));
    return a;
}

/* The plain-text batch every test below scores, with an `answer` column and a `prompt` column
 * (TRL passes the latter only as `prompts`). Caller decrefs the three JSON values. */
static RewardBatch text_batch(json_t **p, json_t **c, json_t **cols, json_t **state) {
    *p = string_array(prompts, N);
    *c = string_array(completions, N);
    *cols = json_object();
    json_object_set_new(*cols, "answer", string_array(answers, N));
    json_object_set_new(*cols, "prompt", string_array(prompts, N));
    *state = json_pack("{s:i, s:i, s:f}", "global_step", 3, "max_steps", 10, "epoch", 0.5);
    return (RewardBatch){.n = N,
                         .prompts = *p,
                         .completions = *c,
                         .completion_ids = ids,
                         .completion_lens = id_lens,
                         .columns = *cols,
                         .trainer_state = *state};
}

/* Opens module.fn and scores b into out; returns what score returned (or -2 if open failed). */
static int score_with(const char *spec, const RewardBatch *b, double *out) {
    RewardFunc f;
    if (python_reward_open(&f, spec) != 0) {
        fprintf(stderr, "open %s: %s\n", spec, err_msg());
        return -2;
    }
    int rc = f.score(f.impl, b, out);
    reward_func_close(&f);
    return rc;
}

static bool msg_has(const char *needle) {
    bool ok = strstr(err_msg(), needle) != NULL;
    if (!ok) fprintf(stderr, "  message lacks \"%s\": %s\n", needle, err_msg());
    return ok;
}

static void check_scores_from_arguments(const RewardBatch *b) {
    double out[N];
    CHECK(score_with("pyr_checks.completion_lengths", b, out) == 0, "%s", err_msg());
    for (int i = 0; i < N; i++)
        CHECK(out[i] == (double)strlen(completions[i]), "len %d: %g", i, out[i]);

    CHECK(score_with("pyr_checks.prompt_and_answer", b, out) == 0, "%s", err_msg());
    for (int i = 0; i < N; i++) {
        double want = 1000.0 * strlen(prompts[i]) + (strcmp(completions[i], answers[i]) == 0);
        CHECK(out[i] == want, "prompt/answer %d: %g, want %g", i, out[i], want);
    }

    CHECK(score_with("pyr_checks.id_sums", b, out) == 0, "%s", err_msg());
    for (int i = 0; i < N; i++) {
        double want = 0.5 * id_lens[i];
        for (int t = 0; t < id_lens[i]; t++)
            want += ids[i][t];
        CHECK(out[i] == want, "id sum %d: %g, want %g", i, out[i], want);
    }

    CHECK(score_with("pyr_checks.keyword_names", b, out) == 0, "%s", err_msg());
    for (int i = 0; i < N; i++)
        CHECK(out[i] == i, "keyword_names %d: %g", i, out[i]);

    CHECK(score_with("pyr_checks.state_probe", b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 3 + 100 * 10 + 10000 * 0.5, "trainer_state: %g", out[0]);

    CHECK(score_with("pyr_checks.some_none", b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 1.5 && isnan(out[1]) && out[2] == 1.5 && isnan(out[3]),
          "None -> NaN: %g %g %g %g", out[0], out[1], out[2], out[3]);

    CHECK(score_with("pyr_checks.number_kinds", b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 1 && out[1] == 2 && out[2] == 0.25 && out[3] == -3.5,
          "bool/int/Fraction/float: %g %g %g %g", out[0], out[1], out[2], out[3]);

    CHECK(score_with("pyr_checks.async_lengths", b, out) == 0, "%s", err_msg());
    for (int i = 0; i < N; i++)
        CHECK(out[i] == 2.0 * strlen(completions[i]), "async %d: %g", i, out[i]);
    /* A second run uses the same event loop again. */
    CHECK(score_with("pyr_checks.async_lengths", b, out) == 0, "%s", err_msg());
}

static void check_conversational(void) {
    json_t *p = json_array(), *c = json_array(), *cols = json_object();
    for (int i = 0; i < 2; i++) {
        json_array_append_new(p, json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
                                           "Be brief.", "role", "user", "content", prompts[i]));
        json_array_append_new(
            c, json_pack("[{s:s,s:s}]", "role", "assistant", "content", completions[i]));
    }
    static const int32_t *const no_ids[2] = {NULL, NULL};
    static const int no_lens[2] = {0, 0};
    RewardBatch b = {.n = 2,
                     .prompts = p,
                     .completions = c,
                     .completion_ids = no_ids,
                     .completion_lens = no_lens,
                     .columns = cols};
    double out[2];
    CHECK(score_with("pyr_checks.conversational", &b, out) == 0, "%s", err_msg());
    for (int i = 0; i < 2; i++) {
        double want = 100 * 2 + strlen(completions[i]) + 1000;
        CHECK(out[i] == want, "conversational %d: %g, want %g", i, out[i], want);
    }
    json_decref(p);
    json_decref(c);
    json_decref(cols);
}

static void check_call_errors(const RewardBatch *b) {
    double out[N];
    CHECK(score_with("pyr_checks.raises", b, out) == -1, "raising function scored");
    CHECK(msg_has("raises (pyr_checks.raises)") && msg_has("ValueError: no answer for Q: 1+1?") &&
              msg_has("pyr_checks.py:") && msg_has("in raises"),
          "raise message");

    CHECK(score_with("pyr_checks.wrong_count", b, out) == -1, "wrong count scored");
    CHECK(msg_has("wrong_count") && msg_has("returned 1 values for 4 completions"), "count");

    CHECK(score_with("pyr_checks.non_number", b, out) == -1, "a str scored");
    CHECK(msg_has("non_number") && msg_has("value 1 is a str ('high')"), "non-number");

    CHECK(score_with("pyr_checks.not_a_list", b, out) == -1, "a float scored as a list");
    CHECK(msg_has("not_a_list") && msg_has("returned a float"), "not a list");

    /* A column named like an argument TRL passes itself, and a column of the wrong length. */
    json_t *cols = json_pack("{s:[i,i,i,i]}", "prompts", 1, 2, 3, 4);
    RewardBatch clash = *b;
    clash.columns = cols;
    CHECK(score_with("pyr_checks.completion_lengths", &clash, out) == -1, "column 'prompts'");
    CHECK(msg_has("'prompts'"), "clash names the column");
    json_decref(cols);
    cols = json_pack("{s:[s]}", "answer", "2");
    clash.columns = cols;
    CHECK(score_with("pyr_checks.completion_lengths", &clash, out) == -1, "short column");
    CHECK(msg_has("'answer' must be a list of 4 values") && msg_has("got 1"), "short column");
    json_decref(cols);
}

static void check_open_errors(void) {
    RewardFunc f;
    CHECK(python_reward_open(&f, "pyr_checks.one_parameter") == -1, "one parameter opened");
    CHECK(msg_has("Reward function must accept at least two arguments: prompts: list and "
                  "completions: list"),
          "Axolotl's message");
    CHECK(f.impl == NULL && f.name == NULL, "left zeroed");

    CHECK(python_reward_open(&f, "pyr_checks.not_callable") == -1, "an int opened");
    CHECK(msg_has("Reward function pyr_checks.not_callable is not callable (it is a int)"),
          "not callable");

    CHECK(python_reward_open(&f, "no_such_module.fn") == -1, "missing module opened");
    CHECK(msg_has("Reward function no_such_module.fn not found.") &&
              msg_has("ModuleNotFoundError: No module named 'no_such_module'") &&
              msg_has(harness_tmpdir()),
          "missing module");

    CHECK(python_reward_open(&f, "pyr_checks.nope") == -1, "missing function opened");
    CHECK(msg_has("Reward function pyr_checks.nope not found.") && msg_has("'nope'"),
          "missing function");

    CHECK(python_reward_open(&f, "my-reward-model") == -1, "a directory opened");
    CHECK(msg_has("reward models are not supported by rlhf.c"), "reward model directory");

    CHECK(python_reward_open(&f, "just_a_name") == -1, "no dot opened");
    CHECK(msg_has("expected 'module.function'"), "no dot");

    CHECK(python_reward_open(&f, "pyr_broken.fn") == -1, "syntax error opened");
    CHECK(msg_has("importing pyr_broken failed: SyntaxError") && msg_has("pyr_broken.py:2"),
          "syntax error");

    CHECK(python_reward_open(&f, "pyr_needs_dep.fn") == -1, "missing dependency opened");
    CHECK(msg_has("Reward function pyr_needs_dep.fn: importing pyr_needs_dep failed: "
                  "ModuleNotFoundError: No module named 'no_such_dependency'") &&
              msg_has("pyr_needs_dep.py:2 in <module>"),
          "a module that imports a missing one is not itself 'not found'");

    CHECK(python_reward_open(&f, "pyr_raising.fn") == -1, "raising module opened");
    CHECK(msg_has("RuntimeError: settings.toml missing") && msg_has("pyr_raising.py:1 in <module>"),
          "raise at import");
}

static void check_name_and_logs(const RewardBatch *b) {
    RewardFunc f;
    CHECK(python_reward_open(&f, "pyr_checks.alias") == 0, "%s", err_msg());
    CHECK(f.name && strcmp(f.name, "_renamed") == 0, "name is __name__: %s", f.name);
    CHECK(python_reward_is(&f), "is a Python reward");
    reward_func_close(&f);

    double out[N];
    CHECK(python_reward_open(&f, "pyr_checks.logs_things") == 0, "%s", err_msg());
    CHECK(f.score(f.impl, b, out) == 0, "%s", err_msg());
    json_t *metrics = NULL, *extra = NULL;
    CHECK(python_reward_take_logs(&f, &metrics, &extra) == 0, "%s", err_msg());
    json_t *want_m = json_pack("{s:[f,f]}", "reward_calls", 1.0, 3.0);
    json_t *want_e =
        json_pack("{s:[s,s,s,s]}", "note", "seen:2", "seen:11", "seen:23", "seen:twenty-three");
    CHECK(json_equal(metrics, want_m), "log_metric values");
    CHECK(json_equal(extra, want_e), "log_extra values");
    json_decref(metrics);
    json_decref(extra);
    CHECK(python_reward_take_logs(&f, &metrics, &extra) == 0 && json_object_size(metrics) == 0 &&
              json_object_size(extra) == 0,
          "take empties the log");
    json_decref(metrics);
    json_decref(extra);
    json_decref(want_m);
    json_decref(want_e);
    reward_func_close(&f);
}

/* Axolotl's docs example, run as it is: n values, each in [0, 1], not all the same. */
static void check_axolotl_docs_example(const RewardBatch *b) {
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(harness_source_path("tests/fixtures/axolotl_rewards/rewards.py"), &text,
                    &len) == 0,
          "%s", err_msg());
    CHECK(harness_write_file(harness_tmp_path("rewards.py"), text, len) == 0, "write rewards.py");
    free(text);
    RewardFunc f;
    CHECK(python_reward_open(&f, "rewards.rand_reward_func") == 0, "%s", err_msg());
    CHECK(f.name && strcmp(f.name, "rand_reward_func") == 0, "name %s", f.name);
    double out[N] = {-1, -1, -1, -1};
    CHECK(f.score && f.score(f.impl, b, out) == 0, "%s", err_msg());
    bool in_range = true, all_same = true;
    for (int i = 0; i < N; i++) {
        in_range &= out[i] >= 0 && out[i] <= 1;
        all_same &= out[i] == out[0];
    }
    CHECK(in_range && !all_same, "random rewards %g %g %g %g", out[0], out[1], out[2], out[3]);
    reward_func_close(&f);
}

/* A leaked reference on any path costs at least one block per call, so RUNS rounds of calls
 * after warming up must add fewer than RUNS live blocks. (A few hundred come and go with
 * interpreter caches filling up, whatever the number of calls.) */
static void check_no_python_leak(const RewardBatch *b) {
    enum { RUNS = 500 };
    RewardFunc probe, work[3];
    const char *specs[3] = {"pyr_checks.keyword_names", "pyr_checks.logs_things",
                            "pyr_checks.non_number"};
    CHECK(python_reward_open(&probe, "pyr_checks.allocated_blocks") == 0, "%s", err_msg());
    for (int k = 0; k < 3; k++)
        CHECK(python_reward_open(&work[k], specs[k]) == 0, "%s", err_msg());
    double out[N], blocks[2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < (round == 0 ? 50 : RUNS); i++) {
            for (int k = 0; k < 3; k++)
                work[k].score(work[k].impl, b, out);
            json_t *m, *e;
            python_reward_take_logs(&work[1], &m, &e);
            json_decref(m);
            json_decref(e);
        }
        probe.score(probe.impl, b, out);
        blocks[round] = out[0];
    }
    CHECK(blocks[0] > 0 && blocks[1] - blocks[0] < RUNS, "Python blocks %g -> %g over %d rounds",
          blocks[0], blocks[1], RUNS);
    reward_func_close(&probe);
    for (int k = 0; k < 3; k++)
        reward_func_close(&work[k]);
}

int main(void) {
    const char *dir = harness_tmpdir();
    CHECK(harness_write_file(harness_tmp_path("pyr_checks.py"), checks_py, strlen(checks_py)) == 0,
          "write");
    const char broken[] = "# a syntax error on line 2\ndef fn(:\n";
    const char raising[] = "raise RuntimeError('settings.toml missing')\n";
    const char needs_dep[] = "import os\nimport no_such_dependency\n";
    CHECK(harness_write_file(harness_tmp_path("pyr_broken.py"), broken, strlen(broken)) == 0, "w");
    CHECK(harness_write_file(harness_tmp_path("pyr_raising.py"), raising, strlen(raising)) == 0,
          "w");
    CHECK(harness_write_file(harness_tmp_path("pyr_needs_dep.py"), needs_dep, strlen(needs_dep)) ==
              0,
          "w");
    CHECK(mkdir(harness_tmp_path("my-reward-model"), 0700) == 0, "mkdir");
    CHECK(harness_write_file(harness_tmp_path("my-reward-model/config.json"), "{}", 2) == 0, "w");
    /* Axolotl runs as `python -m`: the working directory is where modules are found. */
    CHECK(chdir(dir) == 0, "chdir %s", dir);

    json_t *p, *c, *cols, *state;
    RewardBatch b = text_batch(&p, &c, &cols, &state);
    check_scores_from_arguments(&b);
    check_conversational();
    check_call_errors(&b);
    check_open_errors();
    check_name_and_logs(&b);
    check_axolotl_docs_example(&b);
    check_no_python_leak(&b);

    json_decref(p);
    json_decref(c);
    json_decref(cols);
    json_decref(state);
    py_embed_shutdown();
    CHECK(!py_embed_running(), "shut down");
    RewardFunc f;
    CHECK(python_reward_open(&f, "pyr_checks.completion_lengths") == -1, "opened after shutdown");
    CHECK(msg_has("shut down"), "after shutdown");
    return harness_finish("test_python_reward");
}
