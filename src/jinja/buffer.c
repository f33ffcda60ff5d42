/* The growable byte buffer every piece of output and every built string goes through. It
 * grows inside its arena, and stops growing at the arena's cap: writes past it are dropped
 * and the arena marked over_limit, so that a runaway template fails at its next step
 * (jinja_charge) instead of taking all memory. */
#include "jinja/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
