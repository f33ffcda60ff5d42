/* Preference datasets against the Python stack (tests/fixtures/pref_datasets, made by
 * tools/reference/make_pref_dataset_fixtures.py with Axolotl 0.19.0 and TRL 1.9.0):
 *  - format_cases.json: for every dataset type, the prompt / chosen / rejected (KTO: prompt /
 *    completion / label) strings of every input row equal what Axolotl's own strategy gives
 *    (rows marked "deviation": what the spec decides where upstream breaks);
 *  - spec_examples.json: the worked examples of axolotl-config.md §4;
 *  - tokenize_cases.json: whole loads (types, excess_length_strategy, max_prompt_len, rl) give
 *    the token ids TRL's own tokenisation gives, the same drop counts and Axolotl's warnings, or
 *    the same error;
 *  - error messages name the file, the line and the field, the unknown type and the types that
 *    exist, and the YAML `type:` mapping reaches user_defined.default. */
#include "common/error.h"
#include "common/json_util.h"
#include "config/train_config.h"
#include "data/dataset_rows.h"
#include "data/pref_dataset.h"
#include "data/pref_format.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define FIXTURES "tests/fixtures/pref_datasets/"

static RlMethod rl_of(const char *name) {
    for (RlMethod rl = RL_DPO; rl <= RL_GDPO; rl++)
        if (strcmp(rl_method_name(rl), name) == 0) return rl;
    return RL_NONE;
}

/* A fixture path (relative to the source tree) or an absolute one. */
static char *source_path(const char *rel) {
    return xstrdup(rel[0] == '/' ? rel : harness_source_path(rel));
}

/* A TrainConfig as train_config_load would give it, from a fixture case. */
static void config_from_case(TrainConfig *cfg, const json_t *c) {
    memset(cfg, 0, sizeof *cfg);
    cfg->source = xstrdup(json_string_value(json_object_get(c, "name")));
    cfg->rl = rl_of(json_string_value(json_object_get(c, "rl")));
    cfg->tokenizer_config = source_path(json_string_value(json_object_get(c, "tokenizer")));
    const json_t *top = json_object_get(c, "config");
    const char *ct = json_string_value(json_object_get(top, "chat_template"));
    const char *jinja = json_string_value(json_object_get(top, "chat_template_jinja"));
    cfg->chat_template = ct ? xstrdup(ct) : NULL;
    cfg->chat_template_jinja = jinja ? xstrdup(jinja) : NULL;
    const json_t *seq = json_object_get(c, "sequence_len");
    cfg->sequence_len = seq ? json_integer_value(seq) : 512;
    const char *strategy = json_string_value(json_object_get(c, "excess_length_strategy"));
    cfg->excess_length_strategy = xstrdup(strategy ? strategy : "drop");
    cfg->max_prompt_len = json_integer_value(json_object_get(c, "max_prompt_len"));
    const json_t *entries = json_object_get(c, "datasets");
    json_t *one = NULL;
    if (!entries) entries = one = json_pack("[O]", json_object_get(c, "dataset"));
    cfg->n_datasets = (int)json_array_size(entries);
    cfg->datasets = xcalloc((size_t)cfg->n_datasets, sizeof *cfg->datasets);
    for (int d = 0; d < cfg->n_datasets; d++) {
        const json_t *e = json_array_get(entries, (size_t)d);
        DatasetConfig *dc = &cfg->datasets[d];
        dc->path = source_path(json_string_value(json_object_get(e, "path")));
        const json_t *type = json_object_get(e, "type");
        dc->type = json_is_object(type)   ? xstrdup("user_defined.default")
                   : json_is_string(type) ? xstrdup(json_string_value(type))
                                          : NULL;
        dc->options = json_deep_copy(e);
        dc->line = d + 1;
    }
    json_decref(one);
}

static void config_free(TrainConfig *cfg) {
    for (int d = 0; d < cfg->n_datasets; d++) {
        free(cfg->datasets[d].path);
        free(cfg->datasets[d].type);
        json_decref(cfg->datasets[d].options);
    }
    free(cfg->datasets);
    free(cfg->source);
    free(cfg->tokenizer_config);
    free(cfg->chat_template);
    free(cfg->chat_template_jinja);
    free(cfg->excess_length_strategy);
}

