/* Chat templates against Python jinja2 + transformers.
 *
 * 1. Every case of every fixture in tests/fixtures/chat_templates (made by
 *    tools/reference/make_chat_template_fixtures.py) renders byte-identically, or fails
 *    where jinja2 fails: with the template's own message for raise_exception, and with
 *    jinja2's line number whenever jinja2 names one.
 * 2. Bad templates and bad inputs give messages, never crashes: every prefix of the
 *    family templates is compiled and, when it compiles, rendered.
 * 3. Generation spans, the render API variants, and API misuse. */
#include "chat/chat_template.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cases_passed, cases_total;

static void fixture_clock(const json_t *fx, struct tm *tmv) {
    memset(tmv, 0, sizeof *tmv);
    const char *now = json_string_value(json_object_get(fx, "now"));
    if (!now || sscanf(now, "%d-%d-%dT%d:%d:%d", &tmv->tm_year, &tmv->tm_mon, &tmv->tm_mday,
                       &tmv->tm_hour, &tmv->tm_min, &tmv->tm_sec) != 6) {
        tmv->tm_year = 2024;
        tmv->tm_mon = 7;
        tmv->tm_mday = 26;
    }
    tmv->tm_year -= 1900;
    tmv->tm_mon -= 1;
    time_t t = timegm(tmv); /* fills in the weekday and day of the year */
    gmtime_r(&t, tmv);
}

/* Shows where two outputs first differ. */
static void show_diff(const char *what, const char *got, size_t got_len, const char *want,
                      size_t want_len) {
    size_t i = 0;
    while (i < got_len && i < want_len && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu (got %zu bytes, want %zu)\n", what, i,
            got_len, want_len);
    fprintf(stderr, "    got:  ...%.*s...\n", (int)((got_len - from) < 120 ? got_len - from : 120),
            got + from);
    fprintf(stderr, "    want: ...%.*s...\n",
            (int)((want_len - from) < 120 ? want_len - from : 120), want + from);
}

static int render_case(const ChatTemplate *tpl, const json_t *c, const struct tm *now,
                       ChatRenderResult *res) {
    const char *mode = json_string_value(json_object_get(c, "mode"));
    if (mode && strcmp(mode, "apply") == 0) {
        const json_t *a = json_object_get(c, "args");
        ChatApplyArgs args = {
            .messages = json_object_get(a, "messages"),
            .tools = json_object_get(a, "tools"),
            .documents = json_object_get(a, "documents"),
            .add_generation_prompt = json_is_true(json_object_get(a, "add_generation_prompt")),
            .continue_final_message = json_is_true(json_object_get(a, "continue_final_message")),
            .special_tokens = json_object_get(a, "special_tokens"),
            .kwargs = json_object_get(a, "kwargs"),
            .now = now,
        };
        if (json_is_null(args.tools)) args.tools = NULL;
        if (json_is_null(args.documents)) args.documents = NULL;
        return chat_template_apply(tpl, &args, res);
    }
    return chat_template_render_vars(tpl, json_object_get(c, "vars"), now, res);
}

