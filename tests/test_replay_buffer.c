/* The GRPO replay buffer (trl-methods.md §6): TRL's own test cases re-expressed, eviction against
 * a sorted reference, ties, the empty and the disabled buffer, replacement of zero-std groups with
 * exact padding and widening, draws proportional to score, and save/load (round trip, capacity
 * change, corrupt files). */
#include "common/error.h"
#include "harness.h"
#include "io/safetensors.h"
#include "rollout/sampler.h"
#include "grpo/replay_buffer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAD 7

/* ---- batches ---- */

static GrpoBatch new_batch(int n_groups, int G, int pw, int cw, bool old, bool ref) {
    GrpoBatch b;
    grpo_batch_alloc(&b, n_groups * G, G, pw, cw, PAD, old, ref);
    return b;
}

/* Fills group g: row i gets plen[i] prompt tokens and clen[i] completion tokens, every value
 * derived from (tag, row, position) so that any misplaced token shows; rows flagged in
 * `masked` (may be NULL) have completion mask 0 throughout (a truncated row). The padding
 * keeps whatever it had, so stale values in a replaced group would show too. */
static void set_group(GrpoBatch *b, int g, int tag, const int *plen, const int *clen,
                      const float *adv, const bool *masked) {
    for (int i = 0; i < b->group_size; i++) {
        int r = g * b->group_size + i, pw = b->prompt_w, cw = b->completion_w;
        b->prompt_len[r] = plen[i], b->completion_len[r] = clen[i];
        b->advantages[r] = adv[i];
        for (int c = 0; c < pw; c++) {
            bool real = c >= pw - plen[i];
            b->prompt_ids[r * pw + c] = real ? tag * 1000 + i * 100 + c : PAD;
            b->prompt_mask[r * pw + c] = real;
        }
        for (int c = 0; c < cw; c++) {
            bool real = c < clen[i];
            b->completion_ids[r * cw + c] = real ? tag * 1000 + 500 + i * 100 + c : PAD;
            b->completion_mask[r * cw + c] = real && !(masked && masked[i]);
            if (b->old_logps) b->old_logps[r * cw + c] = real ? -(float)tag - 0.01f * c : 0;
            if (b->ref_logps) b->ref_logps[r * cw + c] = real ? -(float)tag - 0.02f * c : 0;
        }
    }
}

/* A group of G rows with advantages +-0.5: sum |A| = G/2. */
static void set_simple_group(GrpoBatch *b, int g, int tag, int plen, int clen) {
    int pl[16], cl[16];
    float adv[16];
    for (int i = 0; i < b->group_size; i++)
        pl[i] = plen, cl[i] = clen, adv[i] = i % 2 ? -0.5f : 0.5f;
    set_group(b, g, tag, pl, cl, adv, NULL);
}

static void *dup_or_null(const void *p, size_t n) {
    if (!p) return NULL;
    void *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    return q;
}

static GrpoBatch batch_copy(const GrpoBatch *b) {
    GrpoBatch c = *b;
    size_t rows = (size_t)b->n_rows, pc = rows * (size_t)b->prompt_w,
           cc = rows * (size_t)b->completion_w;
    c.prompt_ids = dup_or_null(b->prompt_ids, pc * 4);
    c.prompt_mask = dup_or_null(b->prompt_mask, pc);
    c.completion_ids = dup_or_null(b->completion_ids, cc * 4);
    c.completion_mask = dup_or_null(b->completion_mask, cc);
    c.prompt_len = dup_or_null(b->prompt_len, rows * sizeof(int));
    c.completion_len = dup_or_null(b->completion_len, rows * sizeof(int));
    c.advantages = dup_or_null(b->advantages, rows * 4);
    c.old_logps = dup_or_null(b->old_logps, cc * 4);
    c.ref_logps = dup_or_null(b->ref_logps, cc * 4);
    return c;
}

static bool same_bytes(const void *a, const void *b, size_t n) {
    if (!a || !b) return a == b;
    return memcmp(a, b, n) == 0;
}

static bool batch_equal(const GrpoBatch *a, const GrpoBatch *b) {
    if (a->n_rows != b->n_rows || a->group_size != b->group_size || a->prompt_w != b->prompt_w ||
        a->completion_w != b->completion_w || a->pad_id != b->pad_id)
        return false;
    size_t rows = (size_t)a->n_rows, pc = rows * (size_t)a->prompt_w,
           cc = rows * (size_t)a->completion_w;
    return same_bytes(a->prompt_ids, b->prompt_ids, pc * 4) &&
           same_bytes(a->prompt_mask, b->prompt_mask, pc) &&
           same_bytes(a->completion_ids, b->completion_ids, cc * 4) &&
           same_bytes(a->completion_mask, b->completion_mask, cc) &&
           same_bytes(a->prompt_len, b->prompt_len, rows * sizeof(int)) &&
           same_bytes(a->completion_len, b->completion_len, rows * sizeof(int)) &&
           same_bytes(a->advantages, b->advantages, rows * 4) &&
           same_bytes(a->old_logps, b->old_logps, cc * 4) &&
           same_bytes(a->ref_logps, b->ref_logps, cc * 4);
}

/* Rows [r0, r0 + n) of a and b hold the same real tokens, masks, lengths, advantages and
 * log-probs, whatever their widths (for rows that a widening must keep). */
static bool rows_same_content(const GrpoBatch *a, const GrpoBatch *b, int r0, int n) {
    for (int r = r0; r < r0 + n; r++) {
        int pl = a->prompt_len[r], cl = a->completion_len[r];
        if (pl != b->prompt_len[r] || cl != b->completion_len[r] ||
            a->advantages[r] != b->advantages[r])
            return false;
        for (int k = 0; k < pl; k++) {
            size_t ia = (size_t)r * a->prompt_w + (a->prompt_w - pl + k),
                   ib = (size_t)r * b->prompt_w + (b->prompt_w - pl + k);
            if (a->prompt_ids[ia] != b->prompt_ids[ib] || a->prompt_mask[ia] != b->prompt_mask[ib])
                return false;
        }
        for (int k = 0; k < cl; k++) {
            size_t ia = (size_t)r * a->completion_w + k, ib = (size_t)r * b->completion_w + k;
            if (a->completion_ids[ia] != b->completion_ids[ib] ||
                a->completion_mask[ia] != b->completion_mask[ib])
                return false;
            if (a->old_logps && a->old_logps[ia] != b->old_logps[ib]) return false;
            if (a->ref_logps && a->ref_logps[ia] != b->ref_logps[ib]) return false;
        }
    }
    return true;
}

