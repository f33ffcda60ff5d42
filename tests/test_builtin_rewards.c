/* Built-in reward functions (rewards/builtin_rewards.h): answer extraction and comparison for
 * builtin.accuracy, builtin.format's regex modes, builtin.length's values, conversational
 * completions, and the errors for unknown names, options and bad patterns. */
#include "common/error.h"
#include "harness.h"
#include "rewards/answer_extract.h"
#include "rewards/builtin_rewards.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* A batch over `completions` (a JSON array, stolen) with `columns` (an object, stolen, or NULL)
 * and token counts `lens` (or all 1). */
typedef struct {
    RewardBatch b;
    json_t *prompts, *completions, *columns;
    int32_t **ids;
    int *lens;
} Batch;

static Batch batch_new(json_t *completions, json_t *columns, const int *lens) {
    Batch t = {0};
    int n = (int)json_array_size(completions);
    t.completions = completions;
    t.columns = columns ? columns : json_object();
    t.prompts = json_array();
    t.ids = calloc((size_t)n + 1, sizeof *t.ids);
    t.lens = calloc((size_t)n + 1, sizeof *t.lens);
    for (int i = 0; i < n; i++) {
        json_array_append_new(t.prompts, json_string("Q?"));
        t.lens[i] = lens ? lens[i] : 1;
        t.ids[i] = calloc((size_t)t.lens[i] + 1, sizeof **t.ids);
    }
    t.b = (RewardBatch){.n = n,
                        .prompts = t.prompts,
                        .completions = t.completions,
                        .completion_ids = (const int32_t *const *)t.ids,
                        .completion_lens = t.lens,
                        .columns = t.columns};
    return t;
}

static void batch_free(Batch *t) {
    for (int i = 0; i < t->b.n; i++)
        free(t->ids[i]);
    free(t->ids);
    free(t->lens);
    json_decref(t->prompts);
    json_decref(t->completions);
    json_decref(t->columns);
}

static json_t *options(const char *text) {
    json_error_t e;
    json_t *o = json_loads(text, 0, &e);
    if (!o) {
        fprintf(stderr, "bad test options %s: %s\n", text, e.text);
        exit(1);
    }
    return o;
}

/* builtin.accuracy with `opts` (JSON text or NULL) on one completion against one reference;
 * -1 when opening or scoring failed. */
static double accuracy1(const char *opts, json_t *completion, json_t *reference) {
    json_t *o = opts ? options(opts) : NULL;
    RewardFunc f;
    int rc = builtin_reward_open(&f, "builtin.accuracy", o);
    json_decref(o);
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", err_msg());
        json_decref(completion);
        json_decref(reference);
        return -1;
    }
    json_t *cols = json_object();
    json_t *refs = json_array();
    json_array_append_new(refs, reference);
    json_object_set_new(cols, "answer", refs);
    json_t *comps = json_array();
    json_array_append_new(comps, completion);
    Batch t = batch_new(comps, cols, NULL);
    double out = -2;
    rc = f.score(f.impl, &t.b, &out);
    if (rc != 0) fprintf(stderr, "score: %s\n", err_msg());
    batch_free(&t);
    reward_func_close(&f);
    return rc == 0 ? out : -1;
}

/* The common case: a string completion, a string reference, default options. */
static double acc(const char *completion, const char *reference) {
    return accuracy1(NULL, json_string(completion), json_string(reference));
}

/* The span answer_extract finds, as a static string ("<none>" when none). */
static const char *extracted(const char *text, AnswerExtract mode) {
    static char buf[256];
    AnswerSpan s;
    if (!answer_extract(text, strlen(text), mode, &s)) return "<none>";
    snprintf(buf, sizeof buf, "%.*s", (int)s.len, s.p);
    return buf;
}

#define CHECK_EXTRACT(text, mode, want)                                                            \
    CHECK(strcmp(extracted(text, mode), want) == 0, "extract(%s) = '%s', want '%s'", text,         \
          extracted(text, mode), want)

/* Runs a built-in over completions (JSON text of an array) into out; returns score()'s status. */
static int run(const char *name, const char *opts, const char *completions, const int *lens,
               double *out) {
    json_t *o = opts ? options(opts) : NULL;
    RewardFunc f;
    int rc = builtin_reward_open(&f, name, o);
    json_decref(o);
    if (rc != 0) {
        fprintf(stderr, "open %s: %s\n", name, err_msg());
        return -1;
    }
    Batch t = batch_new(options(completions), NULL, lens);
    rc = f.score(f.impl, &t.b, out);
    batch_free(&t);
    reward_func_close(&f);
    return rc;
}

