/* Decoders: each maps a list of token strings to a list of strings; the decoded text is their
 * concatenation. ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, and Sequence. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const supported =
    "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip";

int decoder_parse(Decoder *d, const json_t *j, const char *where) {
    memset(d, 0, sizeof *d);
    const char *type = tokjson_type(j, where);
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) {
        d->kind = DEC_SEQUENCE;
        const json_t *arr = json_object_get(j, "decoders");
        if (!json_is_array(arr)) return err_set("%s: key 'decoders': expected an array", where);
        d->n_children = json_array_size(arr);
        d->children = xcalloc(d->n_children ? d->n_children : 1, sizeof *d->children);
        for (size_t i = 0; i < d->n_children; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", where, i);
            if (decoder_parse(&d->children[i], json_array_get(arr, i), sub) != 0) {
                d->n_children = i + 1;
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        d->kind = DEC_BYTELEVEL;
        return 0;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        d->kind = DEC_BYTEFALLBACK;
        return 0;
    }
    if (strcmp(type, "Fuse") == 0) {
        d->kind = DEC_FUSE;
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        d->kind = DEC_METASPACE;
        return tokjson_char(j, "replacement", &d->replacement, where) != 0 ||
                       tokjson_prepend_scheme(j, &d->prepend_scheme, where) != 0
                   ? -1
                   : 0;
    }
    if (strcmp(type, "Replace") == 0) {
        d->kind = DEC_REPLACE;
        const char *s;
        size_t len;
        if (tokjson_string(j, "content", &s, &len, where) != 0) return -1;
        d->content = xmalloc(len + 1);
        memcpy(d->content, s, len + 1);
        d->content_len = len;
        return tokjson_pattern(j, "pattern", &d->regex, where);
    }
    if (strcmp(type, "Strip") == 0) {
        d->kind = DEC_STRIP;
        int64_t start = 0, stop = 0;
        if (tokjson_char(j, "content", &d->strip_char, where) != 0) return -1;
        if (json_get_int64(j, "start", &start) < 0 || json_get_int64(j, "stop", &stop) < 0)
            return err_prefix("%s", where);
        if (start < 0 || stop < 0)
            return err_set("%s: 'start' and 'stop' must not be negative", where);
        d->strip_start = (size_t)start;
        d->strip_stop = (size_t)stop;
        return 0;
    }
    return err_set("%s: unsupported decoder type \"%s\" (supported: %s)", where, type, supported);
}

void decoder_free(Decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_children; i++)
        decoder_free(&d->children[i]);
    free(d->children);
    tokregex_free(d->regex);
    free(d->content);
    memset(d, 0, sizeof *d);
}

static void swap(StrList *a, StrList *b) {
    StrList t = *a;
    *a = *b;
    *b = t;
}

#define ITEM(l, i)     ((l)->data.p + (l)->items[i].start)
#define ITEM_LEN(l, i) ((l)->items[i].end - (l)->items[i].start)

/* Every character through the inverse byte table, or the raw token when one is not in it;
 * then the bytes of all tokens as UTF-8 with invalid sequences replaced. */
static void bytelevel(StrList *toks, StrList *tmp) {
    TokBuf bytes = {0};
    for (size_t i = 0; i < toks->n; i++) {
        const char *s = ITEM(toks, i);
        size_t len = ITEM_LEN(toks, i), mark = bytes.len;
        bool all = true;
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            k += utf8_decode(s + k, len - k, &cp);
            int b = bytelevel_byte(cp);
            if (b < 0) {
                all = false;
                break;
            }
            tokbuf_push(&bytes, (char)b);
        }
        if (!all) {
            bytes.len = mark;
            tokbuf_append(&bytes, s, len);
        }
    }
    strlist_clear(tmp);
    TokBuf text = {0};
    utf8_append_lossy(&text, bytes.p, bytes.len);
    strlist_push(tmp, text.p ? text.p : "", text.len);
    tokbuf_free(&text);
    tokbuf_free(&bytes);
    swap(toks, tmp);
}

static void metaspace(const Decoder *d, StrList *toks, StrList *tmp) {
    strlist_clear(tmp);
    TokBuf t = {0};
    for (size_t i = 0; i < toks->n; i++) {
        const char *s = ITEM(toks, i);
        size_t len = ITEM_LEN(toks, i);
        t.len = 0;
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            size_t n = utf8_decode(s + k, len - k, &cp);
            if (cp == d->replacement) {
                if (!(i == 0 && d->prepend_scheme != PREPEND_NEVER)) tokbuf_push(&t, ' ');
            } else {
                tokbuf_append(&t, s + k, n);
            }
            k += n;
        }
        strlist_push(tmp, t.p ? t.p : "", t.len);
    }
    tokbuf_free(&t);
    swap(toks, tmp);
}