/* Every padding cell of the rows [r0, r0 + n) is padding: pad id, mask 0, log-prob 0. */
static bool rows_padded(const GrpoBatch *b, int r0, int n) {
    for (int r = r0; r < r0 + n; r++) {
        int pw = b->prompt_w, cw = b->completion_w;
        for (int c = 0; c < pw - b->prompt_len[r]; c++)
            if (b->prompt_ids[r * pw + c] != PAD || b->prompt_mask[r * pw + c] != 0) return false;
        for (int c = b->completion_len[r]; c < cw; c++) {
            size_t i = (size_t)r * cw + c;
            if (b->completion_ids[i] != PAD || b->completion_mask[i] != 0) return false;
            if (b->old_logps && b->old_logps[i] != 0) return false;
            if (b->ref_logps && b->ref_logps[i] != 0) return false;
        }
    }
    return true;
}

/* Group g of b is exactly entry e padded to b's widths (padding included). */
static bool group_is_entry(const GrpoBatch *b, int g, const ReplayEntry *e) {
    if (e->group_size != b->group_size) return false;
    int pw = b->prompt_w, cw = b->completion_w, po = 0, co = 0;
    for (int i = 0; i < b->group_size; i++) {
        int r = g * b->group_size + i, pl = e->prompt_len[i], cl = e->completion_len[i];
        if (b->prompt_len[r] != pl || b->completion_len[r] != cl ||
            b->advantages[r] != e->advantages[i])
            return false;
        for (int k = 0; k < pl; k++)
            if (b->prompt_ids[r * pw + pw - pl + k] != e->prompt_ids[po + k] ||
                b->prompt_mask[r * pw + pw - pl + k] != 1)
                return false;
        for (int k = 0; k < cl; k++) {
            size_t i_b = (size_t)r * cw + k;
            if (b->completion_ids[i_b] != e->completion_ids[co + k] ||
                b->completion_mask[i_b] != e->completion_mask[co + k])
                return false;
            if (b->old_logps && b->old_logps[i_b] != e->old_logps[co + k]) return false;
            if (b->ref_logps && b->ref_logps[i_b] != e->ref_logps[co + k]) return false;
        }
        po += pl, co += cl;
    }
    return rows_padded(b, g * b->group_size, b->group_size);
}

/* The buffer entry group g of b is a copy of, or NULL. */
static const ReplayEntry *entry_in_group(const ReplayBuffer *rb, const GrpoBatch *b, int g) {
    for (int i = 0; i < rb->size; i++)
        if (group_is_entry(b, g, &rb->heap[i])) return &rb->heap[i];
    return NULL;
}

static bool entry_equal(const ReplayEntry *a, const ReplayEntry *b) {
    if (a->group_size != b->group_size || a->score != b->score || a->counter != b->counter)
        return false;
    size_t G = (size_t)a->group_size, np = 0, nc = 0;
    if (!same_bytes(a->prompt_len, b->prompt_len, G * sizeof(int)) ||
        !same_bytes(a->completion_len, b->completion_len, G * sizeof(int)) ||
        !same_bytes(a->advantages, b->advantages, G * 4))
        return false;
    for (size_t i = 0; i < G; i++)
        np += (size_t)a->prompt_len[i], nc += (size_t)a->completion_len[i];
    return same_bytes(a->prompt_ids, b->prompt_ids, np * 4) &&
           same_bytes(a->completion_ids, b->completion_ids, nc * 4) &&
           same_bytes(a->completion_mask, b->completion_mask, nc) &&
           same_bytes(a->old_logps, b->old_logps, nc * 4) &&
           same_bytes(a->ref_logps, b->ref_logps, nc * 4);
}

static const ReplayEntry *find_counter(const ReplayBuffer *rb, uint64_t counter) {
    for (int i = 0; i < rb->size; i++)
        if (rb->heap[i].counter == counter) return &rb->heap[i];
    return NULL;
}

/* heap[0] ranks below (or equals) every entry, and the heap property holds throughout. */
static bool heap_ok(const ReplayBuffer *rb) {
    for (int i = 1; i < rb->size; i++) {
        const ReplayEntry *p = &rb->heap[(i - 1) / 2], *c = &rb->heap[i];
        if (c->score < p->score || (c->score == p->score && c->counter > p->counter)) return false;
    }
    return true;
}

/* A buffer whose entries (G = 2) have the given group stds as scores (sum |A| = 1), each its own
 * tag, stored through replay_buffer_update. */
static void fill_buffer(ReplayBuffer *rb, const float *scores, int n, int plen, int clen, bool old,
                        bool ref) {
    GrpoBatch b = new_batch(n, 2, plen, clen, old, ref);
    for (int g = 0; g < n; g++)
        set_simple_group(&b, g, 10 + g, plen, clen);
    CHECK(replay_buffer_update(rb, &b, scores, 1, 0, NULL) == 0, "%s", err_msg());
    grpo_batch_free(&b);
}

/* ---- the heap ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_trl_capacity(void) {
    /* TRL: capacity 5 after 0.5, 0.8, 0.3, 0.9, 0.7, 0.6, 0.4 holds the 5 largest, min 0.5. */
    const float s[7] = {0.5f, 0.8f, 0.3f, 0.9f, 0.7f, 0.6f, 0.4f};
    ReplayBuffer rb;
    replay_buffer_init(&rb, 5);
    GrpoBatch b = new_batch(7, 2, 3, 4, false, false);
    for (int g = 0; g < 7; g++)
        set_simple_group(&b, g, g + 1, 2, 3);
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &b, s, 1, 0, &st) == 0, "%s", err_msg());
    CHECK(rb.size == 5 && st.buffer_size == 5, "size %d", rb.size);
    CHECK(rb.heap[0].score == 0.5, "heap[0] %g, want 0.5", rb.heap[0].score);
    double got[5], want[5] = {0.5f, 0.6f, 0.7f, 0.8f, 0.9f};
    for (int i = 0; i < 5; i++)
        got[i] = rb.heap[i].score;
    qsort(got, 5, sizeof *got, cmp_double);
    for (int i = 0; i < 5; i++)
        CHECK(got[i] == want[i], "score %d: %g vs %g", i, got[i], want[i]);
    CHECK(st.num_added == 6, "0.4 discarded, the rest entered: %d", st.num_added);
    CHECK(st.num_replaced == 0, "nothing to replace: %d", st.num_replaced);
    CHECK(harness_close(st.mean_score, 0.7, 1e-6, 0), "mean score %g", st.mean_score);
    CHECK(rb.next_counter == 7, "counter counts offers: %llu", (unsigned long long)rb.next_counter);
    CHECK(heap_ok(&rb), "heap property");
    /* the batch had variance everywhere: untouched */
    GrpoBatch ref = new_batch(7, 2, 3, 4, false, false);
    for (int g = 0; g < 7; g++)
        set_simple_group(&ref, g, g + 1, 2, 3);
    CHECK(batch_equal(&b, &ref), "a batch with variance everywhere is left alone");
    grpo_batch_free(&ref);
    grpo_batch_free(&b);
    replay_buffer_free(&rb);
}

