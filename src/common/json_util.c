#include "common/json_util.h"

#include "common/error.h"
#include "common/fileio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Big numbers (see json_util.h). Invariants:
 *  1. A tag is a JSON string whose bytes are BIGNUM_TAG then the number's text exactly as
 *     written in the document. BIGNUM_TAG starts with 0xFF, a byte that is never valid UTF-8,
 *     and jansson's parser only makes valid UTF-8 strings, so no string read from a document
 *     is ever taken for a tag.
 *  2. While loading, each number jansson refuses is swapped in a copy of the text for a
 *     placeholder string "<nonce><index>" and the copy is parsed again; the nonce is built
 *     from characters the document does not contain in that order (checked), so every
 *     placeholder string found afterwards is one we wrote, and becomes a tag (1). */
static const char BIGNUM_TAG[] = "\xff"
                                 "bignum:";
#define BIGNUM_TAG_LEN (sizeof BIGNUM_TAG - 1)
#define MAX_BIGNUMS    4096

typedef struct {
    char nonce[40];
    size_t nonce_len;
    char **texts; /* the numbers, by placeholder index */
    int *line;    /* the line of each, and how much longer the placeholder is (for messages) */
    int *grown;
    size_t n;
} Bignums;

static bool is_number_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* Replaces placeholder strings under v by tags, counting them in *found; returns v or its
 * replacement. */
static json_t *restore_bignums(json_t *v, const Bignums *b, size_t *found) {
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            json_t *r = restore_bignums(x, b, found);
            if (r != x) json_object_set_new_nocheck(v, k, r);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            json_t *r = restore_bignums(x, b, found);
            if (r != x) json_array_set_new(v, i, r);
        }
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n > b->nonce_len && memcmp(s, b->nonce, b->nonce_len) == 0) {
            size_t idx = (size_t)strtoull(s + b->nonce_len, NULL, 10);
            (*found)++;
            if (idx < b->n) {
                return json_bignum(b->texts[idx]);
            }
        }
    }
    return v;
}

/* A nonce absent from the raw text (invariant 2): "rlhfbignum<k>_" for the first free k. A
 * document spelling it with \u escapes is caught after the parse (count check). */
static void pick_nonce(const char *text, size_t len, Bignums *b) {
    for (unsigned k = 0;; k++) {
        b->nonce_len = (size_t)snprintf(b->nonce, sizeof b->nonce, "rlhfbignum%u_", k);
        if (!memmem(text, len, b->nonce, b->nonce_len)) break;
    }
}

