/* trl.log_completions (grpo/completion_log.h): every logging step appends the latest generation
 * batch to output_dir/completions.jsonl, one row per completion, and prints a sample of
 * num_completions_to_print rows. The reward is each completion's length in bytes (a command
 * reward: this program), so each row's reward checks its logged text. Checked against
 * invariants of TRL's GRPO: rows of a group share
 * their prompt, which is a dataset prompt; each row's advantage is TRL's group-normalised
 * reward computed here from the logged rewards ((r - mean) / (std + 1e-4), torch's unbiased std);
 * a step's mean logged reward is the `reward` metrics.jsonl logged for it; a resumed run
 * appends, a fresh one starts the file afresh. trl.max_prompt_length's cut prompts are the ones
 * logged. */
#include "common/error.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { G = 4, ROWS = 8, STEPS = 3, PRINTED = 3 };

static char self_path[4096];

/* The reward command (command_reward.h's protocol), this program run as `... reward`: each
 * completion's length in bytes, a reward the logged text can be checked against. */
static int reward_command(void) {
    char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        json_t *batch = json_loads(line, JSON_ALLOW_NUL, NULL), *scores = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(batch, "completions"), i, c)
            json_array_append_new(scores, json_real((double)json_string_length(c)));
        char *text = json_dumps(scores, JSON_COMPACT);
        printf("%s\n", text);
        fflush(stdout);
        free(text);
        json_decref(scores), json_decref(batch);
    }
    return 0;
}

static const char *write_config_with(const char *name, const char *extra_trl, const char *reward);

static const char *write_config(void) {
    return write_config_with("log.yaml", "", NULL);
}

/* reward: the trl.reward_funcs entry; NULL: the byte-length command. */
static const char *write_config_with(const char *name, const char *extra_trl, const char *reward) {
    char bytes[4300];
    snprintf(bytes, sizeof bytes, "{command: \"%s reward\", name: bytes}", self_path);
    static char path[4096];
    char text[16384], model[2048], prompts[4096];
    snprintf(prompts, sizeof prompts, "%s", harness_write_grpo_prompts());
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: %d\n  max_completion_length: 6\n"
             "  log_completions: true\n  num_completions_to_print: %d\n%s"
             "  reward_funcs:\n    - %s\n"
             "micro_batch_size: %d\ngradient_accumulation_steps: 1\nmax_steps: %d\n"
             "logging_steps: 1\nsave_steps: 2\nlearning_rate: 5e-3\nseed: 5\n",
             model, prompts, G, PRINTED, extra_trl, reward ? reward : bytes, ROWS, STEPS);
    snprintf(path, sizeof path, "%s", harness_tmp_path(name));
    harness_write_file(path, text, strlen(text));
    return path;
}

static json_t *read_jsonl(const char *path) {
    json_t *rows = json_array();
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s missing", path);
    char line[65536];
    while (f && fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *row = json_loads(line, JSON_ALLOW_NUL, &e); /* a random model writes U+0000 too */
        CHECK(row != NULL, "%s: bad line: %s", path, e.text);
        if (row) json_array_append_new(rows, row);
    }
    if (f) fclose(f);
    return rows;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    fclose(f);
    return s;
}

static int run(const char *cfg, const char *out, const char *log, const char *resume) {
    const char *extra[] = {"--resume_from_checkpoint", resume, NULL};
    return harness_wait_child(harness_spawn_train(cfg, out, log, resume ? extra : NULL));
}