/* An entry of one row with the given score (for heap tests that need no batch). */
static ReplayEntry scored_entry(double score) {
    ReplayEntry e = {.group_size = 1, .score = score};
    e.prompt_len = calloc(1, sizeof(int));
    e.completion_len = calloc(1, sizeof(int));
    e.advantages = calloc(1, sizeof(float));
    e.prompt_ids = malloc(4), e.completion_ids = malloc(4), e.completion_mask = malloc(1);
    return e;
}

typedef struct {
    double score;
    uint64_t counter;
} Offer;

static int offer_rank(const void *a, const void *b) {
    const Offer *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->counter > y->counter) - (x->counter < y->counter);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void test_topk_random(void) {
    /* Many offers with frequent ties (scores in steps of 1/8) against a sorted reference: the
     * buffer must hold exactly the top `cap` under (score desc, counter asc). */
    SamplerRng rng;
    sampler_rng_seed(&rng, 1234, 0);
    const int caps[] = {1, 3, 7, 16};
    for (size_t ci = 0; ci < sizeof caps / sizeof *caps; ci++) {
        int cap = caps[ci], n = 300;
        ReplayBuffer rb;
        replay_buffer_init(&rb, cap);
        Offer *all = malloc((size_t)n * sizeof *all);
        bool heap_always_ok = true;
        for (int i = 0; i < n; i++) {
            double s = floor(sampler_rng_uniform(&rng) * 24) / 8;
            ReplayEntry e = scored_entry(s);
            replay_buffer_add(&rb, &e);
            all[i] = (Offer){s, (uint64_t)i};
            heap_always_ok &= heap_ok(&rb);
        }
        qsort(all, (size_t)n, sizeof *all, offer_rank);
        uint64_t want[16], got[16];
        for (int i = 0; i < cap; i++)
            want[i] = all[i].counter, got[i] = rb.heap[i].counter;
        qsort(want, (size_t)cap, sizeof *want, cmp_u64);
        qsort(got, (size_t)rb.size, sizeof *got, cmp_u64);
        CHECK(rb.size == cap, "cap %d: size %d", cap, rb.size);
        bool same = true;
        for (int i = 0; i < cap; i++)
            same &= want[i] == got[i];
        CHECK(same, "cap %d: kept entries differ from the sorted reference", cap);
        CHECK(heap_always_ok, "cap %d: heap property broken at some point", cap);
        Offer min = all[cap - 1];
        CHECK(rb.heap[0].score == min.score && rb.heap[0].counter == min.counter,
              "cap %d: heap[0] is (%g, %llu), the reference minimum (%g, %llu)", cap,
              rb.heap[0].score, (unsigned long long)rb.heap[0].counter, min.score,
              (unsigned long long)min.counter);
        free(all);
        replay_buffer_free(&rb);
    }
}

static void test_ties(void) {
    /* Equal scores: no failure, the earliest kept, the newest evicted first, the same every
     * time. */
    for (int run = 0; run < 2; run++) {
        ReplayBuffer rb;
        replay_buffer_init(&rb, 4);
        for (int i = 0; i < 10; i++) {
            ReplayEntry e = scored_entry(1.0);
            bool kept = replay_buffer_add(&rb, &e);
            CHECK(kept == (i < 4), "run %d offer %d: kept %d", run, i, kept);
        }
        CHECK(rb.size == 4, "size %d", rb.size);
        for (uint64_t c = 0; c < 4; c++)
            CHECK(find_counter(&rb, c) != NULL, "run %d: counter %llu kept", run,
                  (unsigned long long)c);
        CHECK(rb.heap[0].counter == 3, "the newest of the ties is next out: %llu",
              (unsigned long long)rb.heap[0].counter);
        ReplayEntry e = scored_entry(2.0);
        CHECK(replay_buffer_add(&rb, &e), "a higher score enters");
        CHECK(find_counter(&rb, 3) == NULL && find_counter(&rb, 10) != NULL,
              "it evicted counter 3");
        CHECK(rb.heap[0].counter == 2, "then counter 2 is next out");
        replay_buffer_free(&rb);
    }
}

/* ---- replacement ---- */

static void test_empty_buffer(void) {
    ReplayBuffer rb;
    replay_buffer_init(&rb, 4);
    GrpoBatch b = new_batch(3, 2, 4, 5, true, false);
    for (int g = 0; g < 3; g++)
        set_simple_group(&b, g, g + 1, 3, 4);
    for (int r = 0; r < 6; r++)
        b.advantages[r] = 0;
    GrpoBatch before = batch_copy(&b);
    const float zero[3] = {0, 0, 1e-9f};
    ReplayStats st = {.num_replaced = -1};
    CHECK(replay_buffer_update(&rb, &b, zero, 5, 0, &st) == 0, "%s", err_msg());
    CHECK(batch_equal(&b, &before), "zero-std groups stay as they are with an empty buffer");
    CHECK(st.num_replaced == 0 && st.num_added == 0 && st.buffer_size == 0 && st.mean_score == 0,
          "stats %d %d %d %g", st.num_replaced, st.num_added, st.buffer_size, st.mean_score);
    grpo_batch_free(&before);
    grpo_batch_free(&b);
    replay_buffer_free(&rb);
}