int json_load_text(const char *text, size_t len, const char *source, json_t **out) {
    json_error_t jerr;
    size_t flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL;
    *out = json_loadb(text, len, flags, &jerr);
    if (*out) return 0;
    /* Numbers beyond int64 or double: Python keeps the integer exactly and reads 1e400 as inf;
     * jansson refuses both. The number's end is jerr.position (exclusive). */
    Bignums b = {0};
    char *copy = NULL;
    size_t copy_len = len;
    const char *cur = text;
    while (!*out && (strstr(jerr.text, "too big") || strstr(jerr.text, "real number overflow")) &&
           b.n < MAX_BIGNUMS) {
        size_t end = (size_t)jerr.position, start = end;
        while (start > 0 && is_number_char(cur[start - 1]))
            start--;
        if (start == end || end > copy_len) break;
        if (b.n == 0) pick_nonce(text, len, &b);
        b.texts = xrealloc(b.texts, (b.n + 1) * sizeof *b.texts);
        b.line = xrealloc(b.line, (b.n + 1) * sizeof *b.line);
        b.grown = xrealloc(b.grown, (b.n + 1) * sizeof *b.grown);
        char *num = xmalloc(end - start + 1);
        memcpy(num, cur + start, end - start);
        num[end - start] = '\0';
        b.texts[b.n] = num;
        char ph[64];
        int phl = snprintf(ph, sizeof ph, "\"%s%zu\"", b.nonce, b.n);
        b.line[b.n] = jerr.line;
        b.grown[b.n] = phl - (int)(end - start);
        b.n++;
        size_t nl = copy_len - (end - start) + (size_t)phl;
        char *next = xmalloc(nl + 1);
        memcpy(next, cur, start);
        memcpy(next + start, ph, (size_t)phl);
        memcpy(next + start + phl, cur + end, copy_len - end);
        next[nl] = '\0';
        free(copy);
        cur = copy = next;
        copy_len = nl;
        *out = json_loadb(cur, copy_len, flags, &jerr);
    }
    bool spoofed = false;
    if (*out) {
        size_t found = 0;
        *out = restore_bignums(*out, &b, &found);
        if (found != b.n) {
            json_decref(*out);
            *out = NULL;
            spoofed = true;
        }
    }
    /* An error after a placeholder: its column in the text as written (jansson parses left to
     * right, so every placeholder lies before the error). */
    if (!*out)
        for (size_t i = 0; i < b.n; i++)
            if (b.line[i] == jerr.line) jerr.column -= b.grown[i];
    for (size_t i = 0; i < b.n; i++)
        free(b.texts[i]);
    free(b.texts);
    free(b.line);
    free(b.grown);
    free(copy);
    if (*out) return 0;
    if (spoofed) {
        const char *what = "a string spells the placeholder used to read numbers beyond 64 bits";
        if (!source) return err_set("invalid JSON: %s", what);
        return err_set("%s: invalid JSON: %s", source, what);
    }
    if (!source) return err_set("invalid JSON (column %d): %s", jerr.column, jerr.text);
    return err_set("%s:%d:%d: invalid JSON: %s", source, jerr.line, jerr.column, jerr.text);
}

const char *json_bignum_text(const json_t *v) {
    if (!json_is_string(v)) return NULL;
    const char *s = json_string_value(v);
    if (json_string_length(v) <= BIGNUM_TAG_LEN || memcmp(s, BIGNUM_TAG, BIGNUM_TAG_LEN) != 0)
        return NULL;
    return s + BIGNUM_TAG_LEN;
}

json_t *json_bignum(const char *text) {
    size_t tl = strlen(text);
    char *buf = xmalloc(BIGNUM_TAG_LEN + tl);
    memcpy(buf, BIGNUM_TAG, BIGNUM_TAG_LEN);
    memcpy(buf + BIGNUM_TAG_LEN, text, tl);
    json_t *tag = json_stringn_nocheck(buf, BIGNUM_TAG_LEN + tl);
    free(buf);
    return tag;
}

bool json_bignum_is_integer(const char *text) {
    return !strpbrk(text, ".eE");
}

int json_load_path(const char *path, json_t **out) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    int rc = json_load_text(text, len, path, out);
    free(text);
    return rc;
}

int json_as_int64(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.2e18) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return -1;
}

static const json_t *member(const json_t *obj, const char *key) {
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return (v && !json_is_null(v)) ? v : NULL;
}

int json_get_int64(const json_t *obj, const char *key, int64_t *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (json_as_int64(v, out) != 0) return err_set("key '%s': expected an integer", key);
    return 1;
}

int json_get_double(const json_t *obj, const char *key, double *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    const char *big = json_bignum_text(v);
    if (big) {
        *out = strtod(big, NULL); /* +-HUGE_VAL past the double range, as Python's float() */
        return 1;
    }
    if (!json_is_number(v)) return err_set("key '%s': expected a number", key);
    *out = json_number_value(v);
    return 1;
}

int json_get_bool(const json_t *obj, const char *key, bool *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return err_set("key '%s': expected true or false", key);
    *out = json_is_true(v);
    return 1;
}

int json_get_string(const json_t *obj, const char *key, const char **out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (!json_is_string(v)) return err_set("key '%s': expected a string", key);
    *out = json_string_value(v);
    return 1;
}