/* ------------------------------------------------------------------------------ formatting */

typedef struct {
    const PrefFormat *format;
    PrefStrings *rows;
    size_t n;
} FormattedRows;

static int collect_row(void *ctx, const json_t *row) {
    FormattedRows *f = ctx;
    f->rows = xrealloc(f->rows, (f->n + 1) * sizeof *f->rows);
    if (pref_format_row(f->format, row, &f->rows[f->n]) != 0) return -1;
    f->n++;
    return 0;
}

/* Formats every row of a case's (single) dataset; returns the count, or -1. */
static long format_case(const json_t *c, FormattedRows *out, FILE *log) {
    TrainConfig cfg;
    config_from_case(&cfg, c);
    memset(out, 0, sizeof *out);
    PrefFormat *format = NULL;
    int rc = pref_format_open(&format, &cfg, 0, log);
    out->format = format;
    if (rc == 0) rc = dataset_rows_foreach(&cfg.datasets[0], collect_row, out);
    pref_format_close(format);
    config_free(&cfg);
    return rc == 0 ? (long)out->n : -1;
}

static void free_rows(FormattedRows *f) {
    for (size_t i = 0; i < f->n; i++)
        pref_strings_free(&f->rows[i]);
    free(f->rows);
}

static void check_text(const char *name, size_t row, const char *field, const char *got,
                       const json_t *want) {
    const char *w = json_string_value(want);
    CHECK(w && got && strcmp(got, w) == 0, "%s[%zu].%s:\n  got  \"%s\"\n  want \"%s\"", name, row,
          field, got ? got : "(null)", w ? w : "(none)");
}

static void check_format_cases(const json_t *cases) {
    size_t i;
    json_t *c;
    int rows = 0;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        bool kto = strcmp(json_string_value(json_object_get(c, "rl")), "kto") == 0;
        const json_t *expected = json_object_get(c, "expected");
        FormattedRows got;
        FILE *log = tmpfile(); /* deprecation notes, checked in check_messages */
        long n = format_case(c, &got, log);
        fclose(log);
        CHECK(n == (long)json_array_size(expected), "%s: %ld rows formatted (%s), Axolotl %zu",
              name, n, n < 0 ? err_msg() : "", json_array_size(expected));
        for (size_t r = 0; n >= 0 && r < got.n && r < json_array_size(expected); r++) {
            const json_t *want = json_array_get(expected, r);
            const PrefStrings *s = &got.rows[r];
            check_text(name, r, "prompt", s->prompt, json_object_get(want, "prompt"));
            if (kto) {
                check_text(name, r, "completion", s->completion,
                           json_object_get(want, "completion"));
                CHECK(s->label == json_is_true(json_object_get(want, "label")), "%s[%zu].label",
                      name, r);
            } else {
                check_text(name, r, "chosen", s->chosen, json_object_get(want, "chosen"));
                check_text(name, r, "rejected", s->rejected, json_object_get(want, "rejected"));
            }
            rows++;
        }
        free_rows(&got);
    }
    printf("format parity: %zu cases, %d rows\n", json_array_size(cases), rows);
}

static void check_spec_examples(const json_t *cases, const json_t *examples) {
    size_t i;
    json_t *e;
    json_array_foreach(examples, i, e) {
        const char *name = json_string_value(json_object_get(e, "case"));
        size_t row = (size_t)json_integer_value(json_object_get(e, "row"));
        const json_t *c = NULL;
        size_t k;
        json_t *x;
        json_array_foreach(cases, k, x) if (strcmp(json_string_value(json_object_get(x, "name")),
                                                   name) == 0) c = x;
        CHECK(c != NULL, "spec example: no case %s", name);
        if (!c) continue;
        FormattedRows got;
        FILE *log = tmpfile();
        long n = format_case(c, &got, log);
        fclose(log);
        CHECK(n > (long)row, "spec example %s: %s", name, err_msg());
        if (n > (long)row) {
            const char *field;
            json_t *want;
            const PrefStrings *s = &got.rows[row];
            json_object_foreach(json_object_get(e, "expected"), field, want) {
                const char *have = strcmp(field, "prompt") == 0   ? s->prompt
                                   : strcmp(field, "chosen") == 0 ? s->chosen
                                                                  : s->rejected;
                check_text(name, row, field, have, want);
            }
        }
        free_rows(&got);
    }
}