static void test_disabled(void) {
    const int caps[] = {0, -3};
    for (int k = 0; k < 2; k++) {
        ReplayBuffer rb;
        replay_buffer_init(&rb, caps[k]);
        GrpoBatch b = new_batch(4, 2, 3, 3, true, true);
        for (int g = 0; g < 4; g++)
            set_simple_group(&b, g, g + 1, 2, 2);
        GrpoBatch before = batch_copy(&b);
        const float std[4] = {1, 0, 2, 0};
        ReplayStats st = {1, 1, 1, 1};
        CHECK(replay_buffer_update(&rb, &b, std, 5, 0, &st) == 0, "%s", err_msg());
        CHECK(batch_equal(&b, &before), "capacity %d: batch untouched", caps[k]);
        CHECK(rb.size == 0 && st.buffer_size == 0 && st.num_added == 0 && st.num_replaced == 0,
              "capacity %d: nothing stored", caps[k]);
        ReplayEntry e = scored_entry(1);
        CHECK(!replay_buffer_add(&rb, &e) && rb.size == 0, "add on a disabled buffer discards");
        grpo_batch_free(&before);
        grpo_batch_free(&b);
        replay_buffer_free(&rb);
    }
}

static void test_all_zero_std(void) {
    ReplayBuffer rb;
    replay_buffer_init(&rb, 8);
    const float s[3] = {1, 2, 3};
    fill_buffer(&rb, s, 3, 3, 4, true, false);
    CHECK(rb.size == 3, "three entries: %d", rb.size);
    /* more zero-std groups than entries: all replaced, with replacement */
    GrpoBatch b = new_batch(5, 2, 3, 4, true, false);
    for (int g = 0; g < 5; g++)
        set_simple_group(&b, g, 90 + g, 3, 4);
    const float zero[5] = {0, 0, 0, 0, 0};
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &b, zero, 9, 1, &st) == 0, "%s", err_msg());
    CHECK(st.num_replaced == 5 && st.num_added == 0 && st.buffer_size == 3, "stats %d %d %d",
          st.num_replaced, st.num_added, st.buffer_size);
    for (int g = 0; g < 5; g++)
        CHECK(entry_in_group(&rb, &b, g) != NULL, "group %d is a buffer entry", g);
    CHECK(b.prompt_w == 3 && b.completion_w == 4, "widths kept");
    grpo_batch_free(&b);

    /* as many zero-std groups as entries: without replacement, each entry once */
    b = new_batch(3, 2, 3, 4, true, false);
    for (int g = 0; g < 3; g++)
        set_simple_group(&b, g, 90 + g, 3, 4);
    CHECK(replay_buffer_update(&rb, &b, zero, 9, 2, &st) == 0, "%s", err_msg());
    const ReplayEntry *seen[3];
    for (int g = 0; g < 3; g++) {
        seen[g] = entry_in_group(&rb, &b, g);
        CHECK(seen[g] != NULL, "group %d is a buffer entry", g);
    }
    CHECK(seen[0] != seen[1] && seen[0] != seen[2] && seen[1] != seen[2],
          "drawn without replacement");
    grpo_batch_free(&b);
    replay_buffer_free(&rb);
}

static void test_mixed(void) {
    /* TRL: the buffer grows by the groups with variance, the zero-std groups are replaced, the
     * groups with variance stay. */
    ReplayBuffer rb;
    replay_buffer_init(&rb, 8);
    const float s[2] = {5, 6};
    fill_buffer(&rb, s, 2, 2, 3, true, true);
    GrpoBatch b = new_batch(4, 2, 2, 3, true, true);
    for (int g = 0; g < 4; g++)
        set_simple_group(&b, g, 50 + g, 2, 3);
    GrpoBatch before = batch_copy(&b);
    /* tiny scores for the new groups: a draw lands on them with probability ~1e-6 */
    const float std[4] = {1e-5f, 0, 2e-5f, 0};
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &b, std, 3, 0, &st) == 0, "%s", err_msg());
    CHECK(rb.size == 4 && st.buffer_size == 4 && st.num_added == 2, "grew by 2: %d", rb.size);
    CHECK(st.num_replaced == 2, "replaced %d", st.num_replaced);
    CHECK(rows_same_content(&b, &before, 0, 2) && rows_same_content(&b, &before, 4, 2),
          "groups with variance untouched");
    const ReplayEntry *e1 = entry_in_group(&rb, &b, 1), *e3 = entry_in_group(&rb, &b, 3);
    CHECK(e1 && e3, "zero-std groups hold buffer entries");
    CHECK(e1 && e3 && e1 != e3 && e1->counter < 2 && e3->counter < 2,
          "they are the two earlier entries, each once");
    CHECK(!rows_same_content(&b, &before, 2, 2) && !rows_same_content(&b, &before, 6, 2),
          "the zero-std groups are gone");
    grpo_batch_free(&before);
    grpo_batch_free(&b);
    replay_buffer_free(&rb);
}

