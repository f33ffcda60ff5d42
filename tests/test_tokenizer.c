/* Tokenizer unit tests: broken or unsupported tokenizer.json files (one clear message each,
 * no crash), the split behaviours and added-token id rules on small hand-made tokenizers
 * (expected values from the `tokenizers` library), the public API's edges, concurrent
 * encoding, and the `rlhf tokenize` command. The exact-parity tests on real pipelines are in
 * test_tokenizer_parity.c. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURE "tests/fixtures/tokenizers/"

/* A tokenizer.json over the vocabulary a..z, "-" and `extra` (a JSON object body, may be
 * empty), with the given components (JSON text, or "null"). */
static char *make_json(const char *extra_vocab, const char *model_extra, const char *added,
                       const char *normalizer, const char *pre, const char *post,
                       const char *decoder) {
    static char buf[16384];
    char vocab[4096];
    size_t n = 0;
    n += (size_t)snprintf(vocab + n, sizeof vocab - n, "{");
    for (int c = 0; c < 26; c++)
        n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"%c\": %d, ", 'a' + c, c);
    n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"-\": 26%s%s}", *extra_vocab ? ", " : "",
                          extra_vocab);
    snprintf(buf, sizeof buf,
             "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
             " \"added_tokens\": %s, \"normalizer\": %s, \"pre_tokenizer\": %s,\n"
             " \"post_processor\": %s, \"decoder\": %s,\n"
             " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,"
             " \"fuse_unk\": false, \"byte_fallback\": false %s, \"vocab\": %s, \"merges\": []}}",
             added, normalizer, pre, post, decoder, model_extra, vocab);
    return buf;
}

static int load_text(Tokenizer *tok, const char *json) {
    return tokenizer_load_json(tok, json, strlen(json), "test.json");
}

/* The token strings of encode(text), joined by '|'. */
static const char *pieces(const Tokenizer *tok, const char *text) {
    static char out[1024];
    int32_t *ids;
    size_t n;
    out[0] = '\0';
    if (tokenizer_encode(tok, text, strlen(text), false, &ids, &n) != 0) return "(error)";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tokenizer_id_to_token(tok, ids[i], &len);
        used += (size_t)snprintf(out + used, sizeof out - used, "%s%.*s", i ? "|" : "", (int)len,
                                 s ? s : "?");
    }
    free(ids);
    return out;
}

static void test_split_behaviors(void) {
    static const struct {
        const char *behavior;
        bool invert;
        const char *want;
    } cases[] = {
        {"Removed", false, "the|final|countdown"},
        {"Removed", true, "-|-|-"},
        {"Isolated", false, "the|-|final|-|-|countdown"},
        {"Isolated", true, "the|-|final|-|-|countdown"},
        {"MergedWithPrevious", false, "the-|final-|-|countdown"},
        {"MergedWithPrevious", true, "the|-final|-|-countdown"},
        {"MergedWithNext", false, "the|-final|-|-countdown"},
        {"MergedWithNext", true, "the-|final-|-|countdown"},
        {"Contiguous", false, "the|-|final|--|countdown"},
        {"Contiguous", true, "the|-|final|--|countdown"},
    };
    /* With ignore_merges, a piece that is a vocabulary entry becomes one token: the tokens
     * show the pieces. */
    const char *words = "\"the\": 27, \"final\": 28, \"countdown\": 29, \"the-\": 30, "
                        "\"final-\": 31, \"-final\": 32, \"-countdown\": 33, \"--\": 34";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", "
                 "\"invert\": %s}",
                 cases[i].behavior, cases[i].invert ? "true" : "false");
        Tokenizer tok;
        int rc = load_text(
            &tok, make_json(words, ", \"ignore_merges\": true", "[]", "null", pre, "null", "null"));
        CHECK(rc == 0, "load: %s", err_msg());
        if (rc != 0) continue;
        const char *got = pieces(&tok, "the-final--countdown");
        CHECK(strcmp(got, cases[i].want) == 0, "%s invert=%d: got %s want %s", cases[i].behavior,
              cases[i].invert, got, cases[i].want);
        tokenizer_free(&tok);
    }
}