/* ---------------------------------------------------------------------------- tokenisation */

static bool same_ids(const int32_t *got, int n, const json_t *want) {
    if (!json_is_array(want) || (size_t)n != json_array_size(want)) return false;
    for (int i = 0; i < n; i++)
        if (got[i] != (int32_t)json_integer_value(json_array_get(want, (size_t)i))) return false;
    return true;
}

static char *ids_text(const int32_t *ids, int n) {
    char *s = xmalloc((size_t)n * 12 + 3);
    size_t len = 0;
    s[len++] = '[';
    for (int i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "%s%d", i ? "," : "", ids[i]);
    s[len++] = ']';
    s[len] = '\0';
    return s;
}

static void check_ids(const char *name, size_t row, const char *field, const int32_t *got, int n,
                      const json_t *want) {
    bool ok = same_ids(got, n, want);
    char *g = ok ? NULL : ids_text(got, n), *w = ok ? NULL : json_dumps(want, JSON_COMPACT);
    CHECK(ok, "%s[%zu].%s:\n  got  %s\n  want %s", name, row, field, g, w);
    free(g);
    free(w);
}

static char *read_log(FILE *log) {
    long n = ftell(log);
    char *text = xcalloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(log);
    if (n > 0 && fread(text, 1, (size_t)n, log) != (size_t)n) text[0] = '\0';
    return text;
}

static void check_tokenize_case(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    TrainConfig cfg;
    config_from_case(&cfg, c);
    Tokenizer tok;
    if (tokenizer_load(&tok, cfg.tokenizer_config) != 0) {
        CHECK(0, "%s: %s", name, err_msg());
        config_free(&cfg);
        return;
    }
    FILE *log = tmpfile();
    PrefDataset ds;
    int rc = pref_dataset_load(&ds, &cfg, &tok, log);
    char *log_text = read_log(log);
    fclose(log);
    const char *want_error = json_string_value(json_object_get(c, "error"));
    if (want_error) {
        CHECK(rc != 0 && strstr(err_msg(), want_error), "%s: want error \"%s\", got %s", name,
              want_error, rc ? err_msg() : "success");
        /* the error names the data file and line */
        CHECK(rc != 0 && strstr(err_msg(), ".jsonl:"), "%s: error without FILE:LINE: %s", name,
              err_msg());
        if (rc == 0) pref_dataset_free(&ds);
    } else if (rc != 0) {
        CHECK(0, "%s: %s", name, err_msg());
    } else {
        const json_t *pairs = json_object_get(c, "pairs"), *rows = json_object_get(c, "rows");
        CHECK(ds.dropped == (size_t)json_integer_value(json_object_get(c, "dropped")),
              "%s: %zu dropped, Python %lld", name, ds.dropped,
              (long long)json_integer_value(json_object_get(c, "dropped")));
        if (pairs) {
            CHECK(ds.n_pairs == json_array_size(pairs) && ds.n_rows == 0,
                  "%s: %zu pairs, Python %zu", name, ds.n_pairs, json_array_size(pairs));
            for (size_t i = 0; i < ds.n_pairs && i < json_array_size(pairs); i++) {
                const json_t *w = json_array_get(pairs, i);
                const PrefPair *p = &ds.pairs[i];
                check_ids(name, i, "prompt", p->prompt, p->n_prompt, json_object_get(w, "prompt"));
                check_ids(name, i, "chosen", p->chosen, p->n_chosen, json_object_get(w, "chosen"));
                check_ids(name, i, "rejected", p->rejected, p->n_rejected,
                          json_object_get(w, "rejected"));
                const json_t *rp = json_object_get(w, "rejected_prompt");
                if (rp)
                    check_ids(name, i, "rejected_prompt", p->rejected_prompt,
                              p->rejected_prompt ? p->n_rejected_prompt : -1, rp);
                else
                    CHECK(!p->rejected_prompt, "%s[%zu]: a rejected_prompt TRL does not have", name,
                          i);
            }
        } else {
            CHECK(ds.n_rows == json_array_size(rows) && ds.n_pairs == 0, "%s: %zu rows, Python %zu",
                  name, ds.n_rows, json_array_size(rows));
            for (size_t i = 0; i < ds.n_rows && i < json_array_size(rows); i++) {
                const json_t *w = json_array_get(rows, i);
                const KtoRow *r = &ds.rows[i];
                check_ids(name, i, "prompt", r->prompt, r->n_prompt, json_object_get(w, "prompt"));
                check_ids(name, i, "completion", r->completion, r->n_completion,
                          json_object_get(w, "completion"));
                CHECK(r->desirable == json_is_true(json_object_get(w, "label")), "%s[%zu].label",
                      name, i);
            }
        }
        size_t k;
        json_t *warning;
        json_array_foreach(json_object_get(c, "warnings"), k, warning) {
            CHECK(strstr(log_text, json_string_value(warning)) != NULL,
                  "%s: warning \"%s\" not in the log:\n%s", name, json_string_value(warning),
                  log_text);
        }
        pref_dataset_free(&ds);
    }
    free(log_text);
    tokenizer_free(&tok);
    config_free(&cfg);
}