static void test_shorter_entry_padded(void) {
    /* A group stored from a narrow batch, with ragged rows and a truncated (all-masked) row,
     * replayed into a wider batch whose zero-std group held other tokens everywhere. */
    ReplayBuffer rb;
    replay_buffer_init(&rb, 2);
    GrpoBatch narrow = new_batch(1, 3, 4, 5, true, true);
    const int pl[3] = {2, 4, 1}, cl[3] = {5, 1, 3};
    const float adv[3] = {1.5f, -0.25f, -1.25f};
    const bool masked[3] = {true, false, false};
    set_group(&narrow, 0, 3, pl, cl, adv, masked);
    const float one = 0.75f;
    CHECK(replay_buffer_update(&rb, &narrow, &one, 1, 0, NULL) == 0, "%s", err_msg());
    CHECK(rb.size == 1 && harness_close(rb.heap[0].score, 3.0 * 0.75, 1e-12, 0),
          "score sum|A| sigma = %g", rb.size ? rb.heap[0].score : -1);
    ReplayEntry snapshot;
    replay_entry_copy(&snapshot, &rb.heap[0]);

    GrpoBatch wide = new_batch(2, 3, 9, 11, true, true);
    const int wpl[3] = {9, 9, 9}, wcl[3] = {11, 11, 11};
    const float wadv[3] = {0, 0, 0};
    set_group(&wide, 0, 8, wpl, wcl, wadv, NULL);
    set_group(&wide, 1, 9, wpl, wcl, wadv, NULL);
    GrpoBatch before = batch_copy(&wide);
    const float std[2] = {0, 0};
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &wide, std, 1, 0, &st) == 0, "%s", err_msg());
    CHECK(st.num_replaced == 2, "both replaced");
    CHECK(wide.prompt_w == 9 && wide.completion_w == 11, "widths kept: %d %d", wide.prompt_w,
          wide.completion_w);
    for (int g = 0; g < 2; g++)
        CHECK(group_is_entry(&wide, g, &rb.heap[0]), "group %d: the entry, padded", g);
    /* spelled out for row 0 of group 1 (row 3): prompt left-padded, completion right-padded,
     * the truncated row's mask still 0 */
    CHECK(wide.prompt_len[3] == 2 && wide.prompt_ids[3 * 9 + 6] == PAD &&
              wide.prompt_mask[3 * 9 + 6] == 0 && wide.prompt_ids[3 * 9 + 7] == 3 * 1000 + 2 &&
              wide.prompt_mask[3 * 9 + 7] == 1,
          "prompt padding on the left");
    CHECK(wide.completion_ids[3 * 11 + 4] == 3 * 1000 + 504 &&
              wide.completion_mask[3 * 11 + 4] == 0 && wide.completion_ids[3 * 11 + 5] == PAD &&
              wide.old_logps[3 * 11 + 5] == 0 && wide.ref_logps[3 * 11 + 10] == 0,
          "completion padding on the right, logps 0");
    CHECK(wide.completion_mask[4 * 11 + 0] == 1 && wide.completion_mask[4 * 11 + 1] == 0,
          "row 1: one real token masked 1, then padding");
    CHECK(wide.advantages[3] == 1.5f && wide.advantages[4] == -0.25f &&
              wide.advantages[5] == -1.25f,
          "all G advantages replaced");
    CHECK(entry_equal(&rb.heap[0], &snapshot), "the stored entry is unchanged by the padding");
    /* and shares nothing with the batch */
    for (size_t i = 0; i < (size_t)wide.n_rows * 11; i++)
        wide.completion_ids[i] = -1, wide.old_logps[i] = 99;
    for (size_t i = 0; i < (size_t)wide.n_rows * 9; i++)
        wide.prompt_ids[i] = -1;
    CHECK(entry_equal(&rb.heap[0], &snapshot), "nor by later writes into the batch");
    replay_entry_free(&snapshot);
    grpo_batch_free(&before);
    grpo_batch_free(&wide);
    grpo_batch_free(&narrow);
    replay_buffer_free(&rb);
}

static void test_wider_entry_widens(void) {
    ReplayBuffer rb;
    replay_buffer_init(&rb, 1);
    GrpoBatch big = new_batch(1, 2, 6, 8, true, false);
    const int pl[2] = {6, 3}, cl[2] = {2, 8};
    const float adv[2] = {2, -2};
    set_group(&big, 0, 4, pl, cl, adv, NULL);
    const float s_big = 100;
    CHECK(replay_buffer_update(&rb, &big, &s_big, 1, 0, NULL) == 0, "%s", err_msg());
    ReplayEntry snapshot;
    replay_entry_copy(&snapshot, &rb.heap[0]);

    /* group 0 has (small) variance and stays; capacity 1 discards it, so the draw for group 1
     * is the wide entry */
    GrpoBatch b = new_batch(2, 2, 3, 4, true, false);
    const int spl[2] = {3, 1}, scl[2] = {4, 2};
    const float sadv[2] = {0.5f, -0.5f};
    set_group(&b, 0, 5, spl, scl, sadv, NULL);
    set_group(&b, 1, 6, spl, scl, sadv, NULL);
    GrpoBatch before = batch_copy(&b);
    const float std[2] = {0.1f, 0};
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &b, std, 2, 0, &st) == 0, "%s", err_msg());
    CHECK(st.num_added == 0 && st.num_replaced == 1, "stats %d %d", st.num_added, st.num_replaced);
    CHECK(b.prompt_w == 6 && b.completion_w == 8, "widened to 6/8: %d/%d", b.prompt_w,
          b.completion_w);
    CHECK(rows_same_content(&before, &b, 0, 2), "group 0 keeps its tokens under new padding");
    CHECK(rows_padded(&b, 0, 2), "group 0's new columns are padding");
    CHECK(b.prompt_ids[1 * 6 + 5] == 5 * 1000 + 100 + 2 && b.prompt_ids[1 * 6 + 4] == PAD,
          "row 1's one prompt token stays rightmost");
    CHECK(group_is_entry(&b, 1, &snapshot), "group 1 is the wide entry");
    CHECK(rb.size == 1 && entry_equal(&rb.heap[0], &snapshot), "entry unchanged");
    replay_entry_free(&snapshot);
    grpo_batch_free(&before);
    grpo_batch_free(&b);
    grpo_batch_free(&big);
    replay_buffer_free(&rb);
}

static void test_std_threshold(void) {
    /* isclose(sigma, 0) with atol 1e-8: 1e-9 has no variance, 1e-7 has; NaN (fewer than two
     * scorable rows) has none. The buffer starts empty, so the replacements also show TRL's
     * order: the group is added first, then drawn for the zero-std groups of the same batch. */
    ReplayBuffer rb;
    replay_buffer_init(&rb, 8);
    GrpoBatch b = new_batch(3, 2, 2, 2, false, false);
    for (int g = 0; g < 3; g++)
        set_simple_group(&b, g, g + 1, 1, 1);
    const float std[3] = {1e-9f, 1e-7f, NAN};
    ReplayStats st;
    CHECK(replay_buffer_update(&rb, &b, std, 1, 0, &st) == 0, "%s", err_msg());
    CHECK(st.num_added == 1 && rb.size == 1, "only the 1e-7 group stored: %d", rb.size);
    CHECK(st.num_replaced == 2, "the 1e-9 and NaN groups replaced: %d", st.num_replaced);
    CHECK(rb.size == 1 && group_is_entry(&b, 0, &rb.heap[0]) && group_is_entry(&b, 2, &rb.heap[0]),
          "by the one entry");
    grpo_batch_free(&b);
    replay_buffer_free(&rb);
}

