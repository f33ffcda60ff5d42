/* trl.rollout_func (grpo/python_rollout.h) in real runs on the llama_text fixture:
 *  - Axolotl's contract: the function is called once per generation batch, with one dataset row
 *    per completion (each prompt num_generations times); the reward functions receive exactly
 *    the strings it returned; what is trained on is those strings tokenised (the logged
 *    completion lengths are theirs, counted here with the tokenizer, EOS added) and the run ends
 *    at the very weights of a TRL-contract run returning the same tokens;
 *  - TRL's contract with an env_mask: tokens masked at the end of each completion train exactly
 *    as if they were absent (the loss never sees them; what follows nothing cannot change), the
 *    lengths logged count the policy's tokens only, extra fields reach the reward functions;
 *  - failures: a name that resolves to nothing stops the run before training; a function that
 *    raises, returns the wrong count or the wrong type stops it with one error naming it, the
 *    checkpoints written until then whole. A build without Python refuses the key, saying so;
 *  - TRL parity (both contracts share the path from here): a TRL-contract rollout with an
 *    env_mask, and the same with sync_ref_model, against TRL's GRPOTrainer. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "trained_weights.h"
#include "python/py_embed.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { G = 4, ROWS = 8, STEPS = 3 };

static char dir[4096];

/* A reward that needs no Python and takes any completion. */
#define LENGTH "{function: builtin.length, target: 3}"

/* dir/NAME.py holding `body`, with LOG replaced by dir/NAME.log (what the function records). */
static void write_module(const char *name, const char *body) {
    char path[4300], log[4300], text[16384];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    size_t n = 0;
    for (const char *p = body; *p && n + 4400 < sizeof text;) {
        if (!strncmp(p, "LOG", 3)) {
            n += (size_t)snprintf(text + n, sizeof text - n, "%s", log);
            p += 3;
        } else {
            text[n++] = *p++;
        }
    }
    text[n] = '\0';
    snprintf(path, sizeof path, "%s/%s.py", dir, name);
    harness_write_file(path, text, n);
}

static const char *write_config(const char *name, const char *rollout, const char *rewards,
                                const char *extra) {
    static char path[4300];
    char text[16384];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s/prompts.jsonl\n"
             "trl:\n  num_generations: %d\n  max_completion_length: 6\n  rollout_func: %s\n"
             "  reward_funcs: [%s]\n"
             "micro_batch_size: %d\nmax_steps: %d\nlearning_rate: 1e-2\nlogging_steps: 1\n"
             "seed: 3\n%s",
             harness_source_path("tests/fixtures/models/llama_text"), dir, G, rollout, rewards,
             ROWS, STEPS, extra);
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
    harness_write_file(path, text, strlen(text));
    return path;
}

static int train(const char *config, const char *out) {
    char *args[] = {(char *)config, "--output_dir", (char *)out};
    err_clear();
    return cli_train(3, args);
}

static json_t *read_log(const char *name) {
    char path[4300], line[1 << 16];
    snprintf(path, sizeof path, "%s/%s.log", dir, name);
    json_t *rows = json_array();
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        json_array_append_new(rows, json_loads(line, 0, NULL));
    if (f) fclose(f);
    return rows;
}

/* The rows both contracts return: row i of a call gets " <(prompt number + i) % 50>". */
static const char *const AXOLOTL_FIXED =
    "import json\n"
    "def fixed(model, processing_class, prompts, generation_config=None):\n"
    "    out = [' %d' % ((int(p['prompt'][1:p['prompt'].index(':')]) + i) % 50)\n"
    "           for i, p in enumerate(prompts)]\n"
    "    with open('LOG', 'a') as f:\n"
    "        f.write(json.dumps({'prompts': [p['prompt'] for p in prompts], 'out': out,\n"
    "                            'keys': sorted(prompts[0])}) + '\\n')\n"
    "    return out\n"
    "def seen(prompts, completions, **kwargs):\n"
    "    with open('LOG', 'a') as f:\n"
    "        f.write(json.dumps(completions) + '\\n')\n"
    "    return [float(c) for c in completions]\n";

/* The same tokens through TRL's contract: the dataset's prompt ids (tokenised with the special
 * tokens, as the dataset is), the completion text without them, then EOS. */
