/* The arena every AST node and every rendered value lives in. Nothing is freed piecemeal: a
 * template or a render frees its arena in one go, which is what lets every error path simply
 * return. */
#include "jinja/jinja.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

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