/* The checks on one file's rows of logged steps first..last. */
static void check_rows(const json_t *rows, const json_t *metrics, int first, int last) {
    size_t want = (size_t)(last - first + 1) * ROWS;
    CHECK(json_array_size(rows) == want, "%zu rows, want %zu", json_array_size(rows), want);
    if (json_array_size(rows) != want) return;
    for (int s = first; s <= last; s++) {
        double sum = 0;
        for (int g = 0; g < ROWS / G; g++) {
            double r[G], mean = 0, var = 0;
            const json_t *row0 = json_array_get(rows, (size_t)((s - first) * ROWS + g * G));
            const char *prompt = json_string_value(json_object_get(row0, "prompt"));
            int q = -1, a = -1, b = -1;
            CHECK(prompt && sscanf(prompt, "Q%d: add %d and %d", &q, &a, &b) == 3 && a == q &&
                      b == q + 2,
                  "step %d: logged prompt \"%s\" is not a dataset prompt", s,
                  prompt ? prompt : "(none)");
            for (int i = 0; i < G; i++) {
                const json_t *row = json_array_get(rows, (size_t)((s - first) * ROWS + g * G + i));
                const char *keys[] = {"step", "prompt", "completion", "bytes", "advantage"};
                size_t k = 0;
                const char *key;
                const json_t *v;
                json_object_foreach((json_t *)row, key, v) {
                    CHECK(k < 5 && !strcmp(key, keys[k]), "row key %zu is \"%s\"", k, key);
                    k++;
                }
                CHECK(json_integer_value(json_object_get(row, "step")) == s, "row of step %d", s);
                CHECK(!strcmp(json_string_value(json_object_get(row, "prompt")), prompt),
                      "a group's rows share their prompt");
                CHECK(json_is_string(json_object_get(row, "completion")), "completion text");
                r[i] = json_number_value(json_object_get(row, "bytes"));
                size_t len = json_string_length(json_object_get(row, "completion"));
                CHECK(r[i] == (double)len,
                      "step %d: reward %g logged beside a completion of %zu "
                      "bytes",
                      s, r[i], len);
                mean += r[i] / G;
                sum += r[i];
            }
            for (int i = 0; i < G; i++)
                var += (r[i] - mean) * (r[i] - mean) / (G - 1);
            for (int i = 0; i < G; i++) {
                double adv = json_number_value(json_object_get(
                    json_array_get(rows, (size_t)((s - first) * ROWS + g * G + i)), "advantage"));
                double want_adv = (r[i] - mean) / (sqrt(var) + 1e-4);
                CHECK(harness_close(adv, want_adv, 1e-5, 1e-6),
                      "step %d group %d row %d: "
                      "advantage %.8g, TRL's formula on the logged rewards %.8g",
                      s, g, i, adv, want_adv);
            }
        }
        double logged = harness_metric(metrics, (size_t)s - 1, "reward");
        CHECK(harness_close(sum / ROWS, logged, 1e-6, 1e-7),
              "step %d: mean logged reward %.8g, metrics.jsonl reward %.8g", s, sum / ROWS, logged);
    }
}

/* The printed samples: one per logging step, PRINTED rows, each a logged completion's. */
static void check_printed(const char *log_path, const json_t *rows, int first, int last) {
    char *text = read_text(log_path);
    for (int s = first; s <= last; s++) {
        char head[64];
        snprintf(head, sizeof head, "completions at step %d (%d of %d;", s, PRINTED, ROWS);
        const char *at = strstr(text, head);
        CHECK(at != NULL, "no sample printed at step %d:\n%s", s, text);
        if (!at) continue;
        at = strchr(at, '\n') + 1; /* the header line */
        at = strchr(at, '\n') + 1; /* the first row */
        for (int k = 0; k < PRINTED; k++) {
            const char *bar = strstr(at, " | ");
            CHECK(bar && bar < strchr(at, '\n'), "row %d of step %d's sample", k, s);
            if (!bar) break;
            char prompt[64] = "";
            sscanf(at, " %63[^|]", prompt);
            for (char *e = prompt + strlen(prompt); e > prompt && e[-1] == ' ';)
                *--e = '\0';
            bool found = false;
            for (size_t i = 0; i < json_array_size(rows) && !found; i++) {
                const json_t *row = json_array_get(rows, i);
                found = json_integer_value(json_object_get(row, "step")) == s &&
                        !strcmp(json_string_value(json_object_get(row, "prompt")), prompt);
            }
            CHECK(found, "printed prompt \"%s\" is not among step %d's rows", prompt, s);
            at = strchr(at, '\n') + 1;
        }
    }
    free(text);
}