static const char *const TRL_FIXED =
    "def fixed(prompts, trainer):\n"
    "    tok = trainer.processing_class\n"
    "    texts = [' %d' % ((int(p[1:p.index(':')]) + i) % 50) for i, p in enumerate(prompts)]\n"
    "    return {'prompt_ids': [tok.encode(p) for p in prompts],\n"
    "            'completion_ids': [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id]\n"
    "                               for t in texts],\n"
    "            'logprobs': None}\n"
    "def value(completions, **kwargs):\n"
    "    return [float(c) for c in completions]\n";

static void test_axolotl_contract(void) {
    write_module("ax_fixed", AXOLOTL_FIXED);
    write_module("trl_fixed", TRL_FIXED);
    const char *cfg = write_config("ax", "ax_fixed.fixed", "ax_fixed.seen", "");
    char out[4300], out_trl[4300];
    snprintf(out, sizeof out, "%s/out-ax", dir);
    CHECK(train(cfg, out) == CLI_EXIT_OK, "Axolotl's contract: %s", err_msg());
    json_t *log = read_log("ax_fixed");
    /* the log alternates: the rollout's call, then the reward's */
    CHECK(json_array_size(log) == 2 * STEPS,
          "%zu log lines: the rollout is called once per "
          "generation batch (%d)",
          json_array_size(log), STEPS);
    Tokenizer tok = {0};
    CHECK(tokenizer_load(&tok, harness_source_path("tests/fixtures/models/llama_text")) == 0, "%s",
          err_msg());
    json_t *metrics = harness_read_metrics(out);
    for (int s = 0; s < STEPS && json_array_size(log) == 2 * STEPS; s++) {
        json_t *call = json_array_get(log, (size_t)2 * s), *scored = json_array_get(log, 2 * s + 1);
        json_t *prompts = json_object_get(call, "prompts"), *ret = json_object_get(call, "out");
        CHECK(json_array_size(prompts) == ROWS, "call %d: %zu prompt rows", s,
              json_array_size(prompts));
        for (int i = 0; i < ROWS; i++)
            CHECK(json_equal(json_array_get(prompts, (size_t)i),
                             json_array_get(prompts, (size_t)(i / G * G))),
                  "call %d: each prompt comes num_generations times in a row", s);
        json_t *keys = json_pack("[s,s]", "answer", "prompt");
        CHECK(json_equal(json_object_get(call, "keys"), keys), "the rows carry their columns");
        json_decref(keys);
        CHECK(json_equal(scored, ret), "step %d: the rewards saw what the rollout returned", s + 1);
        double tokens = 0;
        for (int i = 0; i < ROWS; i++) {
            const char *t = json_string_value(json_array_get(ret, (size_t)i));
            int32_t *ids;
            size_t n;
            CHECK(tokenizer_encode(&tok, t, strlen(t), false, &ids, &n) == 0, "%s", err_msg());
            tokens += (double)n + 1; /* + EOS */
            free(ids);
        }
        double logged = harness_metric(metrics, (size_t)s, "completions/mean_length");
        CHECK(fabs(logged - tokens / ROWS) < 1e-9,
              "step %d: mean length %g, the returned "
              "strings tokenised %g",
              s + 1, logged, tokens / ROWS);
    }
    tokenizer_free(&tok);
    json_decref(metrics);
    json_decref(log);
    /* the same tokens through TRL's contract: the same training, to the bit */
    cfg = write_config("trl", "trl_fixed.fixed", "trl_fixed.value", "");
    snprintf(out_trl, sizeof out_trl, "%s/out-trl", dir);
    CHECK(train(cfg, out_trl) == CLI_EXIT_OK, "TRL's contract: %s", err_msg());
    double gap = saved_weights_gap(out, out_trl, NULL);
    CHECK(gap == 0, "the two contracts' runs end %g apart", gap);
}

/* TRL's contract, completions of 4 policy tokens then `tail` environment tokens masked out. */
static const char *const TRL_MASKED =
    "import json\n"
    "TAIL = %d\n"
    "def fn(prompts, trainer):\n"
    "    tok = trainer.processing_class\n"
    "    rows = [[(7 * i + k) %% 200 + 3 for k in range(4)] + [5] * TAIL\n"
    "            for i in range(len(prompts))]\n"
    "    return {'prompt_ids': [tok.encode(p) for p in prompts], 'completion_ids': rows,\n"
    "            'logprobs': [[0.0] * len(r) for r in rows],\n"
    "            'env_mask': [[1] * 4 + [0] * TAIL for r in rows],\n"
    "            'turns': [i %% 3 for i in range(len(prompts))], 'env': 'calc'}\n"
    "def r(completions, turns, env, **kwargs):\n"
    "    assert env == ['calc'] * len(completions), env\n"
    "    return [float(t) for t in turns]\n";