static void check_case(const char *file, const json_t *fx, const ChatTemplate *tpl,
                       const char *compile_error, const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    struct tm now;
    fixture_clock(fx, &now);
    cases_total++;
    const json_t *want = json_object_get(c, "expected");
    ChatRenderResult res = {0};
    int rc = compile_error ? -1 : render_case(tpl, c, &now, &res);
    const char *msg = compile_error ? compile_error : err_msg();
    if (want) {
        bool ok = rc == 0 && res.len == json_string_length(want) &&
                  memcmp(res.text, json_string_value(want), res.len) == 0;
        CHECK(ok, "%s / %s: %s", file, name, rc != 0 ? msg : "output differs");
        if (rc == 0 && !ok)
            show_diff(name, res.text, res.len, json_string_value(want), json_string_length(want));
        cases_passed += ok;
    } else {
        const char *type = json_string_value(json_object_get(c, "error_type"));
        const char *py_msg = json_string_value(json_object_get(c, "error"));
        const json_t *line = json_object_get(c, "error_line");
        bool ok = rc != 0;
        CHECK(rc != 0, "%s / %s: rendered but jinja2 fails with %s: %s", file, name, type, py_msg);
        if (rc != 0 && type && strcmp(type, "TemplateError") == 0) {
            /* raise_exception: the template's own message must come through. */
            bool has = strstr(msg, py_msg) != NULL;
            CHECK(has, "%s / %s: message \"%s\" lacks the template's \"%s\"", file, name, msg,
                  py_msg);
            ok = ok && has;
        }
        if (rc != 0 && json_is_integer(line)) {
            char want_line[32];
            snprintf(want_line, sizeof want_line, "line %d:", (int)json_integer_value(line));
            bool has = strstr(msg, want_line) != NULL;
            CHECK(has, "%s / %s: message \"%s\" lacks \"%s\" (jinja2: %s)", file, name, msg,
                  want_line, py_msg);
            ok = ok && has;
        }
        cases_passed += ok;
    }
    chat_render_result_free(&res);
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every prefix of the template: compile, and render what compiles. Only no-crash (ASan)
 * and "an error has a message" are checked. */
static void prefixes_do_not_crash(const char *file, const char *src, const json_t *c) {
    size_t n = strlen(src);
    struct tm now = {.tm_year = 124, .tm_mon = 6, .tm_mday = 26};
    for (size_t len = 0; len < n; len += 1 + len / 64) {
        ChatTemplate *tpl;
        if (chat_template_compile(src, len, &tpl) != 0) {
            CHECK(err_msg()[0] != '\0', "%s: prefix %zu failed without a message", file, len);
            continue;
        }
        ChatRenderResult res = {0};
        if (render_case(tpl, c, &now, &res) != 0)
            CHECK(err_msg()[0] != '\0', "%s: prefix %zu render failed without a message", file,
                  len);
        chat_render_result_free(&res);
        chat_template_free(tpl);
    }
}

static void run_fixtures(void) {
    const char *dir = harness_source_path("tests/fixtures/chat_templates");
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    DIR *d = opendir(dirbuf);
    CHECK(d != NULL, "cannot open %s", dirbuf);
    if (!d) return;
    char *names[512];
    size_t nnames = 0;
    for (struct dirent *e; (e = readdir(d)) && nnames < 512;) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0) names[nnames++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, nnames, sizeof *names, compare_names);
    CHECK(nnames >= 40, "only %zu fixture files in %s", nnames, dirbuf);
    for (size_t i = 0; i < nnames; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dirbuf, names[i]);
        json_t *fx;
        if (json_load_path(path, &fx) != 0) {
            CHECK(0, "%s", err_msg());
            free(names[i]);
            continue;
        }
        const char *src = json_string_value(json_object_get(fx, "template"));
        ChatTemplate *tpl = NULL;
        char compile_error[2048] = "";
        if (chat_template_compile(src, strlen(src), &tpl) != 0)
            snprintf(compile_error, sizeof compile_error, "%s", err_msg());
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(fx, "cases"), k, c) {
            check_case(names[i], fx, tpl, compile_error[0] ? compile_error : NULL, c);
        }
        const char *desc = json_string_value(json_object_get(fx, "description"));
        bool family = desc && strncmp(names[i], "err_", 4) != 0 &&
                      strstr(names[i], "ws_") != names[i] &&
                      json_array_size(json_object_get(fx, "cases")) > 2;
        if (family)
            prefixes_do_not_crash(names[i], src, json_array_get(json_object_get(fx, "cases"), 0));
        chat_template_free(tpl);
        json_decref(fx);
        free(names[i]);
    }
}

/* ---------------------------------------------------------------- API checks */

static void test_generation_spans(void) {
    const char *src =
        "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
        "{{ m.content }}!{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}";
    ChatTemplate *tpl;
    CHECK(chat_template_compile(src, strlen(src), &tpl) == 0, "compile: %s", err_msg());
    json_t *vars =
        json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}]}", "messages", "role", "user", "content", "q",
                  "role", "assistant", "content", "é", "role", "assistant", "content", "b");
    ChatRenderResult res;
    CHECK(chat_template_render_vars(tpl, vars, NULL, &res) == 0, "render: %s", err_msg());
    /* "<user>q<assistant>é!<assistant>b!" */
    CHECK(strcmp(res.text, "<user>q<assistant>\xc3\xa9!<assistant>b!") == 0, "got %s", res.text);
    CHECK(res.nspans == 2, "%zu spans", res.nspans);
    if (res.nspans == 2) {
        CHECK(res.spans[0].start == 18 && res.spans[0].end == 21, "span 0 = %zu..%zu",
              res.spans[0].start, res.spans[0].end);
        CHECK(res.spans[1].start == 32 && res.spans[1].end == 34, "span 1 = %zu..%zu",
              res.spans[1].start, res.spans[1].end);
    }
    chat_render_result_free(&res);
    json_decref(vars);
    chat_template_free(tpl);
}

static void test_render_shorthand(void) {
    const char *src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ '+' if "
                      "add_generation_prompt }}";
    ChatTemplate *tpl;
    CHECK(chat_template_compile(src, strlen(src), &tpl) == 0, "compile: %s", err_msg());
    json_t *msgs = json_pack("[{s:s},{s:s}]", "content", "a", "content", "b");
    json_t *extra = json_pack("{s:b,s:s}", "add_generation_prompt", 1, "bos_token", "<s>");
    char *out = NULL;
    CHECK(chat_template_render(tpl, msgs, extra, &out) == 0, "render: %s", err_msg());
    CHECK(out && strcmp(out, "<s>ab+") == 0, "got %s", out ? out : "(null)");
    free(out);
    CHECK(chat_template_render(tpl, msgs, NULL, &out) == 0 && strcmp(out, "ab") == 0,
          "no extras: %s", out ? out : err_msg());
    free(out);
    json_t *bad = json_string("x");
    CHECK(chat_template_render(tpl, msgs, bad, &out) != 0 && out == NULL,
          "non-object extras must fail");
    json_decref(bad);
    json_decref(msgs);
    json_decref(extra);
    chat_template_free(tpl);
}