static void test_added_token_ids(void) {
    /* tokenizers ignores the ids written in added_tokens: a content in the vocab takes its
     * vocab id, any other the next id from the vocab size on (checked with tokenizers 0.23). */
    const char *added =
        "[{\"id\": 100, \"content\": \"<x>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 5, \"content\": \"a\", \"special\": true, \"normalized\": false},"
        " {\"id\": 3, \"content\": \"<y>\", \"special\": false, \"normalized\": false}]";
    Tokenizer tok;
    CHECK(load_text(&tok, make_json("", "", added, "null", "null", "null", "null")) == 0,
          "load: %s", err_msg());
    CHECK(tokenizer_token_to_id(&tok, "<x>", 3) == 27, "<x> -> %d",
          tokenizer_token_to_id(&tok, "<x>", 3));
    CHECK(tokenizer_token_to_id(&tok, "a", 1) == 0, "a -> %d", tokenizer_token_to_id(&tok, "a", 1));
    CHECK(tokenizer_token_to_id(&tok, "<y>", 3) == 28, "<y> -> %d",
          tokenizer_token_to_id(&tok, "<y>", 3));
    CHECK(tok.vocab_size == 27 && tok.n_tokens == 29, "sizes %d %d", tok.vocab_size, tok.n_tokens);
    CHECK(tokenizer_is_special(&tok, 27) && tokenizer_is_special(&tok, 0) &&
              !tokenizer_is_special(&tok, 28) && !tokenizer_is_special(&tok, 1),
          "special flags");
    CHECK(strcmp(pieces(&tok, "b<x>a<y>c"), "b|<x>|a|<y>|c") == 0, "%s", pieces(&tok, "b<x>a<y>c"));

    /* decode: unknown ids are skipped; no decoder joins tokens with spaces */
    int32_t ids[] = {1, 27, -5, 999, 28, 2};
    char *text;
    size_t len;
    CHECK(tokenizer_decode(&tok, ids, 6, false, &text, &len) == 0, "decode");
    CHECK(strcmp(text, "b <x> <y> c") == 0 && len == 11, "decode: \"%s\"", text);
    free(text);
    CHECK(tokenizer_decode(&tok, ids, 6, true, &text, &len) == 0, "decode skip");
    CHECK(strcmp(text, "b <y> c") == 0, "decode skip: \"%s\"", text);
    free(text);
    CHECK(tokenizer_decode(&tok, NULL, 0, false, &text, &len) == 0 && len == 0 && text[0] == 0,
          "decode nothing");
    free(text);

    /* empty input, and NUL bytes inside the input */
    int32_t *out;
    size_t n;
    CHECK(tokenizer_encode(&tok, "", 0, true, &out, &n) == 0 && n == 0 && out, "empty encode");
    free(out);
    CHECK(tokenizer_encode(&tok, "a\0b", 3, true, &out, &n) == 0 && n == 2, "NUL: %zu ids", n);
    free(out);
    tokenizer_free(&tok);
    tokenizer_free(&tok); /* harmless twice */
}

/* Loading must fail with a message holding every string in `want` (NULL-terminated). */
static void expect_load_error(const char *label, const char *json, size_t len, const char *want1,
                              const char *want2) {
    Tokenizer tok;
    err_clear();
    int rc = tokenizer_load_json(&tok, json, len, "tokenizer.json");
    CHECK(rc == -1, "%s: load succeeded", label);
    CHECK(tok.impl == NULL, "%s: tokenizer not left empty", label);
    CHECK(strstr(err_msg(), want1) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err_msg(),
          want1);
    CHECK(!want2 || strstr(err_msg(), want2) != NULL, "%s: message \"%s\" lacks \"%s\"", label,
          err_msg(), want2);
    tokenizer_free(&tok);
}

static void expect_json_error(const char *label, const char *json, const char *want1,
                              const char *want2) {
    expect_load_error(label, json, strlen(json), want1, want2);
}