static int replace(const Decoder *d, StrList *toks, StrList *tmp) {
    strlist_clear(tmp);
    TokBuf t = {0};
    SpanList m = {0};
    int rc = 0;
    for (size_t i = 0; i < toks->n && rc == 0; i++) {
        const char *s = ITEM(toks, i);
        size_t len = ITEM_LEN(toks, i);
        if ((rc = tokregex_find_all(d->regex, s, len, &m)) != 0) break;
        t.len = 0;
        size_t prev = 0;
        for (size_t k = 0; k < m.n; k++) {
            tokbuf_append(&t, s + prev, m.v[k].start - prev);
            tokbuf_append(&t, d->content, d->content_len);
            prev = m.v[k].end;
        }
        tokbuf_append(&t, s + prev, len - prev);
        strlist_push(tmp, t.p ? t.p : "", t.len);
    }
    tokbuf_free(&t);
    spanlist_free(&m);
    if (rc == 0) swap(toks, tmp);
    return rc;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xHH>" -> the byte, as Rust's u8::from_str_radix(HH, 16) reads HH (it also takes "+H"). */
static int byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    if (s[3] == '+' && lo >= 0) return lo;
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

static void flush_bytes(TokBuf *bytes, StrList *out) {
    if (bytes->len == 0) return;
    if (utf8_valid_prefix(bytes->p, bytes->len) == bytes->len) {
        strlist_push(out, bytes->p, bytes->len);
    } else {
        for (size_t k = 0; k < bytes->len; k++)
            strlist_push(out, "\xEF\xBF\xBD", 3);
    }
    bytes->len = 0;
}

static void bytefallback(StrList *toks, StrList *tmp) {
    strlist_clear(tmp);
    TokBuf bytes = {0};
    for (size_t i = 0; i < toks->n; i++) {
        const char *s = ITEM(toks, i);
        size_t len = ITEM_LEN(toks, i);
        int b = byte_token(s, len);
        if (b >= 0) {
            tokbuf_push(&bytes, (char)b);
            continue;
        }
        flush_bytes(&bytes, tmp);
        strlist_push(tmp, s, len);
    }
    flush_bytes(&bytes, tmp);
    tokbuf_free(&bytes);
    swap(toks, tmp);
}

static void fuse(StrList *toks, StrList *tmp) {
    strlist_clear(tmp);
    TokBuf t = {0};
    for (size_t i = 0; i < toks->n; i++)
        tokbuf_append(&t, ITEM(toks, i), ITEM_LEN(toks, i));
    strlist_push(tmp, t.p ? t.p : "", t.len);
    tokbuf_free(&t);
    swap(toks, tmp);
}

/* Removes up to strip_start leading and strip_stop trailing characters equal to strip_char.
 * (tokenizers panics when the two cuts cross; here the token becomes empty.) */
static void strip(const Decoder *d, StrList *toks, StrList *tmp) {
    strlist_clear(tmp);
    char c[4];
    size_t clen = utf8_encode(d->strip_char, c);
    for (size_t i = 0; i < toks->n; i++) {
        const char *s = ITEM(toks, i);
        size_t len = ITEM_LEN(toks, i), start = 0, end = len;
        for (size_t k = 0; k < d->strip_start && start + clen <= len; k++) {
            if (memcmp(s + start, c, clen) != 0) break;
            start += clen;
        }
        for (size_t k = 0; k < d->strip_stop && end >= clen; k++) {
            if (memcmp(s + end - clen, c, clen) != 0) break;
            end -= clen;
        }
        if (end < start) end = start;
        strlist_push(tmp, s + start, end - start);
    }
    swap(toks, tmp);
}

int decoder_apply(const Decoder *d, StrList *toks, StrList *tmp) {
    switch (d->kind) {
    case DEC_SEQUENCE:
        for (size_t i = 0; i < d->n_children; i++)
            if (decoder_apply(&d->children[i], toks, tmp) != 0) return -1;
        return 0;
    case DEC_BYTELEVEL:
        bytelevel(toks, tmp);
        return 0;
    case DEC_METASPACE:
        metaspace(d, toks, tmp);
        return 0;
    case DEC_REPLACE:
        return replace(d, toks, tmp);
    case DEC_BYTEFALLBACK:
        bytefallback(toks, tmp);
        return 0;
    case DEC_FUSE:
        fuse(toks, tmp);
        return 0;
    case DEC_STRIP:
        strip(d, toks, tmp);
        return 0;
    }
    return 0;
}
