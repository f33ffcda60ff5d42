/* replay_buffer_bcast (replay_buffer.h): rank 0's buffer to the other ranks, as one byte
 * message. An entry travels as its group size, score, counter, which log-probs it has, its G
 * lengths and advantages, then its token and log-prob arrays; entries in rank 0's heap order,
 * so the receivers' heaps have the same layout (draws depend on the entries alone, invariant 5,
 * but the same layout keeps the copies byte for byte alike). */
#include "common/error.h"
#include "dist/dist.h"
#include "grpo/replay_buffer.h"
#include "grpo/replay_buffer_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
} Bytes;

static void put(Bytes *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->data = xrealloc(b->data, b->cap);
    }
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

/* n bytes from *p into dst (dst NULL: a new array of them, never zero-sized), advancing *p. */
static void *take(const char **p, void *dst, size_t n) {
    if (!dst) dst = xmalloc(replay_nz(n));
    if (n) memcpy(dst, *p, n);
    *p += n;
    return dst;
}

static void pack_entry(Bytes *b, const ReplayEntry *e) {
    size_t G = (size_t)e->group_size, np = replay_entry_prompt_tokens(e),
           nc = replay_entry_completion_tokens(e);
    uint8_t has[2] = {e->old_logps != NULL, e->ref_logps != NULL};
    put(b, &e->group_size, sizeof e->group_size);
    put(b, &e->score, sizeof e->score);
    put(b, &e->counter, sizeof e->counter);
    put(b, has, sizeof has);
    put(b, e->prompt_len, G * sizeof(int));
    put(b, e->completion_len, G * sizeof(int));
    put(b, e->advantages, G * sizeof(float));
    put(b, e->prompt_ids, np * sizeof(int32_t));
    put(b, e->completion_ids, nc * sizeof(int32_t));
    put(b, e->completion_mask, nc);
    if (e->old_logps) put(b, e->old_logps, nc * sizeof(float));
    if (e->ref_logps) put(b, e->ref_logps, nc * sizeof(float));
}

static void unpack_entry(const char **p, ReplayEntry *e) {
    memset(e, 0, sizeof *e);
    uint8_t has[2];
    take(p, &e->group_size, sizeof e->group_size);
    take(p, &e->score, sizeof e->score);
    take(p, &e->counter, sizeof e->counter);
    take(p, has, sizeof has);
    size_t G = (size_t)e->group_size;
    e->prompt_len = take(p, NULL, G * sizeof(int));
    e->completion_len = take(p, NULL, G * sizeof(int));
    e->advantages = take(p, NULL, G * sizeof(float));
    size_t np = replay_entry_prompt_tokens(e), nc = replay_entry_completion_tokens(e);
    e->prompt_ids = take(p, NULL, np * sizeof(int32_t));
    e->completion_ids = take(p, NULL, nc * sizeof(int32_t));
    e->completion_mask = take(p, NULL, nc);
    if (has[0]) e->old_logps = take(p, NULL, nc * sizeof(float));
    if (has[1]) e->ref_logps = take(p, NULL, nc * sizeof(float));
}

void replay_buffer_bcast(ReplayBuffer *rb) {
    if (dist_size() == 1) return;
    Bytes b = {0};
    uint64_t head[2] = {(uint64_t)rb->size, rb->next_counter};
    if (dist_is_root()) {
        put(&b, head, sizeof head);
        for (int i = 0; i < rb->size; i++)
            pack_entry(&b, &rb->heap[i]);
    }
    uint64_t len = b.len;
    dist_bcast(&len, sizeof len, 0);
    if (!dist_is_root()) b.data = xmalloc(len ? (size_t)len : 1);
    dist_bcast(b.data, (size_t)len, 0);
    if (!dist_is_root()) {
        const char *p = b.data;
        take(&p, head, sizeof head);
        int capacity = rb->capacity;
        replay_buffer_free(rb);
        replay_buffer_init(rb, capacity);
        /* rank 0's size never exceeds the capacity all ranks share (same config) */
        if (head[0] > (uint64_t)rb->capacity) abort();
        for (uint64_t i = 0; i < head[0]; i++)
            unpack_entry(&p, &rb->heap[i]);
        rb->size = (int)head[0];
        rb->next_counter = head[1];
    }
    free(b.data);
}