/* ---------------------------------------------------------------------- messages and config */

/* Loads one dataset file holding `jsonl` with `type` (NULL: none) for `rl`; returns the rc and
 * leaves the message / log for the caller. */
static int load_text(RlMethod rl, const char *type, const char *options_json, const char *jsonl,
                     char **log_out) {
    const char *path = harness_tmp_path("rows.jsonl");
    harness_write_file(path, jsonl, strlen(jsonl));
    json_t *o = json_loads(options_json ? options_json : "{}", 0, NULL);
    json_object_set_new(o, "path", json_string(path));
    if (type && !json_object_get(o, "type")) json_object_set_new(o, "type", json_string(type));
    json_t *c =
        json_pack("{s:s,s:s,s:s,s:{s:s},s:[o]}", "name", "cfg.yaml", "rl", rl_method_name(rl),
                  "tokenizer", "tests/fixtures/tokenizers/qwen2_bytelevel", "config",
                  "chat_template", "chatml", "datasets", o);
    TrainConfig cfg;
    config_from_case(&cfg, c);
    json_decref(c);
    if (type) { /* as given, e.g. a string user_defined.default */
        free(cfg.datasets[0].type);
        cfg.datasets[0].type = xstrdup(type);
    }
    Tokenizer tok;
    int rc = tokenizer_load(&tok, cfg.tokenizer_config);
    FILE *log = tmpfile();
    PrefDataset ds;
    if (rc == 0) rc = pref_dataset_load(&ds, &cfg, &tok, log);
    if (rc == 0) pref_dataset_free(&ds);
    char *text = read_log(log);
    fclose(log);
    if (log_out)
        *log_out = text;
    else
        free(text);
    tokenizer_free(&tok);
    config_free(&cfg);
    return rc;
}

static void expect_error(RlMethod rl, const char *type, const char *options, const char *jsonl,
                         const char *const *parts) {
    int rc = load_text(rl, type, options, jsonl, NULL);
    CHECK(rc != 0, "%s: loaded, expected an error", type ? type : "(no type)");
    for (; rc != 0 && *parts; parts++)
        CHECK(strstr(err_msg(), *parts), "message lacks \"%s\": %s", *parts, err_msg());
}

