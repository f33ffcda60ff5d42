/* Normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Strip, StripAccents, Prepend, Replace,
 * ByteLevel, and Sequence of those. Each rewrites one text segment (the text between two added
 * tokens), as `tokenizers` does. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char *const supported =
    "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace, ByteLevel";

int normalizer_parse(Normalizer *n, const json_t *j, const char *where) {
    memset(n, 0, sizeof *n);
    const char *type = tokjson_type(j, where);
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) {
        n->kind = NORM_SEQUENCE;
        const json_t *arr = json_object_get(j, "normalizers");
        if (!json_is_array(arr)) return err_set("%s: key 'normalizers': expected an array", where);
        n->n_children = json_array_size(arr);
        n->children = xcalloc(n->n_children ? n->n_children : 1, sizeof *n->children);
        for (size_t i = 0; i < n->n_children; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            if (normalizer_parse(&n->children[i], json_array_get(arr, i), sub) != 0) {
                n->n_children = i + 1; /* free what was built, including the failed one */
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "NFC") == 0)
        n->kind = NORM_NFC;
    else if (strcmp(type, "NFD") == 0)
        n->kind = NORM_NFD;
    else if (strcmp(type, "NFKC") == 0)
        n->kind = NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0)
        n->kind = NORM_NFKD;
    else if (strcmp(type, "Lowercase") == 0)
        n->kind = NORM_LOWERCASE;
    else if (strcmp(type, "StripAccents") == 0)
        n->kind = NORM_STRIP_ACCENTS;
    else if (strcmp(type, "ByteLevel") == 0)
        n->kind = NORM_BYTELEVEL;
    else if (strcmp(type, "Strip") == 0) {
        n->kind = NORM_STRIP;
        if (tokjson_bool(j, "strip_left", false, &n->strip_left, where) != 0 ||
            tokjson_bool(j, "strip_right", false, &n->strip_right, where) != 0)
            return -1;
    } else if (strcmp(type, "Prepend") == 0) {
        n->kind = NORM_PREPEND;
        const char *s;
        size_t len;
        if (tokjson_string(j, "prepend", &s, &len, where) != 0) return -1;
        n->str = xmalloc(len + 1);
        memcpy(n->str, s, len + 1);
        n->str_len = len;
    } else if (strcmp(type, "Replace") == 0) {
        n->kind = NORM_REPLACE;
        const char *s;
        size_t len;
        if (tokjson_string(j, "content", &s, &len, where) != 0) return -1;
        n->str = xmalloc(len + 1);
        memcpy(n->str, s, len + 1);
        n->str_len = len;
        if (tokjson_pattern(j, "pattern", &n->regex, where) != 0) return -1;
    } else {
        return err_set("%s: unsupported normalizer type \"%s\" (supported: %s)", where, type,
                       supported);
    }
    return 0;
}

void normalizer_free(Normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_children; i++)
        normalizer_free(&n->children[i]);
    free(n->children);
    free(n->str);
    tokregex_free(n->regex);
    memset(n, 0, sizeof *n);
}

static void swap(TokBuf *a, TokBuf *b) {
    TokBuf t = *a;
    *a = *b;
    *b = t;
}

static int map_run(const char *s, size_t len, TokBuf *out, utf8proc_option_t options) {
    if (len == 0) return 0;
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res,
                                      options | UTF8PROC_STABLE);
    if (n < 0) {
        free(res);
        return err_set("Unicode normalization failed: %s", utf8proc_errmsg(n));
    }
    tokbuf_append(out, res, (size_t)n);
    free(res);
    return 0;
}

/* A Unicode normal form as tokenizers computes it: its normalization tables are older than
 * utf8proc's, and the characters it does not know (unicode_nf*d_unknown) stay as they are. To
 * it such a character is a starter that decomposes and composes with nothing, so the text on
 * each side of it normalizes independently. */