static void test_env_mask(void) {
    char body[4096], name[64], out[2][4300];
    for (int k = 0; k < 2; k++) {
        snprintf(body, sizeof body, TRL_MASKED, k ? 3 : 0);
        snprintf(name, sizeof name, "masked%d", k);
        write_module(name, body);
        char fn[80], rw[80];
        snprintf(fn, sizeof fn, "%s.fn", name);
        snprintf(rw, sizeof rw, "%s.r", name);
        const char *cfg = write_config(name, fn, rw, "");
        snprintf(out[k], sizeof out[k], "%s/out-%s", dir, name);
        CHECK(train(cfg, out[k]) == CLI_EXIT_OK, "env_mask run %d: %s", k, err_msg());
        json_t *m = harness_read_metrics(out[k]);
        CHECK(harness_metric(m, 0, "completions/mean_length") == 4,
              "the logged length counts the policy's 4 tokens: %g",
              harness_metric(m, 0, "completions/mean_length"));
        CHECK(harness_metric(m, 0, "rewards/r/mean") == (3 * 0 + 3 * 1 + 2 * 2) / 8.0,
              "the extra field reached the reward function");
        json_decref(m);
    }
    double scale = 0, gap = saved_weights_gap(out[0], out[1], &scale);
    CHECK(gap <= 1e-6 * scale, "masked environment tokens train as absent ones: %g apart", gap);
}

static void expect_failure(const char *name, const char *body, const char *fn, const char *want,
                           int checkpoints) {
    write_module(name, body);
    char spec[128], out[4300];
    snprintf(spec, sizeof spec, "%s.%s", name, fn);
    const char *cfg = write_config(name, spec, LENGTH, "save_steps: 1\n");
    snprintf(out, sizeof out, "%s/out-%s", dir, name);
    CHECK(train(cfg, out) == CLI_EXIT_FAILURE, "%s: the run fails", name);
    CHECK(strstr(err_msg(), spec) && strstr(err_msg(), want), "%s: \"%s\" lacks \"%s\"", name,
          err_msg(), want);
    int tmp = 0;
    int whole = harness_check_checkpoints(out, &tmp);
    CHECK(whole == checkpoints && tmp == 0, "%s: %d whole checkpoints (%d unfinished), want %d",
          name, whole, tmp, checkpoints);
}

static void test_failures(void) {
    /* raises in its second call: checkpoint-1 stays whole */
    expect_failure("raises",
                   "calls = []\n"
                   "def fn(prompts, trainer):\n"
                   "    calls.append(1)\n"
                   "    if len(calls) == 2:\n"
                   "        raise ValueError('the environment is down')\n"
                   "    tok = trainer.processing_class\n"
                   "    return {'prompt_ids': [tok.encode(p) for p in prompts],\n"
                   "            'completion_ids': [[5, 6]] * len(prompts), 'logprobs': None}\n",
                   "fn", "ValueError: the environment is down", 1);
    expect_failure("count",
                   "def fn(model, processing_class, prompts, generation_config=None):\n"
                   "    return [' 1'] * (len(prompts) - 1)\n",
                   "fn", "returned 7 completions for 8 prompts", 0);
    expect_failure("kind",
                   "def fn(prompts, trainer):\n"
                   "    return [[1, 2]] * len(prompts)\n",
                   "fn", "must return a dict", 0);
    expect_failure("keys",
                   "def fn(prompts, trainer):\n"
                   "    return {'completion_ids': [[1, 2]] * len(prompts)}\n",
                   "fn", "must return keys ['logprobs', 'prompt_ids']", 0);
    expect_failure("vocab",
                   "def fn(prompts, trainer):\n"
                   "    return {'prompt_ids': [[1]] * len(prompts),\n"
                   "            'completion_ids': [[10 ** 6]] * len(prompts), 'logprobs': None}\n",
                   "fn", "not a token id", 0);
    expect_failure("params", "def fn(prompts):\n    return []\n", "fn",
                   "a rollout function is fn(prompts, trainer)", 0);
    expect_failure("missing", "x = 1\n", "nope", "not found", 0);
    /* a module that does not exist: before training, nothing written */
    const char *cfg = write_config("nomodule", "no_such_env.rollout", LENGTH, "");
    char out[4300];
    snprintf(out, sizeof out, "%s/out-nomodule", dir);
    CHECK(train(cfg, out) == CLI_EXIT_FAILURE &&
              strstr(err_msg(), "trl.rollout_func': rollout function no_such_env.rollout not "
                                "found"),
          "unresolvable name: %s", err_msg());
    CHECK(harness_check_checkpoints(out, NULL) == 0, "nothing trained");
}