/* trl.max_prompt_length (TRL <= 0.27: left truncation, the tokenizer's leading BOS kept): every
 * logged prompt is a dataset prompt cut so, computed here with the tokenizer. */
static void test_max_prompt_length(void) {
    enum { MAX = 4 };
    char extra[64], out[4096], path[4200];
    snprintf(extra, sizeof extra, "  max_prompt_length: %d\n", MAX);
    const char *cfg = write_config_with("maxp.yaml", extra, NULL);
    snprintf(out, sizeof out, "%s", harness_tmp_path("out-maxp"));
    CHECK(run(cfg, out, harness_tmp_path("maxp.log"), NULL) == 0, "max_prompt_length run failed");
    Tokenizer tok = {0};
    CHECK(tokenizer_load(&tok, harness_source_path("tests/fixtures/models/llama_text")) == 0, "%s",
          err_msg());
    json_t *want = json_array();
    for (int q = 0; q < 12; q++) {
        char text[64];
        int32_t *ids;
        size_t n, lead = 0;
        snprintf(text, sizeof text, "Q%d: add %d and %d", q, q, q + 2);
        CHECK(tokenizer_encode(&tok, text, strlen(text), true, &ids, &n) == 0, "%s", err_msg());
        CHECK(n > MAX, "prompt %d has %zu tokens: more than %d", q, n, MAX);
        while (lead < n && lead < MAX - 1 && tokenizer_is_special(&tok, ids[lead]))
            lead++;
        memmove(ids + lead, ids + n - (MAX - lead), (MAX - lead) * sizeof *ids);
        char *cut;
        size_t len;
        CHECK(tokenizer_decode(&tok, ids, MAX, true, &cut, &len) == 0, "%s", err_msg());
        json_array_append_new(want, json_stringn(cut, len));
        free(cut), free(ids);
    }
    snprintf(path, sizeof path, "%s/completions.jsonl", out);
    json_t *rows = read_jsonl(path);
    CHECK(json_array_size(rows) == STEPS * ROWS, "%zu rows", json_array_size(rows));
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *p = json_object_get(json_array_get(rows, i), "prompt");
        bool found = false;
        for (size_t k = 0; k < json_array_size(want) && !found; k++)
            found = json_equal(p, json_array_get(want, k));
        CHECK(found, "logged prompt \"%s\" is no dataset prompt cut to its last %d tokens",
              json_string_value(p), MAX);
    }
    json_decref(rows), json_decref(want);
    tokenizer_free(&tok);
}

/* The reward command `... stopcheck STOP MAX`: checks generation_kwargs' stop rule on each
 * completion's ids with the tokenizer: the text before its last token holds no STOP; a
 * completion ends with the token completing STOP (score 2), or with EOS or at MAX tokens
 * (score 1); anything else scores 0. */
static int stopcheck_command(const char *stop, int max) {
    Tokenizer tok = {0};
    if (tokenizer_load(&tok, harness_source_path("tests/fixtures/models/llama_text")) != 0)
        return 1;
    char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        json_t *batch = json_loads(line, JSON_ALLOW_NUL, NULL), *scores = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(batch, "completion_ids"), i, c) {
            int n = (int)json_array_size(c);
            int32_t ids[4096];
            for (int t = 0; t < n && t < 4096; t++)
                ids[t] = (int32_t)json_integer_value(json_array_get(c, (size_t)t));
            char *before = NULL, *all = NULL;
            size_t lb = 0, la = 0;
            tokenizer_decode(&tok, ids, (size_t)(n - 1), false, &before, &lb);
            tokenizer_decode(&tok, ids, (size_t)n, false, &all, &la);
            bool early = before && strstr(before, stop), hit = all && strstr(all, stop);
            bool eos = n > 0 && tokenizer_is_special(&tok, ids[n - 1]);
            double score = early ? 0 : hit ? 2 : (eos || n == max) ? 1 : 0;
            json_array_append_new(scores, json_real(score));
            free(before), free(all);
        }
        char *text = json_dumps(scores, JSON_COMPACT);
        printf("%s\n", text);
        fflush(stdout);
        free(text);
        json_decref(scores), json_decref(batch);
    }
    tokenizer_free(&tok);
    return 0;
}