static void check_messages(void) {
    expect_error(RL_DPO, "chatml.intel", NULL,
                 "{\"question\": \"q\", \"chosen\": \"a\", \"rejected\": \"b\"}\n"
                 "{\"chosen\": \"a\", \"rejected\": \"b\"}\n",
                 (const char *[]){"rows.jsonl:2:", "missing field \"question\"", NULL});
    expect_error(RL_DPO, "chatml.nope", NULL, "{}\n",
                 (const char *[]){"cfg.yaml:1: datasets[0].type: \"chatml.nope\"", "rl: dpo",
                                  "chatml.intel", "chat_template.default", "zephyr.nectar",
                                  "user_defined.default", NULL});
    /* chatml.default is DPO only; KTO lists its own types */
    expect_error(RL_KTO, "chatml", NULL, "{}\n",
                 (const char *[]){"datasets[0].type: \"chatml\"", "chatml.argilla_chat", NULL});
    CHECK(!strstr(err_msg(), "chatml.icr"), "KTO's list names a DPO type: %s", err_msg());
    expect_error(RL_ORPO, "chatml.intel", NULL, "{}\n",
                 (const char *[]){"rl: orpo", "chat_template.argilla", NULL});
    expect_error(RL_DPO, "user_defined.default", NULL, "{}\n",
                 (const char *[]){"User-defined dataset type must be a dictionary", NULL});
    expect_error(RL_DPO, NULL, "{\"type\": {\"prompt_format\": \"{question} {0}\"}}", "{}\n",
                 (const char *[]){"type.prompt_format", "{question}", "{prompt}, {system}", NULL});
    expect_error(RL_KTO, "chatml.intel", NULL, "{\"question\": \"q\", \"completion\": \"a\"}\n",
                 (const char *[]){"rows.jsonl:1:", "missing field \"label\"", NULL});
    expect_error(RL_DPO, "chatml.argilla_chat", NULL,
                 "{\"chosen\": [{\"role\": \"user\", \"content\": \"q\"}], \"rejected\": []}\n",
                 (const char *[]){"rows.jsonl:1:", "field \"chosen\"", "at least 2", NULL});
    expect_error(RL_DPO, NULL, NULL, "{\"prompt\": \"p\", \"chosen\": \"\", \"rejected\": \"r\"}\n",
                 (const char *[]){"rows.jsonl:1:",
                                  "Prompt, chosen and rejected keys are required for DPO/ORPO "
                                  "datasets",
                                  NULL});
    expect_error(RL_ORPO, "chat_template.argilla", NULL,
                 "{\"chosen\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                 "\"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"q\"}], "
                 "\"rejected\": [{\"role\": \"assistant\", \"content\": \"b\"}]}\n",
                 (const char *[]){"rows.jsonl:1:", "invalid number of turns", NULL});
    expect_error(RL_DPO, "chat_template", "{\"roles\": {\"user\": [\"human\"]}}",
                 "{\"messages\": [{\"role\": \"gpt\", \"content\": \"x\"}], \"chosen\": \"a\", "
                 "\"rejected\": \"b\"}\n",
                 (const char *[]){"rows.jsonl:1:", "role \"gpt\"", NULL});
    expect_error(RL_KTO, NULL, NULL,
                 "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n"
                 "{\"prompt\": \"p\", \"completion\": \"a\", \"label\": true}\n",
                 (const char *[]){"rows.jsonl:2:", "chosen and rejected", NULL});

    /* the old DPO name still loads, with a deprecation warning */
    char *log = NULL;
    int rc = load_text(RL_DPO, "chatml.argilla", NULL,
                       "{\"instruction\": \"i\", \"chosen_response\": \"a\", "
                       "\"rejected_response\": \"b\"}\n",
                       &log);
    CHECK(rc == 0, "chatml.argilla: %s", err_msg());
    CHECK(log && strstr(log, "\"chatml.argilla\" is deprecated") && strstr(log, "chatml.default"),
          "no deprecation warning: %s", log);
    free(log);
}

/* The YAML route: a mapping under type: is user_defined.default, its keys read from the entry;
 * and a key Axolotl would drop for DPO is used, with a note. */
