/* Growable buffers used through the tokenizer. Allocation failure aborts (xrealloc). */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

static size_t grown(size_t cap, size_t need) {
    size_t c = cap ? cap : 16;
    while (c < need)
        c *= 2;
    return c;
}

void tokbuf_reserve(TokBuf *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    b->cap = grown(b->cap, b->len + extra);
    b->p = xrealloc(b->p, b->cap);
}

void tokbuf_append(TokBuf *b, const void *data, size_t n) {
    if (n == 0) return;
    tokbuf_reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

void tokbuf_append_cp(TokBuf *b, uint32_t cp) {
    char tmp[4];
    tokbuf_append(b, tmp, utf8_encode(cp, tmp));
}

void tokbuf_free(TokBuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void idbuf_push(IdBuf *b, int32_t id) {
    if (b->n == b->cap) {
        b->cap = grown(b->cap, b->n + 1);
        b->v = xrealloc(b->v, b->cap * sizeof *b->v);
    }
    b->v[b->n++] = id;
}

void idbuf_append(IdBuf *b, const int32_t *ids, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = grown(b->cap, b->n + n);
        b->v = xrealloc(b->v, b->cap * sizeof *b->v);
    }
    if (n) memcpy(b->v + b->n, ids, n * sizeof *ids);
    b->n += n;
}

void idbuf_free(IdBuf *b) {
    free(b->v);
    memset(b, 0, sizeof *b);
}

void spanlist_push(SpanList *l, size_t start, size_t end) {
    if (l->n == l->cap) {
        l->cap = grown(l->cap, l->n + 1);
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (Span){start, end};
}

void spanlist_free(SpanList *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

void piecelist_push(PieceList *l, size_t off, size_t len, bool at_origin) {
    if (l->n == l->cap) {
        l->cap = grown(l->cap, l->n + 1);
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (Piece){off, len, at_origin};
}

void piecelist_free(PieceList *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

void segmentlist_free(SegmentList *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

void strlist_push(StrList *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        l->cap = grown(l->cap, l->n + 1);
        l->items = xrealloc(l->items, l->cap * sizeof *l->items);
    }
    size_t start = l->data.len;
    /* Items are read as data.p + start: with only empty strings pushed, data.p would stay NULL
     * and that sum undefined, so there is always a buffer. */
    tokbuf_reserve(&l->data, len ? len : 1);
    tokbuf_append(&l->data, s, len);
    l->items[l->n++] = (Span){start, start + len};
}

void strlist_clear(StrList *l) {
    l->n = 0;
    l->data.len = 0;
}

void strlist_free(StrList *l) {
    tokbuf_free(&l->data);
    free(l->items);
    memset(l, 0, sizeof *l);
}