static int unicode_form(TokBuf *s, TokBuf *tmp, utf8proc_option_t options) {
    /* ASCII is invariant under every normal form. */
    size_t i = 0;
    while (i < s->len && (unsigned char)s->p[i] < 0x80)
        i++;
    if (i == s->len) return 0;
    bool compat = (options & UTF8PROC_COMPAT) != 0;
    const UnicodeRange *unknown = compat ? unicode_nfkd_unknown : unicode_nfd_unknown;
    size_t n_unknown = compat ? unicode_nfkd_unknown_count : unicode_nfd_unknown_count;
    tmp->len = 0;
    size_t run = 0;
    while (i < s->len) {
        if ((unsigned char)s->p[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t n = utf8_decode(s->p + i, s->len - i, &cp);
        if (unicode_in_ranges(unknown, n_unknown, cp)) {
            if (map_run(s->p + run, i - run, tmp, options) != 0) return -1;
            tokbuf_append(tmp, s->p + i, n);
            run = i + n;
        }
        i += n;
    }
    if (map_run(s->p + run, s->len - run, tmp, options) != 0) return -1;
    swap(s, tmp);
    return 0;
}

/* Rust's char::to_lowercase, character by character: the simple mapping except for U+0130,
 * whose full lowercase is "i" + U+0307. */
static void lowercase(TokBuf *s, TokBuf *tmp) {
    tmp->len = 0;
    tokbuf_reserve(tmp, s->len + 8);
    for (size_t i = 0; i < s->len;) {
        unsigned char c = (unsigned char)s->p[i];
        if (c < 0x80) {
            tokbuf_push(tmp, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
            i++;
            continue;
        }
        uint32_t cp;
        i += utf8_decode(s->p + i, s->len - i, &cp);
        if (cp == 0x130) {
            tokbuf_append(tmp, "i\xCC\x87", 3);
            continue;
        }
        tokbuf_append_cp(tmp, unicode_simple_lower(cp));
    }
    swap(s, tmp);
}

static void strip(TokBuf *s, bool left, bool right, bool *at_origin) {
    size_t start = 0, end = s->len;
    if (left) {
        while (start < end) {
            uint32_t cp;
            size_t n = utf8_decode(s->p + start, end - start, &cp);
            if (!unicode_is_whitespace(cp)) break;
            start += n;
        }
    }
    if (right) {
        while (end > start) {
            size_t k = end - 1;
            while (k > start && ((unsigned char)s->p[k] & 0xC0) == 0x80)
                k--;
            uint32_t cp;
            utf8_decode(s->p + k, end - k, &cp);
            if (!unicode_is_whitespace(cp)) break;
            end = k;
        }
    }
    if (start > 0) {
        *at_origin = false;
        memmove(s->p, s->p + start, end - start);
    }
    s->len = end - start;
}

static void strip_accents(TokBuf *s, TokBuf *tmp, bool *at_origin) {
    tmp->len = 0;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t n = utf8_decode(s->p + i, s->len - i, &cp);
        if (!unicode_is_strippable_mark(cp))
            tokbuf_append(tmp, s->p + i, n);
        else if (tmp->len == 0)
            *at_origin = false; /* nothing kept yet: the start moves */
        i += n;
    }
    swap(s, tmp);
}

static int replace(const Normalizer *n, TokBuf *s, TokBuf *tmp, bool *at_origin) {
    SpanList m = {0};
    if (tokregex_find_all(n->regex, s->p, s->len, &m) != 0) {
        spanlist_free(&m);
        return -1;
    }
    if (m.n == 0) {
        spanlist_free(&m);
        return 0;
    }
    tmp->len = 0;
    size_t prev = 0;
    for (size_t i = 0; i < m.n; i++) {
        tokbuf_append(tmp, s->p + prev, m.v[i].start - prev);
        tokbuf_append(tmp, n->str, n->str_len);
        prev = m.v[i].end;
    }
    tokbuf_append(tmp, s->p + prev, s->len - prev);
    /* Deleting the leading characters moves the start of the text off the original's start. */
    if (m.v[0].start == 0 && m.v[0].end > 0 && n->str_len == 0) *at_origin = false;
    spanlist_free(&m);
    swap(s, tmp);
    return 0;
}

int normalizer_apply(const Normalizer *n, TokBuf *s, TokBuf *tmp, bool *at_origin) {
    switch (n->kind) {
    case NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_children; i++)
            if (normalizer_apply(&n->children[i], s, tmp, at_origin) != 0) return -1;
        return 0;
    case NORM_NFC:
        return unicode_form(s, tmp, UTF8PROC_COMPOSE);
    case NORM_NFD:
        return unicode_form(s, tmp, UTF8PROC_DECOMPOSE);
    case NORM_NFKC:
        return unicode_form(s, tmp, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NORM_NFKD:
        return unicode_form(s, tmp, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case NORM_LOWERCASE:
        lowercase(s, tmp);
        return 0;
    case NORM_STRIP:
        strip(s, n->strip_left, n->strip_right, at_origin);
        return 0;
    case NORM_STRIP_ACCENTS:
        strip_accents(s, tmp, at_origin);
        return 0;
    case NORM_PREPEND:
        if (s->len == 0) return 0;
        tmp->len = 0;
        tokbuf_append(tmp, n->str, n->str_len);
        tokbuf_append(tmp, s->p, s->len);
        swap(s, tmp);
        return 0;
    case NORM_REPLACE:
        return replace(n, s, tmp, at_origin);
    case NORM_BYTELEVEL:
        tmp->len = 0;
        for (size_t i = 0; i < s->len; i++)
            tokbuf_append_cp(tmp, bytelevel_char((unsigned char)s->p[i]));
        swap(s, tmp);
        return 0;
    }
    return 0;
}