static void test_errors(void) {
    ReplayBuffer rb;
    replay_buffer_init(&rb, 4);
    const float s[1] = {1};
    fill_buffer(&rb, s, 1, 2, 2, false, false);
    ReplayEntry snapshot;
    replay_entry_copy(&snapshot, &rb.heap[0]);
    const float std2[2] = {0, 1};

    /* the batch has old log-probs, the stored entry does not: refused, nothing changed */
    GrpoBatch b = new_batch(2, 2, 2, 2, true, false);
    set_simple_group(&b, 0, 1, 2, 2);
    set_simple_group(&b, 1, 2, 2, 2);
    GrpoBatch before = batch_copy(&b);
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0 && strstr(err_msg(), "old"),
          "missing old logps refused: %s", err_msg());
    CHECK(batch_equal(&b, &before) && rb.size == 1 && entry_equal(&rb.heap[0], &snapshot),
          "nothing changed");
    grpo_batch_free(&before);
    grpo_batch_free(&b);

    /* group size differs from the stored groups' */
    b = new_batch(1, 3, 2, 2, false, false);
    set_simple_group(&b, 0, 1, 2, 2);
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0 && strstr(err_msg(), "rows"),
          "group size mismatch refused: %s", err_msg());
    grpo_batch_free(&b);

    /* bad lengths, rows not a multiple of G, no std, non-finite advantages */
    b = new_batch(2, 2, 2, 2, false, false);
    set_simple_group(&b, 0, 1, 2, 2);
    set_simple_group(&b, 1, 2, 2, 2);
    before = batch_copy(&b);
    b.prompt_len[1] = 3;
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0 && strstr(err_msg(), "prompt_len"),
          "prompt_len > width refused: %s", err_msg());
    b.prompt_len[1] = 2;
    b.completion_len[2] = -1;
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0, "negative completion_len");
    b.completion_len[2] = 2;
    CHECK(replay_buffer_update(&rb, &b, NULL, 1, 0, NULL) != 0, "no std refused");
    b.advantages[3] = INFINITY;
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0 && strstr(err_msg(), "finite"),
          "infinite advantage refused: %s", err_msg());
    b.advantages[3] = before.advantages[3];
    b.n_rows = 3;
    CHECK(replay_buffer_update(&rb, &b, std2, 1, 0, NULL) != 0, "3 rows in groups of 2 refused");
    b.n_rows = 4;
    CHECK(batch_equal(&b, &before) && rb.size == 1 && entry_equal(&rb.heap[0], &snapshot),
          "nothing changed by refused updates");

    /* entries carrying log-probs the batch lacks: fine, the batch keeps none */
    ReplayBuffer rich;
    replay_buffer_init(&rich, 2);
    fill_buffer(&rich, s, 1, 2, 2, true, true);
    const float zero[2] = {0, 0};
    CHECK(replay_buffer_update(&rich, &b, zero, 1, 0, NULL) == 0, "%s", err_msg());
    CHECK(!b.old_logps && !b.ref_logps && group_is_entry(&b, 0, &rich.heap[0]),
          "replayed without log-probs");
    replay_buffer_free(&rich);
    grpo_batch_free(&before);
    grpo_batch_free(&b);
    replay_entry_free(&snapshot);
    replay_buffer_free(&rb);
}

/* ---- draws ---- */

static void test_sampling_proportional(void) {
    ReplayBuffer rb;
    replay_buffer_init(&rb, 8);
    const float s[4] = {1, 2, 3, 4};
    fill_buffer(&rb, s, 4, 1, 1, false, false);
    int count[4] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) {
        const ReplayEntry *e;
        CHECK(replay_buffer_sample(&rb, 1, 77, (uint64_t)i, &e) == 1, "one draw");
        count[e->counter]++;
    }
    for (int k = 0; k < 4; k++) {
        double p = (double)count[k] / N, want = s[k] / 10.0;
        /* the standard error is at most 0.0025: 0.012 is ~5 sigma */
        CHECK(fabs(p - want) < 0.012, "entry %d: frequency %.4f, want %.2f", k, p, want);
    }

    /* same (seed, index): same draws; other indices: not all the same */
    const ReplayEntry *a[3], *b[3];
    replay_buffer_sample(&rb, 3, 5, 11, a);
    replay_buffer_sample(&rb, 3, 5, 11, b);
    CHECK(a[0] == b[0] && a[1] == b[1] && a[2] == b[2], "draws are reproducible");
    int differ = 0;
    for (uint64_t i = 12; i < 22; i++) {
        replay_buffer_sample(&rb, 3, 5, i, b);
        differ += a[0] != b[0] || a[1] != b[1] || a[2] != b[2];
    }
    CHECK(differ > 0, "draw_index changes the draws");

    /* without replacement: each of 4 exactly once */
    const ReplayEntry *four[4];
    CHECK(replay_buffer_sample(&rb, 4, 1, 0, four) == 4, "four draws");
    int seen = 0;
    for (int k = 0; k < 4; k++)
        seen |= 1 << four[k]->counter;
    CHECK(seen == 15, "each entry once: mask %x", seen);
    CHECK(replay_buffer_sample(&rb, 0, 1, 0, four) == 0, "n = 0 draws nothing");
    replay_buffer_free(&rb);

    /* a zero score is never drawn while others can be; all zero: drawn alike, no failure */
    ReplayBuffer z;
    replay_buffer_init(&z, 4);
    double zs[3] = {0, 1, 0};
    for (int k = 0; k < 3; k++) {
        ReplayEntry e = scored_entry(zs[k]);
        replay_buffer_add(&z, &e);
    }
    const ReplayEntry *out[5];
    bool zero_drawn = false;
    for (uint64_t i = 0; i < 200; i++) {
        replay_buffer_sample(&z, 1, 3, i, out);
        zero_drawn |= out[0]->score == 0;
    }
    CHECK(!zero_drawn, "zero-score entries are not drawn");
    CHECK(replay_buffer_sample(&z, 2, 3, 0, out) == 2 && out[0]->score == 1 && out[1]->score == 1,
          "fewer weighted entries than draws: with replacement among them");
    replay_buffer_free(&z);
    replay_buffer_init(&z, 4);
    int hits[3] = {0};
    for (int k = 0; k < 3; k++) {
        ReplayEntry e = scored_entry(0);
        replay_buffer_add(&z, &e);
    }
    for (uint64_t i = 0; i < 300; i++) {
        replay_buffer_sample(&z, 1, 3, i, out);
        hits[out[0]->counter]++;
    }
    CHECK(hits[0] > 50 && hits[1] > 50 && hits[2] > 50, "all-zero scores drawn alike: %d %d %d",
          hits[0], hits[1], hits[2]);
    replay_buffer_free(&z);
}

/* ---- save / load ---- */

