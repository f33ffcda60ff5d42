/* The arena every AST node and every rendered value lives in, and the growable byte buffer
 * on top of it. Nothing is freed piecemeal: a template or a render frees its arena in one go,
 * which is what lets every error path simply return. */
#include "jinja/jinja.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct JArenaBlock {
    JArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define JA_BLOCK_MIN ((size_t)64 * 1024)

void *ja_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    JArenaBlock *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JA_BLOCK_MIN ? n : JA_BLOCK_MIN;
        b = xmalloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    if (a->limit && a->used > a->limit) a->over_limit = true;
    memset(p, 0, n);
    return p;
}

char *ja_memdup(JArena *a, const char *s, size_t n) {
    char *d = ja_alloc(a, n + 1);
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void ja_free(JArena *a) {
    JArenaBlock *b = a->head;
    while (b) {
        JArenaBlock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---------------------------------------------------------------- buffers */

void jb_init(JBuf *b, JArena *a) {
    b->arena = a;
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Makes room for `extra` more bytes and the NUL; false (and the arena marked over its limit)
 * when that would pass the arena's cap: the caller then drops the write. */
static bool jb_reserve(JBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    JArena *a = b->arena;
    if (a->limit && extra >= a->limit) { /* checked first: the doubling below can't overflow */
        a->over_limit = true;
        return false;
    }
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    if (a->limit && a->used + cap > a->limit) {
        a->over_limit = true;
        return false;
    }
    char *d = ja_alloc(a, cap);
    if (b->len) memcpy(d, b->data, b->len);
    b->data = d;
    b->cap = cap;
    return true;
}

void jb_put(JBuf *b, const char *s, size_t n) {
    if (!n || !jb_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void jb_puts(JBuf *b, const char *s) {
    jb_put(b, s, strlen(s));
}

void jb_putc(JBuf *b, char c) {
    if (!jb_reserve(b, 1)) return;
    b->data[b->len++] = c;
}

void jb_printf(JBuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        jb_put(b, small, (size_t)n);
        return;
    }
    if (!jb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

JStr jb_str(JBuf *b) {
    if (!jb_reserve(b, 0)) return (JStr){"", 0}; /* nothing written yet, none may be */
    b->data[b->len] = '\0';
    return (JStr){b->data, b->len};
}