/* trl.generation_kwargs stop strings: every completion ends at the first stop string (none
 * earlier), at EOS or at max_new_tokens (another generation_kwargs key, over
 * max_completion_length), and some end at the stop string. */
static void test_stop_strings(void) {
    char reward[4300], out[4096];
    snprintf(reward, sizeof reward, "{command: \"%s stopcheck e 5\", name: stopcheck}", self_path);
    const char *cfg = write_config_with(
        "stop.yaml", "  generation_kwargs: {stop_strings: [\"e\"], max_new_tokens: 5}\n", reward);
    snprintf(out, sizeof out, "%s", harness_tmp_path("out-stop"));
    CHECK(run(cfg, out, harness_tmp_path("stop.log"), NULL) == 0, "stop strings run failed");
    char path[4200];
    snprintf(path, sizeof path, "%s/completions.jsonl", out);
    json_t *rows = read_jsonl(path);
    int stopped = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        double v = json_number_value(json_object_get(json_array_get(rows, i), "stopcheck"));
        CHECK(v >= 1, "completion %zu breaks the stop rule: %s", i,
              json_string_value(json_object_get(json_array_get(rows, i), "completion")));
        stopped += v == 2;
    }
    CHECK(json_array_size(rows) == STEPS * ROWS && stopped > 0,
          "%zu rows, %d ended by the stop "
          "string",
          json_array_size(rows), stopped);
    printf("stop strings: %d of %zu completions ended at \"e\"\n", stopped, json_array_size(rows));
    json_decref(rows);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "reward")) return reward_command();
    if (argc > 3 && !strcmp(argv[1], "stopcheck")) return stopcheck_command(argv[2], atoi(argv[3]));
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    CHECK(n > 0, "readlink /proc/self/exe");
    self_path[n > 0 ? n : 0] = '\0';
    const char *cfg = write_config();
    char out[4096], log[4096], path[4200], ckpt[4200];
    snprintf(out, sizeof out, "%s", harness_tmp_path("out"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("train.log"));
    snprintf(path, sizeof path, "%s/completions.jsonl", out);
    CHECK(run(cfg, out, log, NULL) == 0, "training failed: see %s", log);
    json_t *metrics = harness_read_metrics(out);
    json_t *rows = read_jsonl(path);
    check_rows(rows, metrics, 1, STEPS);
    check_printed(log, rows, 1, STEPS);
    json_decref(rows);

    /* resumed from checkpoint-2: step 3 is appended after the first run's rows */
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    CHECK(run(cfg, out, log, ckpt) == 0, "resumed training failed: see %s", log);
    rows = read_jsonl(path);
    CHECK(json_array_size(rows) == (STEPS + 1) * ROWS, "resumed: %zu rows", json_array_size(rows));
    json_t *tail = json_array();
    for (size_t i = STEPS * ROWS; i < json_array_size(rows); i++)
        json_array_append(tail, json_array_get(rows, i));
    json_decref(metrics);
    metrics = harness_read_metrics(out);
    check_rows(tail, metrics, 3, 3);
    json_decref(tail);
    json_decref(rows);

    /* a fresh run in the same directory starts the file afresh */
    CHECK(run(cfg, out, log, NULL) == 0, "second training failed: see %s", log);
    rows = read_jsonl(path);
    json_decref(metrics);
    metrics = harness_read_metrics(out);
    check_rows(rows, metrics, 1, STEPS);
    json_decref(rows);
    json_decref(metrics);
    test_max_prompt_length();
    test_stop_strings();
    return harness_finish("test_grpo_log_completions");
}