static void check_yaml(void) {
    const char *data = harness_tmp_path("pairs.jsonl");
    const char *rows = "{\"q\": \"2+2?\", \"good\": \"4\", \"bad\": \"5\"}\n";
    harness_write_file(data, rows, strlen(rows));
    const char *conv = harness_tmp_path("conv.jsonl");
    const char *conv_rows =
        "{\"messages\": [{\"from\": \"human\", \"value\": \"hi\"}], \"chosen\": "
        "\"hello\", \"rejected\": \"go\"}\n";
    harness_write_file(conv, conv_rows, strlen(conv_rows));
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "base_model: %s\nrl: dpo\nlearning_rate: 1e-6\nchat_template: chatml\n"
             "datasets:\n"
             "  - path: %s\n"
             "    type:\n"
             "      field_prompt: q\n"
             "      field_chosen: good\n"
             "      field_rejected: bad\n"
             "      prompt_format: \"Q: {prompt}\\nA:\"\n"
             "  - path: %s\n"
             "    type: chat_template\n"
             "    message_property_mappings: {role: from, content: value}\n"
             "    roles: {user: [human]}\n",
             harness_source_path("tests/fixtures/tokenizers/qwen2_bytelevel"), data, conv);
    const char *path = harness_tmp_path("cfg.yaml");
    harness_write_file(path, yaml, strlen(yaml));
    TrainConfig cfg;
    if (train_config_load(&cfg, path, NULL, 0) != 0) {
        CHECK(0, "yaml: %s", err_msg());
        return;
    }
    CHECK(cfg.n_warnings == 0, "yaml: unexpected warning: %s",
          cfg.n_warnings ? cfg.warnings[0] : "");
    CHECK(cfg.datasets[0].type && strcmp(cfg.datasets[0].type, "user_defined.default") == 0,
          "type mapping -> %s", cfg.datasets[0].type);
    FormattedRows got;
    json_t *c = json_pack("{s:s,s:s,s:s,s:{s:s},s:O}", "name", "yaml", "rl", "dpo", "tokenizer",
                          "tests/fixtures/tokenizers/qwen2_bytelevel", "config", "chat_template",
                          "chatml", "dataset", cfg.datasets[0].options);
    long n = format_case(c, &got, stderr);
    json_decref(c);
    CHECK(n == 1 && strcmp(got.rows[0].prompt, "Q: 2+2?\nA:") == 0 &&
              strcmp(got.rows[0].chosen, "4") == 0,
          "yaml user_defined: %s", n == 1 ? got.rows[0].prompt : err_msg());
    free_rows(&got);
    Tokenizer tok;
    CHECK(tokenizer_load(&tok, cfg.tokenizer_config) == 0, "%s", err_msg());
    FILE *log = tmpfile();
    PrefDataset ds;
    int rc = pref_dataset_load(&ds, &cfg, &tok, log);
    CHECK(rc == 0 && ds.n_pairs == 2, "yaml load: %s", rc ? err_msg() : "");
    if (rc == 0) pref_dataset_free(&ds);
    char *text = read_log(log);
    fclose(log);
    CHECK(strstr(text, "datasets[1].roles: Axolotl 0.19 drops this key") != NULL,
          "no note on the dropped key: %s", text);
    free(text);
    tokenizer_free(&tok);
    train_config_free(&cfg);
}

int main(void) {
    json_t *format = NULL, *spec = NULL, *tokenize = NULL;
    if (json_load_path(harness_source_path(FIXTURES "format_cases.json"), &format) != 0 ||
        json_load_path(harness_source_path(FIXTURES "spec_examples.json"), &spec) != 0 ||
        json_load_path(harness_source_path(FIXTURES "tokenize_cases.json"), &tokenize) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    const json_t *format_cases = json_object_get(format, "cases");
    check_format_cases(format_cases);
    check_spec_examples(format_cases, spec);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(tokenize, "cases"), i, c) check_tokenize_case(c);
    printf("tokenisation parity: %zu cases\n", json_array_size(json_object_get(tokenize, "cases")));
    check_messages();
    check_yaml();
    json_decref(format);
    json_decref(spec);
    json_decref(tokenize);
    return harness_finish("test_pref_dataset");
}