/* TRL's contract against TRL 1.9's GRPOTrainer with the same rollout function
 * (tests/fixtures/grpo_rollout/rollout_env.py, tools/reference/make_grpo_rollout_fixtures.py):
 * multi-turn completions with environment tokens masked, an extra field for the reward, a
 * truncated row per group; every logged value within 1e-4 (relative; 1e-6 absolute near 0) and
 * the trained weights within 1e-4 of their largest. Case `sub` (a directory of the fixture, ""
 * for the first), the module copied as `module` (a fresh import: its call count from 0). The
 * sync_ref case adds beta and TRL's sync_ref_model (the reference follows the policy after every
 * step), which moves the KL term and so the weights. */
static void test_trl_parity(const char *sub, const char *module) {
    char *py = NULL, path[4300], text[16384], out[4300], rel[256];
    size_t len = 0;
    json_t *c = NULL;
    CHECK(read_file(harness_source_path("tests/fixtures/grpo_rollout/rollout_env.py"), &py, &len) ==
              0,
          "%s", err_msg());
    snprintf(path, sizeof path, "%s/%s.py", dir, module);
    harness_write_file(path, py, len);
    free(py);
    snprintf(rel, sizeof rel, "tests/fixtures/grpo_rollout/%s/case.json", sub);
    CHECK(json_load_path(harness_source_path(rel), &c) == 0, "%s", err_msg());
    const json_t *k = json_object_get(c, "config");
    char model[4096], prompts[4096];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(prompts, sizeof prompts, "%s",
             harness_source_path("tests/fixtures/grpo_rollout/prompts.jsonl"));
#define NUM(key) json_number_value(json_object_get(k, key))
    char sync[256] = "";
    if (json_is_true(json_object_get(k, "sync_ref_model")))
        snprintf(
            sync, sizeof sync,
            "  sync_ref_model: true\n  ref_model_mixup_alpha: %g\n  ref_model_sync_steps: %g\n",
            NUM("ref_model_mixup_alpha"), NUM("ref_model_sync_steps"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: %g\n  max_completion_length: %g\n"
             "  rollout_func: %s.rollout\n  reward_funcs: [%s.reward]\n"
             "  beta: %g\n  loss_type: %s\n  scale_rewards: %s\n  temperature: %g\n%s"
             "micro_batch_size: %g\ngradient_accumulation_steps: %g\nlearning_rate: %g\n"
             "lr_scheduler: %s\nwarmup_steps: %g\nweight_decay: %g\nadam_beta1: %g\n"
             "adam_beta2: %g\nadam_epsilon: %g\nmax_grad_norm: %g\nmax_steps: %g\n"
             "logging_steps: 1\nseed: %g\n",
             model, prompts, NUM("num_generations"), NUM("max_completion_length"), module, module,
             NUM("beta"), json_string_value(json_object_get(k, "loss_type")),
             json_string_value(json_object_get(k, "scale_rewards")), NUM("temperature"), sync,
             NUM("per_device_train_batch_size"), NUM("gradient_accumulation_steps"),
             NUM("learning_rate"), json_string_value(json_object_get(k, "lr_scheduler_type")),
             NUM("warmup_steps"), NUM("weight_decay"), NUM("adam_beta1"), NUM("adam_beta2"),
             NUM("adam_epsilon"), NUM("max_grad_norm"), NUM("max_steps"), NUM("seed"));
#undef NUM
    snprintf(path, sizeof path, "%s/parity-%s.yaml", dir, module);
    harness_write_file(path, text, strlen(text));
    snprintf(out, sizeof out, "%s/out-%s", dir, module);
    CHECK(train(path, out) == CLI_EXIT_OK, "TRL parity run: %s", err_msg());
    json_t *ours = harness_read_metrics(out), *theirs = json_object_get(c, "log_history");
    int compared = 0;
    double worst = 0;
    for (size_t s = 0; s < json_array_size(ours); s++) {
        const json_t *a = json_array_get(ours, s), *b = json_array_get(theirs, s);
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)b, key, v) {
            const json_t *mine = json_object_get(a, key);
            if (!json_is_number(v) || !strcmp(key, "step_time") || !strcmp(key, "epoch") ||
                !strcmp(key, "step"))
                continue;
            CHECK(json_is_number(mine), "step %zu: \"%s\" not logged", s + 1, key);
            double x = json_number_value(mine), y = json_number_value(v);
            CHECK(harness_close(x, y, 1e-4, 1e-6), "step %zu: %s %.8g, TRL %.8g", s + 1, key, x, y);
            if (fabs(y) > 1e-6) worst = fmax(worst, fabs(x - y) / fabs(y));
            compared++;
        }
    }
    CHECK(json_array_size(ours) == 3 && compared >= 60, "%zu steps, %d values compared with TRL",
          json_array_size(ours), compared);
    snprintf(rel, sizeof rel, "tests/fixtures/grpo_rollout/%s/final", sub);
    double scale = 0, gap = saved_weights_gap(out, harness_source_path(rel), &scale);
    CHECK(gap <= 1e-4 * scale, "trained weights %g from TRL's (largest %g)", gap, scale);
    printf("TRL parity (%s): %d logged values, worst relative difference %.3g; weights %.3g from "
           "TRL's (largest %.3g)\n",
           module, compared, worst, gap, scale);
    json_decref(ours);
    json_decref(c);
}

