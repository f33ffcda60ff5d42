#include "common/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ERR_CAP 2048
static _Thread_local char err_buf[ERR_CAP];

int err_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, ERR_CAP, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(const char *fmt, ...) {
    char prefix[ERR_CAP], old[ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, ERR_CAP, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, ERR_CAP);
    /* Truncation of an over-long message is acceptable; build it piecewise so the
     * compiler can see no silent overflow. */
    size_t n = strlen(prefix);
    if (n > ERR_CAP - 3) n = ERR_CAP - 3;
    memcpy(err_buf, prefix, n);
    memcpy(err_buf + n, ": ", 2);
    size_t rest = strlen(old);
    if (rest > ERR_CAP - 1 - (n + 2)) rest = ERR_CAP - 1 - (n + 2);
    memcpy(err_buf + n + 2, old, rest);
    err_buf[n + 2 + rest] = '\0';
    return -1;
}

const char *err_msg(void) {
    return err_buf;
}

void err_clear(void) {
    err_buf[0] = '\0';
}

static void out_of_memory(size_t n) {
    fprintf(stderr, "rlhf: out of memory (asked for %zu bytes)\n", n);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

void *xmalloc_checked(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) err_set("out of memory: %s needs %zu bytes", what, n);
    return p;
}

#define HUGE_PAGE ((size_t)2 << 20)

void memset_threads(void *p, int value, size_t n) {
    size_t chunk = (size_t)1 << 20;
    long n_chunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (long c = 0; c < n_chunks; c++) {
        size_t at = (size_t)c * chunk;
        memset((char *)p + at, value, n - at < chunk ? n - at : chunk);
    }
}

void *calloc_written(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    size_t n = count * size;
    char *p = malloc(n ? n : 1);
    if (!p) return NULL;
    memset_threads(p, 0, n);
    return p;
}

void *xmalloc_huge(size_t n, const char *what) {
    size_t rounded = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, rounded ? rounded : HUGE_PAGE);
    if (!p) {
        err_set("out of memory: %s needs %zu bytes", what, n);
        return NULL;
    }
    if (rounded) madvise(p, rounded, MADV_HUGEPAGE); /* advice only: without it, 4 KiB pages */
    return p;
}
