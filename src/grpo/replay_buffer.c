/* The buffer itself: entries, the min-heap that bounds it, and the score-weighted draw. What a
 * generation batch does with it is in replay_update.c; files in replay_buffer_io.c. */
#include "grpo/replay_buffer.h"

#include "common/error.h"
#include "rollout/sampler.h"
#include "grpo/replay_buffer_internal.h"

#include <stdlib.h>
#include <string.h>

void replay_buffer_init(ReplayBuffer *rb, int capacity) {
    *rb = (ReplayBuffer){.capacity = capacity > 0 ? capacity : 0};
    if (rb->capacity > 0) rb->heap = xcalloc((size_t)rb->capacity, sizeof *rb->heap);
}

void replay_buffer_free(ReplayBuffer *rb) {
    for (int i = 0; i < rb->size; i++)
        replay_entry_free(&rb->heap[i]);
    free(rb->heap);
    memset(rb, 0, sizeof *rb);
}

void replay_entry_free(ReplayEntry *e) {
    free(e->prompt_len), free(e->completion_len), free(e->prompt_ids), free(e->completion_ids);
    free(e->completion_mask), free(e->advantages), free(e->old_logps), free(e->ref_logps);
    memset(e, 0, sizeof *e);
}

size_t replay_entry_prompt_tokens(const ReplayEntry *e) {
    size_t n = 0;
    for (int i = 0; i < e->group_size; i++)
        n += (size_t)e->prompt_len[i];
    return n;
}

size_t replay_entry_completion_tokens(const ReplayEntry *e) {
    size_t n = 0;
    for (int i = 0; i < e->group_size; i++)
        n += (size_t)e->completion_len[i];
    return n;
}

/* A copy of n elements of `size` bytes (NULL stays NULL; never a zero-byte malloc). */
static void *dup_array(const void *src, size_t n, size_t size) {
    if (!src) return NULL;
    void *p = xmalloc(replay_nz(n * size));
    if (n) memcpy(p, src, n * size);
    return p;
}

void replay_entry_copy(ReplayEntry *dst, const ReplayEntry *src) {
    size_t g = (size_t)src->group_size, np = replay_entry_prompt_tokens(src),
           nc = replay_entry_completion_tokens(src);
    *dst =
        (ReplayEntry){.group_size = src->group_size, .score = src->score, .counter = src->counter};
    dst->prompt_len = dup_array(src->prompt_len, g, sizeof(int));
    dst->completion_len = dup_array(src->completion_len, g, sizeof(int));
    dst->advantages = dup_array(src->advantages, g, sizeof(float));
    dst->prompt_ids = dup_array(src->prompt_ids, np, sizeof(int32_t));
    dst->completion_ids = dup_array(src->completion_ids, nc, sizeof(int32_t));
    dst->completion_mask = dup_array(src->completion_mask, nc, 1);
    dst->old_logps = dup_array(src->old_logps, nc, sizeof(float));
    dst->ref_logps = dup_array(src->ref_logps, nc, sizeof(float));
}

bool replay_entry_below(const ReplayEntry *a, const ReplayEntry *b) {
    if (a->score != b->score) return a->score < b->score;
    return a->counter > b->counter;
}

static void swap_entries(ReplayEntry *a, ReplayEntry *b) {
    ReplayEntry t = *a;
    *a = *b;
    *b = t;
}

static void sift_up(ReplayEntry *h, int i) {
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!replay_entry_below(&h[i], &h[parent])) break;
        swap_entries(&h[i], &h[parent]);
        i = parent;
    }
}

static void sift_down(ReplayEntry *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && replay_entry_below(&h[l], &h[m])) m = l;
        if (r < n && replay_entry_below(&h[r], &h[m])) m = r;
        if (m == i) return;
        swap_entries(&h[i], &h[m]);
        i = m;
    }
}

bool replay_buffer_offer(ReplayBuffer *rb, ReplayEntry *e) {
    if (rb->capacity <= 0) {
        replay_entry_free(e);
        return false;
    }
    if (rb->size < rb->capacity) {
        rb->heap[rb->size] = *e;
        sift_up(rb->heap, rb->size++);
    } else if (replay_entry_below(&rb->heap[0], e)) {
        replay_entry_free(&rb->heap[0]);
        rb->heap[0] = *e;
        sift_down(rb->heap, rb->size, 0);
    } else {
        replay_entry_free(e);
        return false;
    }
    memset(e, 0, sizeof *e);
    return true;
}

bool replay_buffer_add(ReplayBuffer *rb, ReplayEntry *e) {
    /* The counter advances even for a discarded entry, so it counts offers: two runs that offer
     * the same groups number them alike whatever their capacity. */
    e->counter = rb->next_counter++;
    return replay_buffer_offer(rb, e);
}

int replay_entry_ptr_by_counter(const void *a, const void *b) {
    const ReplayEntry *x = *(const ReplayEntry *const *)a, *y = *(const ReplayEntry *const *)b;
    return (x->counter > y->counter) - (x->counter < y->counter);
}

int replay_buffer_sample(const ReplayBuffer *rb, int n, uint64_t seed, uint64_t draw_index,
                         const ReplayEntry **out) {
    if (rb->size == 0 || n <= 0) return 0;
    int m = rb->size;
    const ReplayEntry **order = xmalloc((size_t)m * sizeof *order);
    double *w = xmalloc((size_t)m * sizeof *w);
    for (int j = 0; j < m; j++)
        order[j] = &rb->heap[j];
    qsort(order, (size_t)m, sizeof *order, replay_entry_ptr_by_counter); /* invariant 5 */
    int positive = 0;
    for (int j = 0; j < m; j++) {
        w[j] = order[j]->score;
        positive += w[j] > 0;
    }
    if (positive == 0) { /* scores are >= 0; all zero would leave nothing to draw from */
        for (int j = 0; j < m; j++)
            w[j] = 1;
        positive = m;
    }
    /* torch.multinomial's rule, extended: it refuses without replacement when fewer categories
     * than draws have weight; we then draw with replacement instead. */
    bool without = n <= positive;
    SamplerRng rng;
    sampler_rng_seed(&rng, seed, draw_index);
    for (int k = 0; k < n; k++) {
        double total = 0;
        for (int j = 0; j < m; j++)
            total += w[j];
        double u = sampler_rng_uniform(&rng) * total, cum = 0;
        int pick = -1;
        for (int j = 0; j < m; j++) {
            if (w[j] <= 0) continue;
            pick = j; /* the last weighted entry, should rounding carry u past the sum */
            cum += w[j];
            if (u < cum) break;
        }
        out[k] = order[pick];
        if (without) w[pick] = 0;
    }
    free(w);
    free(order);
    return n;
}