/* A buffer of mixed entries: some with old and ref log-probs, some with neither; one evicted. */
static void mixed_buffer(ReplayBuffer *rb, int capacity) {
    replay_buffer_init(rb, capacity);
    GrpoBatch a = new_batch(3, 2, 5, 6, true, true);
    const int pl[2] = {5, 2}, cl[2] = {1, 6};
    const float adv[2] = {0.75f, -0.5f};
    const bool masked[2] = {false, true};
    for (int g = 0; g < 3; g++)
        set_group(&a, g, 20 + g, pl, cl, adv, masked);
    const float sa[3] = {0.5f, 1.5f, 0.25f};
    CHECK(replay_buffer_update(rb, &a, sa, 1, 0, NULL) == 0, "%s", err_msg());
    GrpoBatch b = new_batch(2, 2, 3, 3, false, false);
    set_simple_group(&b, 0, 30, 3, 2);
    set_simple_group(&b, 1, 31, 1, 3);
    const float sb[2] = {2.0f, 0.75f};
    CHECK(replay_buffer_update(rb, &b, sb, 1, 1, NULL) == 0, "%s", err_msg());
    grpo_batch_free(&a);
    grpo_batch_free(&b);
}

static bool buffers_equal(const ReplayBuffer *a, const ReplayBuffer *b) {
    if (a->size != b->size || a->next_counter != b->next_counter) return false;
    for (int i = 0; i < a->size; i++) {
        const ReplayEntry *e = find_counter(b, a->heap[i].counter);
        if (!e || !entry_equal(&a->heap[i], e)) return false;
    }
    return true;
}

static void test_save_load_roundtrip(void) {
    ReplayBuffer rb, back;
    mixed_buffer(&rb, 4);
    CHECK(rb.size == 4 && rb.next_counter == 5, "4 of 5 kept: %d", rb.size);
    const char *path = harness_tmp_path("replay.safetensors");
    CHECK(replay_buffer_save(&rb, path) == 0, "%s", err_msg());
    replay_buffer_init(&back, 4);
    CHECK(replay_buffer_load(&back, path) == 0, "%s", err_msg());
    CHECK(buffers_equal(&rb, &back), "entries, scores, counters identical");
    CHECK(heap_ok(&back), "heap property after load");
    int with_old = 0;
    for (int i = 0; i < back.size; i++)
        with_old += back.heap[i].old_logps != NULL && back.heap[i].ref_logps != NULL;
    CHECK(with_old == 2, "per-entry log-probs kept: %d", with_old);

    /* the same draws, and the same batch after an update */
    const ReplayEntry *x[6], *y[6];
    for (uint64_t i = 0; i < 20; i++) {
        replay_buffer_sample(&rb, 6, 42, i, x);
        replay_buffer_sample(&back, 6, 42, i, y);
        bool same = true;
        for (int k = 0; k < 6; k++)
            same &= x[k]->counter == y[k]->counter;
        CHECK(same, "draw %llu identical", (unsigned long long)i);
    }
    GrpoBatch b1 = new_batch(3, 2, 2, 2, false, false);
    for (int g = 0; g < 3; g++)
        set_simple_group(&b1, g, 60 + g, 2, 2);
    GrpoBatch b2 = batch_copy(&b1);
    const float std[3] = {0, 3, 0};
    CHECK(replay_buffer_update(&rb, &b1, std, 8, 3, NULL) == 0, "%s", err_msg());
    CHECK(replay_buffer_update(&back, &b2, std, 8, 3, NULL) == 0, "%s", err_msg());
    CHECK(batch_equal(&b1, &b2), "updates give identical batches");
    CHECK(buffers_equal(&rb, &back), "and identical buffers");

    /* save -> load -> save is byte-identical */
    const char *again = harness_tmp_path("again.safetensors");
    CHECK(replay_buffer_save(&rb, path) == 0 && replay_buffer_save(&back, again) == 0, "%s",
          err_msg());
    CHECK(harness_same_file(path, again), "files identical");

    /* an empty buffer round-trips too */
    ReplayBuffer empty, empty_back;
    replay_buffer_init(&empty, 3);
    CHECK(replay_buffer_save(&empty, path) == 0, "%s", err_msg());
    replay_buffer_init(&empty_back, 3);
    CHECK(replay_buffer_load(&empty_back, path) == 0 && empty_back.size == 0, "%s", err_msg());
    replay_buffer_free(&empty);
    replay_buffer_free(&empty_back);

    grpo_batch_free(&b1);
    grpo_batch_free(&b2);
    replay_buffer_free(&rb);
    replay_buffer_free(&back);
}

static void test_load_capacity(void) {
    ReplayBuffer rb;
    mixed_buffer(&rb, 8); /* 5 entries, counters 0..4: scores 0.625 1.875 0.3125 2 0.75 */
    const char *path = harness_tmp_path("cap.safetensors");
    CHECK(replay_buffer_save(&rb, path) == 0, "%s", err_msg());

    ReplayBuffer small;
    replay_buffer_init(&small, 3);
    CHECK(replay_buffer_load(&small, path) == 0, "%s", err_msg());
    CHECK(small.size == 3 && find_counter(&small, 3) && find_counter(&small, 1) &&
              find_counter(&small, 4),
          "the top 3 (2, 1.5, 0.75) kept");
    CHECK(small.next_counter == 5 && heap_ok(&small) && small.heap[0].score == 0.75,
          "counter continues, heap[0] the minimum");
    replay_buffer_free(&small);

    ReplayBuffer big;
    replay_buffer_init(&big, 10);
    CHECK(replay_buffer_load(&big, path) == 0 && buffers_equal(&rb, &big),
          "a larger one keeps all");
    replay_buffer_free(&big);

    ReplayBuffer off;
    replay_buffer_init(&off, 0);
    CHECK(replay_buffer_load(&off, path) == 0 && off.size == 0, "a disabled one keeps none");
    replay_buffer_free(&off);
    replay_buffer_free(&rb);
}

/* Rewrites `src` as `dst` with tensor `name` changed by `mutate` (on a private copy of its
 * bytes), or dropped (mutate NULL, drop true), or with an extra tensor (name not in src). */
typedef void (*Mutate)(void *data, size_t nbytes);