/* sync_ref_model where TRL refuses it: without the KL term, and with an adapter. */
static void test_sync_errors(void) {
    char text[16384], model[4096], out[4300];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    const char *cases[][2] = {
        {"  beta: 0.0\n", "You passed `sync_ref_model=True` while `beta=0.0`"},
        {"  beta: 0.1\nadapter: lora\nlora_r: 4\n", "TRL raises NotImplementedError for PEFT"},
        /* (not a sync case: generation_kwargs that would change generation are never ignored) */
        {"  beta: 0.1\n  generation_kwargs: {num_beams: 2}\n",
         "key 'trl.generation_kwargs.num_beams' is not supported by rlhf.c's generation"}};
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text,
                 "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s/prompts.jsonl\n"
                 "micro_batch_size: 8\nmax_steps: 1\nlearning_rate: 1e-3\n"
                 "trl:\n  num_generations: 4\n  sync_ref_model: true\n"
                 "  reward_funcs: [" LENGTH "]\n%s",
                 model, dir, cases[i][0]);
        char path[4300];
        snprintf(path, sizeof path, "%s/sync%d.yaml", dir, i);
        harness_write_file(path, text, strlen(text));
        snprintf(out, sizeof out, "%s/out-sync%d", dir, i);
        CHECK(train(path, out) == CLI_EXIT_FAILURE && strstr(err_msg(), cases[i][1]),
              "sync_ref_model case %d: %s", i, err_msg());
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", harness_tmpdir());
    harness_write_grpo_prompts(); /* dir/prompts.jsonl, which write_config names */
    test_sync_errors();
    if (!py_embed_compiled()) {
        write_module("trl_fixed", TRL_FIXED);
        const char *cfg = write_config("nopython", "trl_fixed.fixed", LENGTH, "");
        CHECK(train(cfg, harness_tmp_path("out")) == CLI_EXIT_FAILURE &&
                  strstr(err_msg(), "key 'trl.rollout_func': 'trl_fixed.fixed' is a Python "
                                    "rollout function, " PY_EMBED_ABSENT),
              "without Python: %s", err_msg());
        return harness_finish("test_grpo_rollout_func");
    }
    test_axolotl_contract();
    test_env_mask();
    test_trl_parity("", "rollout_env");
    test_trl_parity("sync_ref", "rollout_sync");
    test_failures();
    return harness_finish("test_grpo_rollout_func");
}