/* Whether opening name with opts fails with a message containing each of the needles. */
static bool open_fails(const char *name, const char *opts, const char *needle1,
                       const char *needle2) {
    json_t *o = opts ? options(opts) : NULL;
    RewardFunc f;
    int rc = builtin_reward_open(&f, name, o);
    json_decref(o);
    if (rc == 0) {
        reward_func_close(&f);
        fprintf(stderr, "%s %s opened\n", name, opts ? opts : "");
        return false;
    }
    bool ok = strstr(err_msg(), needle1) && (!needle2 || strstr(err_msg(), needle2));
    if (!ok) fprintf(stderr, "message: %s\n", err_msg());
    return ok && f.impl == NULL && f.name == NULL;
}

/* ------------------------------------------------------------------ extraction */

static void test_extraction(void) {
    CHECK_EXTRACT("so \\boxed{\\frac{1}{2}} it is", ANSWER_BOXED, "\\frac{1}{2}");
    CHECK_EXTRACT("\\boxed{3} or rather \\boxed{4}.", ANSWER_BOXED, "4");
    CHECK_EXTRACT("\\boxed{5} then cut off \\boxed{6", ANSWER_BOXED, "5");
    CHECK_EXTRACT("\\boxed{\\{1, 2\\}}", ANSWER_BOXED, "\\{1, 2\\}");
    CHECK_EXTRACT("\\boxed{\\}} x", ANSWER_BOXED, "\\}"); /* an escaped brace does not close */
    CHECK_EXTRACT("\\boxed{}", ANSWER_BOXED, "");
    CHECK_EXTRACT("no box", ANSWER_BOXED, "<none>");
    CHECK_EXTRACT("48 / 2 = 24\n#### 72\nHope that helps, 9", ANSWER_HASH, " 72");
    CHECK_EXTRACT("#### 1 then #### 2", ANSWER_HASH, " 2");
    CHECK_EXTRACT("The total is 1,234.50 dollars", ANSWER_LAST_NUMBER, "1,234.50");
    CHECK_EXTRACT("x = -7", ANSWER_LAST_NUMBER, "-7");
    CHECK_EXTRACT("3-5", ANSWER_LAST_NUMBER, "5");
    CHECK_EXTRACT("(-2.5)", ANSWER_LAST_NUMBER, "-2.5");
    CHECK_EXTRACT("it is .5", ANSWER_LAST_NUMBER, ".5");
    CHECK_EXTRACT("It is 42.", ANSWER_LAST_NUMBER, "42");
    CHECK_EXTRACT("list 1,2,3", ANSWER_LAST_NUMBER, "3");
    CHECK_EXTRACT("version 1.2.3", ANSWER_LAST_NUMBER, "3");
    CHECK_EXTRACT("1,000,000 people", ANSWER_LAST_NUMBER, "1,000,000");
    CHECK_EXTRACT("I don't know", ANSWER_LAST_NUMBER, "<none>");
    CHECK_EXTRACT("#### 7 and \\boxed{8} then 9", ANSWER_AUTO, "8");
    CHECK_EXTRACT("#### 7\nthen 9", ANSWER_AUTO, " 7");
    CHECK_EXTRACT("first 7 then 9", ANSWER_AUTO, "9");
    CHECK_EXTRACT("nothing here", ANSWER_AUTO, "<none>");
    CHECK_EXTRACT(" all of it ", ANSWER_WHOLE, " all of it ");

    const char *gsm = "Natalia sold 48/2 = 24 clips.\n#### 72";
    AnswerSpan r = answer_reference(gsm, strlen(gsm));
    CHECK(r.len == 3 && memcmp(r.p, " 72", 3) == 0, "GSM8K reference -> '%.*s'", (int)r.len, r.p);
    r = answer_reference("so \\boxed{x^2}", strlen("so \\boxed{x^2}"));
    CHECK(r.len == 3 && memcmp(r.p, "x^2", 3) == 0, "MATH reference -> '%.*s'", (int)r.len, r.p);
    r = answer_reference("Paris", 5);
    CHECK(r.len == 5, "bare reference is taken whole");

    AnswerExtract mode;
    CHECK(answer_extract_parse("last_number", &mode) == 0 && mode == ANSWER_LAST_NUMBER, "parse");
    CHECK(answer_extract_parse("none", &mode) == 0 && mode == ANSWER_WHOLE, "parse none");
    CHECK(answer_extract_parse("boxed ", &mode) != 0, "parse rejects unknown modes");
}