static void test_bad_inputs(void) {
    char *good;
    size_t len;
    if (read_file(harness_source_path(FIXTURE "qwen2_bytelevel/tokenizer.json"), &good, &len) !=
        0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    expect_load_error("truncated", good, len / 2, "tokenizer.json", "invalid JSON");
    expect_load_error("truncated to nothing", good, 0, "tokenizer.json", "invalid JSON");
    free(good);
    expect_json_error("not JSON", "hello, tokenizer", "tokenizer.json:1:", "invalid JSON");
    expect_json_error("not an object", "[1, 2, 3]", "tokenizer.json", "object");

    expect_json_error("unknown pre-tokenizer",
                      make_json("", "", "[]", "null", "{\"type\": \"Whitespace\"}", "null", "null"),
                      "pre_tokenizer: unsupported pre-tokenizer type \"Whitespace\"", "supported:");
    expect_json_error(
        "unknown pre-tokenizer in a sequence",
        make_json("", "", "[]", "null",
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"},"
                  " {\"type\": \"UnicodeScripts\"}]}",
                  "null", "null"),
        "pre_tokenizer.pretokenizers[1]", "\"UnicodeScripts\"");
    expect_json_error("unknown normalizer",
                      make_json("", "", "[]",
                                "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}",
                                "null", "null", "null"),
                      "normalizer: unsupported normalizer type \"Precompiled\"", NULL);
    expect_json_error("unknown decoder",
                      make_json("", "", "[]", "null", "null", "null", "{\"type\": \"WordPiece\"}"),
                      "decoder: unsupported decoder type \"WordPiece\"", NULL);
    expect_json_error(
        "unknown post-processor",
        make_json("", "", "[]", "null", "null",
                  "{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2]}", "null"),
        "post_processor: unsupported post-processor type \"RobertaProcessing\"", NULL);
    expect_json_error("unknown model",
                      "{\"version\": \"1.0\", \"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
                      "model: unsupported model type \"WordPiece\"", "supported: BPE");
    expect_json_error("Unigram model",
                      "{\"version\": \"1.0\", \"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
                      "\"Unigram\"", NULL);
    expect_json_error("missing model", "{\"version\": \"1.0\"}", "missing key 'model'", NULL);
    expect_json_error("bad version", "{\"version\": \"2.0\", \"model\": {}}", "version", NULL);
    expect_json_error("component without type",
                      make_json("", "", "[]", "{\"kind\": \"NFC\"}", "null", "null", "null"),
                      "normalizer: key 'type'", NULL);
    expect_json_error(
        "dropout",
        "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {}, \"merges\": []}}",
        "dropout", NULL);
    expect_json_error("merge of unknown tokens",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                      "\"merges\": [\"a b\"]}}",
                      "merges[0]: merged token \"ab\" is not in the vocab", NULL);
    expect_json_error(
        "merge not two tokens",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "merges[0]",
        "two tokens");
    expect_json_error("mixed merges formats",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, "
                      "\"merges\": [[\"a\", \"a\"], \"a a\"]}}",
                      "merges[1]", "pair");
    expect_json_error("negative id",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
                      "vocab entry \"a\"", NULL);
    expect_json_error("missing vocab", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}",
                      "missing key 'vocab'", NULL);
    expect_json_error("bad regex",
                      make_json("", "", "[]", "null",
                                "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, "
                                "\"behavior\": \"Isolated\", \"invert\": false}",
                                "null", "null"),
                      "pre_tokenizer: key 'pattern': regex \"(unclosed\"", NULL);
    expect_json_error("bad behavior",
                      make_json("", "", "[]", "null",
                                "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
                                "\"behavior\": \"Sideways\", \"invert\": false}",
                                "null", "null"),
                      "unknown split behavior \"Sideways\"", NULL);
    expect_json_error("bad replacement",
                      make_json("", "", "[]", "null",
                                "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}", "null",
                                "null"),
                      "key 'replacement': expected exactly one character", NULL);
    expect_json_error("template with unknown special",
                      make_json("", "", "[]", "null", "null",
                                "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\":"
                                " {\"id\": \"<s>\", \"type_id\": 0}}], \"special_tokens\": {}}",
                                "null"),
                      "special token \"<s>\" missing", NULL);
    expect_json_error("added token not an object",
                      make_json("", "", "[\"<s>\"]", "null", "null", "null", "null"),
                      "added_tokens[0]: expected an object", NULL);

    /* files and directories */
    Tokenizer tok;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/empty-dir", harness_tmpdir());
    mkdir(dir, 0755);
    CHECK(tokenizer_load(&tok, dir) == -1 && strstr(err_msg(), "no tokenizer.json"),
          "empty dir: %s", err_msg());
    CHECK(tokenizer_load(&tok, "/nonexistent/tokenizer.json") == -1 &&
              strstr(err_msg(), "/nonexistent/tokenizer.json"),
          "missing file: %s", err_msg());
    int32_t *ids;
    size_t n;
    CHECK(tokenizer_encode(&tok, "x", 1, true, &ids, &n) == -1, "encode on an unloaded tokenizer");

    /* an unk_token missing from the vocab fails when it is needed, as in tokenizers */
    CHECK(load_text(&tok, "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", "
                          "\"vocab\": {\"a\": 0}, \"merges\": []}}") == 0,
          "load: %s", err_msg());
    CHECK(tokenizer_encode(&tok, "a", 1, true, &ids, &n) == 0 && n == 1, "known chars encode");
    free(ids);
    CHECK(tokenizer_encode(&tok, "ab", 2, true, &ids, &n) == -1 && strstr(err_msg(), "<unk>"),
          "unk missing: %s", err_msg());
    tokenizer_free(&tok);
}

