/* Exact parity with the `tokenizers` library on one fixture tokenizer (run once per directory
 * under tests/fixtures/tokenizers/, made by tools/reference/make_tokenizer_fixtures.py; the
 * directories of make_auto_tokenizer_fixtures.py record transformers' AutoTokenizer instead):
 * every corpus string must encode to exactly the recorded ids, with and without special
 * tokens, and decode to exactly the recorded text, with and without skip_special_tokens; plus
 * the recorded decodings of arbitrary id lists. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTS 8

typedef struct {
    json_t **rows;
    size_t n;
} Jsonl;

static void jsonl_read(const char *path, Jsonl *out) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    out->rows = NULL;
    out->n = 0;
    size_t cap = 0;
    for (char *line = text; line < text + len;) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        if (end > line) {
            json_error_t jerr;
            json_t *row = json_loadb(line, (size_t)(end - line), JSON_ALLOW_NUL, &jerr);
            if (!row) {
                fprintf(stderr, "%s: line %zu: %s\n", path, out->n + 1, jerr.text);
                exit(1);
            }
            if (out->n == cap) {
                cap = cap ? cap * 2 : 1024;
                out->rows = realloc(out->rows, cap * sizeof *out->rows);
            }
            out->rows[out->n++] = row;
        }
        line = end + 1;
    }
    free(text);
}

static void jsonl_free(Jsonl *l) {
    for (size_t i = 0; i < l->n; i++)
        json_decref(l->rows[i]);
    free(l->rows);
}

/* An array of ints from JSON (caller frees). */
static int32_t *int_array(const json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

/* The bytes a corpus row stands for: "hex" when present (invalid UTF-8), else "text". */
static char *row_bytes(const json_t *row, size_t *len) {
    const json_t *hex = json_object_get(row, "hex");
    if (hex) {
        const char *h = json_string_value(hex);
        *len = strlen(h) / 2;
        char *b = malloc(*len + 1);
        for (size_t i = 0; i < *len; i++) {
            unsigned v;
            sscanf(h + 2 * i, "%2x", &v);
            b[i] = (char)v;
        }
        return b;
    }
    const json_t *t = json_object_get(row, "text");
    *len = json_string_length(t);
    char *b = malloc(*len + 1);
    memcpy(b, json_string_value(t), *len);
    return b;
}

static void print_ids(const char *label, const int32_t *v, size_t n) {
    fprintf(stderr, "    %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", v[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool same_text(const char *a, size_t na, const json_t *want) {
    return json_string_length(want) == na && memcmp(json_string_value(want), a, na) == 0;
}

/* <dir>/overrides.json (make_auto_tokenizer_fixtures.py): the directory loaded with
 * tokenizer_load_options as Axolotl's tokenizer_legacy / tokenizer_type load it must give the ids
 * transformers gave for the first corpus strings. */
static void check_overrides(const char *dir, const char *name, const Jsonl *corpus) {
    char path[4096];
    snprintf(path, sizeof path, "%s/overrides.json", dir);
    if (!file_exists(path)) return;
    json_t *all;
    if (json_load_path(path, &all) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    size_t k;
    json_t *o;
    json_array_foreach(all, k, o) {
        const json_t *opts = json_object_get(o, "options"), *rows = json_object_get(o, "ids");
        const json_t *legacy = json_object_get(opts, "legacy");
        TokenizerLoadOptions lo = {.legacy = legacy ? json_is_true(legacy) : -1,
                                   .tokenizer_class =
                                       json_string_value(json_object_get(opts, "tokenizer_class"))};
        Tokenizer tok;
        if (tokenizer_load_options(&tok, dir, &lo) != 0) {
            CHECK(0, "%s: override %zu: %s", name, k, err_msg());
            continue;
        }
        size_t same = 0, n = json_array_size(rows), reports = 0;
        for (size_t i = 0; i < n && i < corpus->n; i++) {
            size_t len, n_want, n_got = 0;
            char *text = row_bytes(corpus->rows[i], &len);
            int32_t *want = int_array(json_array_get(rows, i), &n_want), *got = NULL;
            bool ok = tokenizer_encode(&tok, text, len, false, &got, &n_got) == 0 &&
                      same_ids(got, n_got, want, n_want);
            same += ok;
            if (!ok && reports++ < 3) {
                fprintf(stderr, "%s: override %zu: string %zu \"%s\" differs\n", name, k, i, text);
                print_ids("want", want, n_want);
                print_ids("got ", got, n_got);
            }
            free(text);
            free(want);
            free(got);
        }
        CHECK(same == n && n > 0, "%s: override %zu: %zu/%zu strings give transformers' ids", name,
              k, same, n);
        printf("%s: override %zu (%s): ids exact on %zu/%zu strings\n", name, k,
               json_string_value(json_object_get(o, "class")), same, n);
        tokenizer_free(&tok);
    }
    json_decref(all);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char path[4096], parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    const char *pdir = dirname(parent);

    Tokenizer tok;
    if (tokenizer_load(&tok, dir) != 0) {
        fprintf(stderr, "load: %s\n", err_msg());
        return 1;
    }
    snprintf(path, sizeof path, "%s/meta.json", dir);
    json_t *meta;
    if (json_load_path(path, &meta) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    const char *name = json_string_value(json_object_get(meta, "name"));
    size_t n_prefix, n_suffix;
    int32_t *prefix = int_array(json_object_get(meta, "special_prefix"), &n_prefix);
    int32_t *suffix = int_array(json_object_get(meta, "special_suffix"), &n_suffix);
    CHECK(tok.vocab_size == json_integer_value(json_object_get(meta, "vocab_size")),
          "vocab size %d", tok.vocab_size);
    CHECK(tok.n_tokens == json_integer_value(json_object_get(meta, "size_with_added")),
          "len(tokenizer) %d", tok.n_tokens);

    Jsonl corpus, expected, decode_cases;
    /* the shared corpus, or the one meta.json names (make_auto_tokenizer_fixtures.py's) */
    const json_t *corpus_name = json_object_get(meta, "corpus");
    snprintf(path, sizeof path, "%s/%s", pdir,
             json_is_string(corpus_name) ? json_string_value(corpus_name) : "corpus.jsonl");
    jsonl_read(path, &corpus);
    snprintf(path, sizeof path, "%s/expected.jsonl", dir);
    jsonl_read(path, &expected);
    snprintf(path, sizeof path, "%s/decode.jsonl", dir);
    jsonl_read(path, &decode_cases);
    CHECK(corpus.n == expected.n, "corpus has %zu rows, expected.jsonl %zu", corpus.n, expected.n);

    size_t ok_ids = 0, ok_special = 0, ok_dec = 0, ok_dec_skip = 0, ok_cases = 0, reports = 0;
    size_t n_tokens = 0;
    for (size_t i = 0; i < corpus.n && i < expected.n; i++) {
        size_t len;
        char *text = row_bytes(corpus.rows[i], &len);
        const json_t *exp = expected.rows[i];
        size_t n_want;
        int32_t *want = int_array(json_object_get(exp, "ids"), &n_want);
        n_tokens += n_want;

        int32_t *ids = NULL, *ids_sp = NULL;
        size_t n = 0, n_sp = 0;
        bool enc_ok = tokenizer_encode(&tok, text, len, false, &ids, &n) == 0;
        bool match = enc_ok && same_ids(ids, n, want, n_want);
        ok_ids += match;
        if (!match && reports++ < MAX_REPORTS) {
            fprintf(stderr, "%s: string %zu (%zu bytes) \"%.*s\": ids differ%s%s\n", name, i, len,
                    (int)(len > 80 ? 80 : len), text, enc_ok ? "" : ": ", enc_ok ? "" : err_msg());
            print_ids("want", want, n_want);
            print_ids("got ", ids, n);
        }

        /* with special tokens: prefix + ids + suffix */
        size_t n_full = n_prefix + n_want + n_suffix;
        int32_t *full = malloc((n_full ? n_full : 1) * sizeof *full);
        memcpy(full, prefix, n_prefix * sizeof *full);
        memcpy(full + n_prefix, want, n_want * sizeof *full);
        memcpy(full + n_prefix + n_want, suffix, n_suffix * sizeof *full);
        bool sp_ok = tokenizer_encode(&tok, text, len, true, &ids_sp, &n_sp) == 0 &&
                     same_ids(ids_sp, n_sp, full, n_full);
        ok_special += sp_ok;
        if (!sp_ok && match && reports++ < MAX_REPORTS)
            fprintf(stderr, "%s: string %zu: ids with special tokens differ\n", name, i);

        /* decode(ids) and decode(ids with specials, skip_special_tokens) */
        const json_t *want_dec = json_object_get(exp, "decoded");
        if (!want_dec) want_dec = json_object_get(corpus.rows[i], "text");
        const json_t *want_skip = json_object_get(exp, "decoded_skip");
        if (!want_skip) want_skip = want_dec;
        char *dec = NULL, *dec_skip = NULL;
        size_t dlen = 0, dslen = 0;
        bool d1 = tokenizer_decode(&tok, want, n_want, false, &dec, &dlen) == 0 &&
                  same_text(dec, dlen, want_dec);
        bool d2 = tokenizer_decode(&tok, full, n_full, true, &dec_skip, &dslen) == 0 &&
                  same_text(dec_skip, dslen, want_skip);
        ok_dec += d1;
        ok_dec_skip += d2;
        if ((!d1 || !d2) && reports++ < MAX_REPORTS)
            fprintf(stderr, "%s: string %zu: decode differs: got \"%.*s\" want \"%s\"\n", name, i,
                    (int)(d1 ? dslen : dlen), d1 ? dec_skip : dec,
                    json_string_value(d1 ? want_skip : want_dec));
        free(dec);
        free(dec_skip);
        free(full);
        free(ids);
        free(ids_sp);
        free(want);
        free(text);
    }
    for (size_t i = 0; i < decode_cases.n; i++) {
        const json_t *c = decode_cases.rows[i];
        size_t n;
        int32_t *ids = int_array(json_object_get(c, "ids"), &n);
        char *dec = NULL;
        size_t dlen = 0;
        bool ok = tokenizer_decode(&tok, ids, n, json_is_true(json_object_get(c, "skip")), &dec,
                                   &dlen) == 0 &&
                  same_text(dec, dlen, json_object_get(c, "text"));
        ok_cases += ok;
        if (!ok && reports++ < MAX_REPORTS) {
            fprintf(stderr, "%s: decode case %zu: got \"%s\" want \"%s\"\n", name, i,
                    dec ? dec : "(error)", json_string_value(json_object_get(c, "text")));
            print_ids("ids", ids, n);
        }
        free(dec);
        free(ids);
    }
    size_t total = corpus.n;
    CHECK(ok_ids == total, "%zu/%zu strings encode to the same ids", ok_ids, total);
    CHECK(ok_special == total, "%zu/%zu with special tokens", ok_special, total);
    CHECK(ok_dec == total, "%zu/%zu decode", ok_dec, total);
    CHECK(ok_dec_skip == total, "%zu/%zu decode with skip_special_tokens", ok_dec_skip, total);
    CHECK(ok_cases == decode_cases.n, "%zu/%zu decode cases", ok_cases, decode_cases.n);
    printf("%s: ids exact on %zu/%zu strings (%zu tokens), with special tokens %zu/%zu, "
           "decode %zu/%zu, decode skip-special %zu/%zu, decode cases %zu/%zu\n",
           name, ok_ids, total, n_tokens, ok_special, total, ok_dec, total, ok_dec_skip, total,
           ok_cases, decode_cases.n);

    check_overrides(dir, name, &corpus);

    jsonl_free(&corpus);
    jsonl_free(&expected);
    jsonl_free(&decode_cases);
    json_decref(meta);
    free(prefix);
    free(suffix);
    tokenizer_free(&tok);
    return harness_finish("test_tokenizer_parity");
}