/* ------------------------------------------------------------------ accuracy */

static void test_accuracy(void) {
    CHECK(acc("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}") == 1.0, "boxed latex");
    CHECK(acc("\\boxed{3} or rather \\boxed{4}", "4") == 1.0, "last boxed wins");
    CHECK(acc("\\boxed{3} or rather \\boxed{4}", "3") == 0.0, "earlier boxed loses");
    CHECK(acc("step 1 ... #### 42\nDone after 3 steps.", "42") == 1.0, "hash");
    CHECK(acc("The total is 1,234.50 dollars", "1234.5") == 1.0, "commas and decimals by value");
    CHECK(acc("It is 3.0.", "3") == 1.0, "3.0 == 3");
    CHECK(acc("It is 1000", "1,000") == 1.0, "1000 == 1,000");
    CHECK(acc("It is 1000", "$1,000.") == 1.0, "dollar and trailing dot dropped");
    CHECK(acc("3-5", "5") == 1.0 && acc("3-5", "-5") == 0.0, "minus as an operator");
    CHECK(acc("x = -7", "-7") == 1.0 && acc("x = -7", "7") == 0.0, "negative");
    CHECK(acc("I don't know", "5") == 0.0, "no number scores 0");
    CHECK(acc("The answer is 7", "8") == 0.0, "wrong number");
    CHECK(acc("so 72 in all", "Natalia sold 48/2 = 24 clips in May.\n#### 72") == 1.0,
          "GSM8K-style reference");
    CHECK(acc("so 24 in all", "Natalia sold 48/2 = 24 clips in May.\n#### 72") == 0.0,
          "a number inside the GSM8K solution is not its answer");
    CHECK(acc("\\boxed{Paris}", "Paris") == 1.0, "string answer");
    CHECK(acc("\\boxed{Paris}", "paris") == 0.0, "string answers are case-sensitive");
    CHECK(acc("\\boxed{ 12 }", "\\boxed{12}") == 1.0, "MATH-style reference, trimmed");

    CHECK(accuracy1(NULL, json_string("x = -7"), json_integer(-7)) == 1.0, "integer reference");
    CHECK(accuracy1(NULL, json_string("half: .5"), json_real(0.5)) == 1.0, "real reference");
    CHECK(isnan(accuracy1(NULL, json_string("42"), json_null())), "null reference -> NaN");
    CHECK(accuracy1(NULL, json_string("42"), json_true()) == -1, "boolean reference is an error");
    CHECK(strstr(err_msg(), "row 0") && strstr(err_msg(), "accuracy"), "message: %s", err_msg());

    json_t *conv = options("[{\"role\": \"assistant\", \"content\": \"so \\\\boxed{3}\"}]");
    CHECK(accuracy1(NULL, conv, json_string("3")) == 1.0, "conversational completion");
    CHECK(accuracy1(NULL, json_integer(3), json_string("3")) == -1, "non-string completion");
    CHECK(strstr(err_msg(), "completion 0"), "message: %s", err_msg());
    CHECK(accuracy1(NULL, options("[{\"role\": \"user\", \"content\": \"3\"}]"),
                    json_string("3")) == -1,
          "message list without an assistant message");

    /* extract modes */
    const char *both = "\\boxed{2} and then 3";
    CHECK(accuracy1("{\"extract\": \"boxed\"}", json_string(both), json_string("2")) == 1.0,
          "boxed");
    CHECK(accuracy1("{\"extract\": \"boxed\"}", json_string("just 2"), json_string("2")) == 0.0,
          "boxed mode ignores bare numbers");
    CHECK(accuracy1("{\"extract\": \"last_number\"}", json_string(both), json_string("3")) == 1.0,
          "last_number");
    CHECK(accuracy1("{\"extract\": \"hash\"}", json_string("#### 5\n"), json_string("5")) == 1.0,
          "hash");
    CHECK(accuracy1("{\"extract\": \"hash\"}", json_string("5"), json_string("5")) == 0.0,
          "hash mode without ####");
    CHECK(accuracy1("{\"extract\": \"none\"}", json_string(" 42. "), json_string("42")) == 1.0,
          "none: the whole completion, normalised");
    CHECK(accuracy1("{\"extract\": \"none\"}", json_string("it is 42"), json_string("42")) == 0.0,
          "none: no extraction");
    CHECK(accuracy1("{\"extract\": \"first\"}", json_string("1"), json_string("1")) == -1,
          "unknown extract mode");
    CHECK(strstr(err_msg(), "extract") && strstr(err_msg(), "first"), "message: %s", err_msg());
}