static void expect_error(const char *src, const json_t *vars, const char *needle) {
    ChatTemplate *tpl;
    int rc = chat_template_compile(src, strlen(src), &tpl);
    if (rc == 0) {
        ChatRenderResult res;
        rc = chat_template_render_vars(tpl, vars, NULL, &res);
        if (rc == 0) chat_render_result_free(&res);
        chat_template_free(tpl);
    }
    CHECK(rc != 0, "template %s: expected an error mentioning \"%s\"", src, needle);
    if (rc != 0)
        CHECK(strstr(err_msg(), needle) != NULL, "template %s: message \"%s\" lacks \"%s\"", src,
              err_msg(), needle);
}

static void test_unsupported_constructs(void) {
    expect_error("a\n{% include 'x.jinja' %}", NULL,
                 "line 2: the '{% include %}' tag is not supported");
    expect_error("{% extends 'base' %}", NULL, "'{% extends %}' tag is not supported");
    expect_error("{% filter upper %}x{% endfilter %}", NULL, "'{% filter %}' tag is not supported");
    expect_error("{{ x | groupby('a') }}", NULL, "filter 'groupby' is not supported");
    expect_error("{{ '%s' | format(1) }}", NULL, "filter 'format' is not supported");
    expect_error("\n\n{{ '{}'.format(1) }}", NULL,
                 "line 3: the method str.format() is not supported");
    expect_error("{{ cycler(1, 2) }}", NULL, "global 'cycler' is not supported");
    expect_error("{% for x in [1] recursive %}{% endfor %}", NULL,
                 "recursive for loops are not supported");
    expect_error("{{ f(*args) }}", NULL, "*args");
    expect_error("{{ '%d' % 3 }}", NULL, "'%' string formatting is not supported");
    expect_error("{% break %}", NULL, "'break' outside of a loop");
    expect_error("{{ {1: 'a'} }}", NULL, "dict keys of type 'int' are not supported");
    expect_error("{{ range(200000) | length }}", NULL, "Range too big");
    expect_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", NULL, "nested deeper than");
    expect_error("{{ x.y }}", NULL, "'x' is undefined");
    expect_error("{{ raise_exception('stop here') }}", NULL, "stop here");
    expect_error("{{ 'a' < 1 }}", NULL, "'<' not supported between instances of 'str' and 'int'");
    expect_error("{{ x }", NULL, "line 1");
    expect_error("{{ 'a' ]", NULL, "unexpected ']'");
    expect_error("{% if %}{% endif %}", NULL, "line 1");
    expect_error("{{ '\\N{BULLET}' }}", NULL, "\\N{...}");
    expect_error("{% set ns.x = 1 %}", NULL, "non-namespace");
    expect_error("{% for a, b in [1] %}{% endfor %}", NULL, "'int' object is not iterable");
    expect_error("{% for a, b in ['abc'] %}{% endfor %}", NULL, "too many values to unpack");
    json_t *vars = json_pack("{s:i}", "x", 1);
    expect_error("{{ x.y.z }}", vars, "'int object' has no attribute 'y'");
    json_decref(vars);
}

static void test_apply_errors(void) {
    const char *src = "{% for m in messages %}{{ m.content }}{% endfor %}";
    ChatTemplate *tpl;
    CHECK(chat_template_compile(src, strlen(src), &tpl) == 0, "compile: %s", err_msg());
    ChatRenderResult res;
    json_t *empty = json_array();
    ChatApplyArgs a = {.messages = empty};
    CHECK(chat_template_apply(tpl, &a, &res) != 0 && strstr(err_msg(), "empty conversation"),
          "empty: %s", err_msg());
    json_t *notobj = json_pack("[s]", "hi");
    a.messages = notobj;
    CHECK(chat_template_apply(tpl, &a, &res) != 0 && strstr(err_msg(), "message 0"),
          "not an object: %s", err_msg());
    json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "x");
    a.messages = msgs;
    a.add_generation_prompt = a.continue_final_message = true;
    CHECK(chat_template_apply(tpl, &a, &res) != 0 && strstr(err_msg(), "not compatible"),
          "agp+continue: %s", err_msg());
    a.add_generation_prompt = a.continue_final_message = false;
    CHECK(chat_template_apply(tpl, &a, &res) == 0 && strcmp(res.text, "x") == 0, "plain apply: %s",
          err_msg());
    chat_render_result_free(&res);
    json_decref(empty);
    json_decref(notobj);
    json_decref(msgs);
    chat_template_free(tpl);
}

int main(void) {
    run_fixtures();
    printf("chat template fixture cases: %d/%d byte-identical or failing as jinja2 does\n",
           cases_passed, cases_total);
    test_generation_spans();
    test_render_shorthand();
    test_unsupported_constructs();
    test_apply_errors();
    return harness_finish("test_chat_template");
}