/* A directory's tokenizer_config.json / config.json with a wrong value: the error names the file
 * and the key, and the tokenizer is left empty. */
static void test_auto_tokenizer_bad_configs(void) {
    static const struct {
        const char *config, *model_config, *want1, *want2;
    } cases[] = {
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": \"yes\"}", NULL,
         "tokenizer_config.json", "key 'legacy': expected true or false"},
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"add_prefix_space\": 1}", NULL,
         "tokenizer_config.json", "key 'add_prefix_space'"},
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"added_tokens_decoder\": {\"x\": "
         "{\"content\": \"a\"}}}",
         NULL, "tokenizer_config.json", "added_tokens_decoder[\"x\"]"},
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"added_tokens_decoder\": [1]}", NULL,
         "tokenizer_config.json", "key 'added_tokens_decoder': expected an object"},
        {"{\"tokenizer_class\": 3}", NULL, "tokenizer_config.json", "key 'tokenizer_class'"},
        {"{\"split_special_tokens\": \"no\"}", NULL, "tokenizer_config.json",
         "key 'split_special_tokens'"},
        {"{\"pad_token\": 5}", NULL, "tokenizer_config.json", "key 'pad_token': expected a token"},
        {"{\"additional_special_tokens\": \"<x>\"}", NULL, "tokenizer_config.json",
         "key 'additional_special_tokens': expected a list"},
        {"{\"extra_special_tokens\": {\"image_token\": [1]}}", NULL, "tokenizer_config.json",
         "key 'extra_special_tokens'"},
        {"{\"legacy\": tru", NULL, "tokenizer_config.json:1:", "invalid"},
        {"[1]", NULL, "tokenizer_config.json", "expected a JSON object"},
        {"{\"tokenizer_class\": \"LlamaTokenizer\"}", "{\"model_type\": 7}", "config.json",
         "key 'model_type'"},
    };
    char *text;
    size_t len;
    if (read_file(harness_source_path(FIXTURE "phi3_auto/tokenizer.json"), &text, &len) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dcopy[4096], path[4200];
        snprintf(dcopy, sizeof dcopy, "%s/auto-config-%zu", harness_tmpdir(), i);
        mkdir(dcopy, 0755);
        snprintf(path, sizeof path, "%s/tokenizer.json", dcopy);
        harness_write_file(path, text, len);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dcopy);
        harness_write_file(path, cases[i].config, strlen(cases[i].config));
        if (cases[i].model_config) {
            snprintf(path, sizeof path, "%s/config.json", dcopy);
            harness_write_file(path, cases[i].model_config, strlen(cases[i].model_config));
        }
        Tokenizer tok;
        int rc = tokenizer_load(&tok, dcopy);
        CHECK(rc == -1 && tok.impl == NULL, "case %zu (%s): loaded", i, cases[i].config);
        CHECK(strstr(err_msg(), cases[i].want1) && strstr(err_msg(), cases[i].want2),
              "case %zu: message \"%s\" lacks \"%s\" / \"%s\"", i, err_msg(), cases[i].want1,
              cases[i].want2);
        tokenizer_free(&tok);
    }
    free(text);
}