/* Column option, missing column, several rows. */
static void test_accuracy_columns(void) {
    json_t *o = options("{\"column\": \"solution\", \"name\": \"math_ok\"}");
    RewardFunc f;
    CHECK(builtin_reward_open(&f, "builtin.accuracy", o) == 0, "%s", err_msg());
    json_decref(o);
    CHECK(f.name && strcmp(f.name, "math_ok") == 0, "name option");
    Batch t = batch_new(options("[\"\\\\boxed{1}\", \"2\", \"no idea\", \"4\"]"),
                        options("{\"solution\": [\"1\", \"#### 2\", \"3\", null]}"), NULL);
    double out[4];
    CHECK(f.score(f.impl, &t.b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 1.0 && out[1] == 1.0 && out[2] == 0.0 && isnan(out[3]), "rows: %g %g %g %g",
          out[0], out[1], out[2], out[3]);
    batch_free(&t);

    t = batch_new(options("[\"1\"]"), options("{\"answer\": [\"1\"], \"question\": [\"?\"]}"),
                  NULL);
    CHECK(f.score(f.impl, &t.b, out) == -1, "missing column");
    CHECK(strstr(err_msg(), "'solution'") && strstr(err_msg(), "answer, question") &&
              strstr(err_msg(), "math_ok"),
          "message: %s", err_msg());
    batch_free(&t);
    reward_func_close(&f);
}

/* ------------------------------------------------------------------ format */

static void test_format(void) {
    double out[8];
    const char *comps = "[\"<think>a\\nb</think>\\n<answer>42</answer>\","
                        " \"<think>a</think><answer>x</answer>\","
                        " \"so <think>a</think><answer>x</answer>\","
                        " \"<think>a</think>\","
                        " \"<think>a</think><answer>x</answer>\\n\"]";
    CHECK(run("builtin.format", NULL, comps, NULL, out) == 0, "%s", err_msg());
    CHECK(out[0] == 1.0 && out[1] == 1.0, "reasoning format: %g %g", out[0], out[1]);
    CHECK(out[2] == 0.0 && out[3] == 0.0, "text before / no answer: %g %g", out[2], out[3]);
    CHECK(out[4] == 0.0, "full match: a trailing newline does not match");

    const char *nums = "[\"abc 12\", \"12\", \"abc\"]";
    CHECK(run("builtin.format", "{\"pattern\": \"\\\\d+\", \"match\": \"search\"}", nums, NULL,
              out) == 0,
          "%s", err_msg());
    CHECK(out[0] == 1.0 && out[1] == 1.0 && out[2] == 0.0, "search: %g %g %g", out[0], out[1],
          out[2]);
    CHECK(run("builtin.format", "{\"pattern\": \"\\\\d+\"}", nums, NULL, out) == 0, "%s",
          err_msg());
    CHECK(out[0] == 0.0 && out[1] == 1.0 && out[2] == 0.0, "full: %g %g %g", out[0], out[1],
          out[2]);

    const char *lines = "[\"a\\nb\"]";
    CHECK(run("builtin.format", "{\"pattern\": \"a.b\"}", lines, NULL, out) == 0 && out[0] == 1.0,
          "dotall by default");
    CHECK(run("builtin.format", "{\"pattern\": \"a.b\", \"dotall\": false}", lines, NULL, out) ==
                  0 &&
              out[0] == 0.0,
          "dotall off");

    CHECK(run("builtin.format", "{\"name\": \"fmt\"}",
              "[[{\"role\": \"assistant\", \"content\": \"<think></think><answer>1</answer>\"}]]",
              NULL, out) == 0 &&
              out[0] == 1.0,
          "conversational completion");

    /* A completion cut inside a UTF-8 character is judged, not an error. */
    RewardFunc f;
    json_t *o = options("{\"pattern\": \"\\\\d+\", \"match\": \"search\"}");
    CHECK(builtin_reward_open(&f, "builtin.format", o) == 0, "%s", err_msg());
    json_decref(o);
    json_t *bad = json_array();
    json_array_append_new(bad, json_stringn_nocheck("ab\xe2\x82 12", 7));
    json_array_append_new(bad, json_stringn_nocheck("ab\xe2\x82", 4));
    Batch t = batch_new(bad, NULL, NULL);
    CHECK(f.score(f.impl, &t.b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 1.0 && out[1] == 0.0, "invalid UTF-8: %g %g", out[0], out[1]);
    batch_free(&t);
    CHECK(strcmp(f.name, "format") == 0, "default name: %s", f.name);
    reward_func_close(&f);

    CHECK(open_fails("builtin.format", "{\"pattern\": \"<answer>(\\\\d+\"}", "<answer>(\\d+",
                     "offset 12"),
          "bad regex names the pattern and the offset");
    CHECK(strstr(err_msg(), "missing closing parenthesis"), "PCRE2's message: %s", err_msg());
    CHECK(open_fails("builtin.format", "{\"match\": \"prefix\"}", "match", "prefix"),
          "unknown match mode");
    CHECK(open_fails("builtin.format", "{\"dotall\": \"yes\"}", "dotall", NULL), "dotall type");
}

/* ------------------------------------------------------------------ length */

static void test_length(void) {
    double out[8];
    const int lens[] = {10, 5, 15, 0, 20, 30, 12};
    const char *comps = "[\"\", \"\", \"\", \"\", \"\", \"\", \"\"]";
    CHECK(run("builtin.length", "{\"target\": 10}", comps, lens, out) == 0, "%s", err_msg());
    const double want[] = {1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.8};
    for (int i = 0; i < 7; i++)
        CHECK(harness_close(out[i], want[i], 1e-12, 1e-12), "len %d: %g, want %g", lens[i], out[i],
              want[i]);
    CHECK(open_fails("builtin.length", NULL, "target", "required"), "target is required");
    CHECK(open_fails("builtin.length", "{\"target\": 0}", "target", "positive"), "target 0");
    CHECK(open_fails("builtin.length", "{\"target\": -3}", "target", "positive"), "target < 0");
    CHECK(open_fails("builtin.length", "{\"target\": 2.5}", "target", NULL), "fractional target");
    CHECK(open_fails("builtin.length", "{\"target\": \"10\"}", "target", NULL), "string target");
}

/* ------------------------------------------------------------------ names and options */

static void test_names_and_options(void) {
    CHECK(open_fails("builtin.accurracy", NULL, "builtin.accurracy",
                     "builtin.accuracy, builtin.format, builtin.length"),
          "unknown builtin lists the known ones");
    CHECK(open_fails("accuracy", NULL, "unknown built-in", NULL), "the builtin. prefix is needed");
    CHECK(open_fails("builtin.accuracy", "{\"colum\": \"x\"}", "'colum'", "column"),
          "unknown option named, known ones listed");
    CHECK(open_fails("builtin.length", "{\"target\": 5, \"pattern\": \"x\"}", "'pattern'",
                     "builtin.length"),
          "another builtin's option is unknown");
    CHECK(open_fails("builtin.format", "[1]", "object", NULL), "options must be an object");
    CHECK(open_fails("builtin.format", "{\"name\": \"\"}", "name", NULL), "empty name");
    CHECK(open_fails("builtin.format", "{\"name\": 3}", "name", NULL), "name type");
    CHECK(open_fails("builtin.accuracy", "{\"column\": 3}", "column", NULL), "column type");

    static const char *const names[][2] = {{"builtin.accuracy", "accuracy"},
                                           {"builtin.format", "format"},
                                           {"builtin.length", "length"}};
    for (int i = 0; i < 3; i++) {
        json_t *o = i == 2 ? options("{\"target\": 4}") : NULL;
        RewardFunc f;
        CHECK(builtin_reward_open(&f, names[i][0], o) == 0, "%s", err_msg());
        CHECK(f.name && strcmp(f.name, names[i][1]) == 0, "%s: name %s", names[i][0], f.name);
        json_decref(o);
        reward_func_close(&f);
        CHECK(f.name == NULL && f.impl == NULL, "closed");
    }

    /* An empty batch touches nothing. */
    RewardFunc f;
    CHECK(builtin_reward_open(&f, "builtin.accuracy", NULL) == 0, "%s", err_msg());
    Batch t = batch_new(json_array(), options("{\"answer\": []}"), NULL);
    CHECK(f.score(f.impl, &t.b, NULL) == 0, "empty batch: %s", err_msg());
    batch_free(&t);
    reward_func_close(&f);
}

int main(void) {
    test_extraction();
    test_accuracy();
    test_accuracy_columns();
    test_format();
    test_length();
    test_names_and_options();
    return harness_finish("test_builtin_rewards");
}