static int rewrite(const char *src, const char *dst, const char *name, Mutate mutate, bool drop) {
    SafetensorsFile f;
    if (safetensors_open(&f, src) != 0) return -1;
    SafetensorsWriteTensor *t = calloc(f.n_tensors + 1, sizeof *t);
    void **copies = calloc(f.n_tensors + 1, sizeof *copies);
    size_t n = 0;
    bool found = false;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const SafetensorsTensor *s = &f.tensors[i];
        bool match = strcmp(s->name, name) == 0;
        found |= match;
        if (match && drop) continue;
        t[n] = (SafetensorsWriteTensor){s->name, s->dtype, s->ndim, {0}, s->data};
        memcpy(t[n].shape, s->shape, sizeof s->shape);
        if (match && mutate) {
            copies[n] = malloc(s->nbytes ? s->nbytes : 1);
            memcpy(copies[n], s->data, s->nbytes);
            mutate(copies[n], s->nbytes);
            t[n].data = copies[n];
        }
        n++;
    }
    static const int32_t extra = 1;
    if (!found) t[n++] = (SafetensorsWriteTensor){name, ST_I32, 1, {1}, &extra};
    int rc = safetensors_write(dst, t, n);
    for (size_t i = 0; i < n; i++)
        free(copies[i]);
    free(copies);
    free(t);
    safetensors_close(&f);
    return rc;
}

static void set_i64_2(void *d, size_t n) {
    int64_t v = 2;
    memcpy(d, &v, 8);
}
static void set_u64_0(void *d, size_t n) {
    memset(d, 0, 8);
}
static void dup_first_u64(void *d, size_t n) {
    memcpy((char *)d + 8, d, 8);
}
static void neg_first_i32(void *d, size_t n) {
    int32_t v = -1;
    memcpy(d, &v, 4);
}
static void inc_first_i32(void *d, size_t n) {
    int32_t v;
    memcpy(&v, d, 4);
    v++;
    memcpy(d, &v, 4);
}
static void last_u8_2(void *d, size_t n) {
    ((uint8_t *)d)[n - 1] = 2;
}
static void first_f64_neg(void *d, size_t n) {
    double v = -1;
    memcpy(d, &v, 8);
}
static void first_f64_nan(void *d, size_t n) {
    double v = NAN;
    memcpy(d, &v, 8);
}
static void first_f32_inf(void *d, size_t n) {
    float v = INFINITY;
    memcpy(d, &v, 4);
}
static void set_i64_1(void *d, size_t n) {
    int64_t v = 1;
    memcpy(d, &v, 8);
}

static void test_load_corrupt(void) {
    ReplayBuffer rb;
    mixed_buffer(&rb, 8);
    const char *good = harness_tmp_path("good.safetensors");
    CHECK(replay_buffer_save(&rb, good) == 0, "%s", err_msg());
    ReplayBuffer target;
    replay_buffer_init(&target, 8);
    const float s[1] = {9};
    fill_buffer(&target, s, 1, 1, 1, false, false);
    ReplayEntry snapshot;
    replay_entry_copy(&snapshot, &target.heap[0]);

    const char *bad = harness_tmp_path("bad.safetensors");
    /* a missing file */
    CHECK(replay_buffer_load(&target, harness_tmp_path("none.safetensors")) != 0 &&
              strstr(err_msg(), "none.safetensors"),
          "missing file named: %s", err_msg());

    /* truncations at every interesting length */
    char *data;
    size_t len;
    FILE *fp = fopen(good, "rb");
    fseek(fp, 0, SEEK_END);
    len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    data = malloc(len);
    CHECK(fread(data, 1, len, fp) == len, "read back");
    fclose(fp);
    const size_t cuts[] = {0, 5, 8, 9, 40, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        harness_write_file(bad, data, cuts[i]);
        CHECK(replay_buffer_load(&target, bad) != 0 && strstr(err_msg(), "bad.safetensors"),
              "truncated to %zu bytes: %s", cuts[i], err_msg());
    }
    /* garbage in the header */
    memcpy(data + 8, "[nonsense", 9);
    harness_write_file(bad, data, len);
    CHECK(replay_buffer_load(&target, bad) != 0, "garbage header: %s", err_msg());
    free(data);

    /* well-formed safetensors breaking the replay layout */
    struct {
        const char *tensor;
        Mutate mutate;
        bool drop;
        const char *says;
    } cases[] = {
        {"format_version", set_i64_2, false, "version"},
        {"next_counter", set_u64_0, false, "next_counter"},
        {"counters", dup_first_u64, false, "twice"},
        {"prompt_len", neg_first_i32, false, "negative"},
        {"prompt_len", inc_first_i32, false, "add up"},
        {"completion_len", inc_first_i32, false, "add up"},
        {"completion_mask", last_u8_2, false, "0 or 1"},
        {"has_logps", last_u8_2, false, "0 or 1"},
        {"has_logps", set_u64_0, false, "add up"},
        {"scores", first_f64_neg, false, "score"},
        {"scores", first_f64_nan, false, "score"},
        {"advantages", first_f32_inf, false, "advantage"},
        {"capacity", set_i64_1, false, "capacity"},
        {"group_size", set_i64_1, false, "shape"},
        {"ref_logps", NULL, true, "ref_logps"},
        {"surprise", NULL, false, "surprise"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(rewrite(good, bad, cases[i].tensor, cases[i].mutate, cases[i].drop) == 0, "%s",
              err_msg());
        int rc = replay_buffer_load(&target, bad);
        CHECK(rc != 0 && strstr(err_msg(), "bad.safetensors") && strstr(err_msg(), cases[i].says),
              "case %zu (%s): rc %d, error \"%s\" should say \"%s\"", i, cases[i].tensor, rc,
              err_msg(), cases[i].says);
    }
    /* a safetensors file of something else (a wrong dtype, the rest missing) */
    const int32_t one = 1;
    SafetensorsWriteTensor t[1] = {{"format_version", ST_I32, 1, {1}, &one}};
    CHECK(safetensors_write(bad, t, 1) == 0, "%s", err_msg());
    CHECK(replay_buffer_load(&target, bad) != 0 && strstr(err_msg(), "I32"),
          "a foreign file refused: %s", err_msg());

    CHECK(target.size == 1 && entry_equal(&target.heap[0], &snapshot) && target.next_counter == 1,
          "failed loads leave the buffer as it was");
    /* the untouched file still loads */
    CHECK(replay_buffer_load(&target, good) == 0 && buffers_equal(&rb, &target), "%s", err_msg());
    replay_entry_free(&snapshot);
    replay_buffer_free(&target);
    replay_buffer_free(&rb);
}

int main(void) {
    test_trl_capacity();
    test_topk_random();
    test_ties();
    test_empty_buffer();
    test_disabled();
    test_all_zero_std();
    test_mixed();
    test_shorter_entry_padded();
    test_wider_entry_widens();
    test_std_threshold();
    test_errors();
    test_sampling_proportional();
    test_save_load_roundtrip();
    test_load_capacity();
    test_load_corrupt();
    return harness_finish("test_replay_buffer");
}