/* Encoding the corpus from several threads at once gives the single-thread ids. */
static void test_threads(void) {
    Tokenizer tok;
    if (tokenizer_load(&tok, harness_source_path(FIXTURE "llama2_sp_legacy")) != 0) {
        CHECK(0, "load: %s", err_msg());
        return;
    }
    static const char *texts[] = {"Hello world, this is a test.",
                                  "机器学习 and 深度学习",
                                  "<s>[INST] hi [/INST]</s>",
                                  "naïve café 12345",
                                  "👨‍👩‍👧‍👦 emoji",
                                  "   spaces   ",
                                  "tab\tnew\nline"};
    enum { N = sizeof texts / sizeof *texts, ROUNDS = 200 };
    int32_t *want[N];
    size_t want_n[N];
    for (int i = 0; i < N; i++)
        tokenizer_encode(&tok, texts[i], strlen(texts[i]), true, &want[i], &want_n[i]);
    int bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : bad) schedule(dynamic)
    for (int r = 0; r < ROUNDS * N; r++) {
        int i = r % N;
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(&tok, texts[i], strlen(texts[i]), true, &ids, &n) != 0 ||
            n != want_n[i] || memcmp(ids, want[i], n * sizeof *ids) != 0)
            bad++;
        free(ids);
    }
    CHECK(bad == 0, "%d concurrent encodings differ", bad);
    for (int i = 0; i < N; i++)
        free(want[i]);
    tokenizer_free(&tok);
}

static void test_encode_special_tokens(void) {
    Tokenizer tok;
    if (tokenizer_load(&tok, harness_source_path(FIXTURE "qwen2_bytelevel")) != 0) {
        CHECK(0, "load: %s", err_msg());
        return;
    }
    /* expected ids from tokenizers 0.23 with encode_special_tokens on / off */
    const char *text = "<|im_start|>user\nHi<think>x</think><|im_end|>";
    static const int32_t split[] = {27,   91, 72,   76, 2500, 91, 29, 467, 267, 198, 39, 72,
                                    3005, 87, 3006, 27, 91,   72, 76, 62,  694, 91,  29};
    static const int32_t whole[] = {3001, 467, 267, 198, 39, 72, 3005, 87, 3006, 3002};
    int32_t *ids;
    size_t n;
    tokenizer_set_encode_special_tokens(&tok, true);
    CHECK(tokenizer_encode(&tok, text, strlen(text), true, &ids, &n) == 0 &&
              n == sizeof split / sizeof *split && memcmp(ids, split, sizeof split) == 0,
          "encode_special_tokens on: %zu ids", n);
    free(ids);
    tokenizer_set_encode_special_tokens(&tok, false);
    CHECK(tokenizer_encode(&tok, text, strlen(text), true, &ids, &n) == 0 &&
              n == sizeof whole / sizeof *whole && memcmp(ids, whole, sizeof whole) == 0,
          "encode_special_tokens off: %zu ids", n);
    free(ids);
    tokenizer_free(&tok);
}

/* Whether the regex matches exactly the one character cp. */
static bool matches_char(const TokRegex *re, uint32_t cp, SpanList *m) {
    char b[4];
    size_t n = utf8_encode(cp, b);
    return tokregex_find_all(re, b, n, m) == 0 && m->n == 1 && m->v[0].start == 0 &&
           m->v[0].end == n;
}

static bool askable(int64_t cp) {
    return cp >= 0 && cp <= 0x10FFFF && cp != 1 && !(cp >= 0xD800 && cp <= 0xDFFF);
}

/* The regex classes against Oniguruma's membership (unicode_classes.json, from
 * tools/reference/make_unicode_tables.py): for every range of members, its ends and middle
 * match and the code points just outside do not. Likewise Rust's char::is_numeric. */
static void test_unicode_classes(void) {
    json_t *root;
    if (json_load_path(harness_source_path(FIXTURE "unicode_classes.json"), &root) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    const char *pattern;
    json_t *rs;
    SpanList m = {0};
    size_t checked = 0;
    json_object_foreach(json_object_get(root, "patterns"), pattern, rs) {
        TokRegex *re;
        if (tokregex_compile(&re, pattern, strlen(pattern), false) != 0) {
            CHECK(0, "compile %s: %s", pattern, err_msg());
            continue;
        }
        size_t bad = 0, i;
        json_t *r;
        json_array_foreach(rs, i, r) {
            int64_t lo = json_integer_value(json_array_get(r, 0));
            int64_t hi = json_integer_value(json_array_get(r, 1));
            int64_t in[] = {lo, hi, (lo + hi) / 2}, out[] = {lo - 1, hi + 1};
            for (int k = 0; k < 3; k++)
                if (askable(in[k]) && !matches_char(re, (uint32_t)in[k], &m) && bad++ < 5)
                    fprintf(stderr, "%s should match U+%04llX\n", pattern, (long long)in[k]);
            for (int k = 0; k < 2; k++)
                if (askable(out[k]) && matches_char(re, (uint32_t)out[k], &m) && bad++ < 5)
                    fprintf(stderr, "%s should not match U+%04llX\n", pattern, (long long)out[k]);
            checked++;
        }
        CHECK(bad == 0, "%s: %zu code points differ from Oniguruma", pattern, bad);
        tokregex_free(re);
    }
    size_t bad = 0, i;
    json_t *r;
    json_array_foreach(json_object_get(root, "numeric"), i, r) {
        int64_t lo = json_integer_value(json_array_get(r, 0));
        int64_t hi = json_integer_value(json_array_get(r, 1));
        bad += !unicode_is_numeric((uint32_t)lo) + !unicode_is_numeric((uint32_t)hi);
        bad += askable(lo - 1) && unicode_is_numeric((uint32_t)(lo - 1));
        bad += askable(hi + 1) && unicode_is_numeric((uint32_t)(hi + 1));
    }
    CHECK(bad == 0, "is_numeric differs from Rust's on %zu range ends", bad);
    CHECK(checked > 1000, "only %zu ranges checked", checked);
    spanlist_free(&m);
    json_decref(root);
}

/* Runs `rlhf tokenize` with stdout sent to a file; returns its exit status and output. */
static int run_cli(int argc, char **argv, char **out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cli-out.txt", harness_tmpdir());
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    int rc = cli_tokenize(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    size_t len;
    if (read_file(path, out, &len) != 0) *out = NULL;
    return rc;
}

static void test_cli(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", harness_source_path(FIXTURE "llama2_sp_legacy"));
    char *out;
    char *a1[] = {"--tokenizer", dir, "--text", "Hello world"};
    CHECK(run_cli(4, a1, &out) == CLI_EXIT_OK, "tokenize --text: %s", err_msg());
    CHECK(out && out[0] == '[' && strncmp(out, "[1, ", 4) == 0, "output \"%s\"", out ? out : "");
    /* feed the ids back through --decode */
    char ids[256];
    snprintf(ids, sizeof ids, "%s", out ? out : "[]");
    ids[strcspn(ids, "\n")] = '\0';
    free(out);
    char *a2[] = {"--tokenizer", dir, "--text", ids, "--decode", "--skip-special"};
    CHECK(run_cli(6, a2, &out) == CLI_EXIT_OK, "tokenize --decode: %s", err_msg());
    CHECK(out && strcmp(out, "\"Hello world\"\n") == 0, "decoded \"%s\"", out ? out : "");
    free(out);

    char jsonl[4096];
    snprintf(jsonl, sizeof jsonl, "%s/in.jsonl", harness_tmpdir());
    const char *lines = "{\"text\": \"Hi\"}\n\n{\"text\": \"\"}\n";
    harness_write_file(jsonl, lines, strlen(lines));
    char *a3[] = {"--tokenizer", dir, "--file", jsonl, "--no-special"};
    CHECK(run_cli(5, a3, &out) == CLI_EXIT_OK, "tokenize --file: %s", err_msg());
    CHECK(out && strncmp(out, "{\"ids\": [", 9) == 0 && strstr(out, "\n{\"ids\": []}\n"),
          "file output \"%s\"", out ? out : "");
    free(out);

    const char *badl = "{\"text\": \"ok\"}\n{\"txt\": 1}\n";
    harness_write_file(jsonl, badl, strlen(badl));
    err_clear();
    CHECK(run_cli(5, a3, &out) == CLI_EXIT_FAILURE, "bad line accepted");
    free(out);

    char *a4[] = {"--tokenizer", dir};
    CHECK(run_cli(2, a4, &out) == CLI_EXIT_USAGE, "missing --text accepted");
    free(out);
    char *a5[] = {"--tokenizer", "/nonexistent", "--text", "x"};
    CHECK(run_cli(4, a5, &out) == CLI_EXIT_FAILURE, "missing tokenizer accepted");
    free(out);
}

int main(void) {
    test_split_behaviors();
    test_added_token_ids();
    test_bad_inputs();
    test_auto_tokenizer_bad_configs();
    test_threads();
    test_encode_special_tokens();
    test_unicode_classes();
    test_cli();
    return harness_finish("test_tokenizer");
}
