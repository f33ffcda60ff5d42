/* replay_buffer_update: one generation batch in (its groups with variance stored), the same batch
 * out (its groups without variance overwritten by stored ones), §6.4 steps 3-4. Everything that
 * can fail is checked before the buffer or the batch is touched. */
#include "common/error.h"
#include "grpo/replay_buffer.h"
#include "grpo/replay_buffer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool has_variance(float sigma) {
    return isfinite(sigma) && sigma > REPLAY_ZERO_STD_ATOL;
}

static int check_batch(const GrpoBatch *b, const float *group_std) {
    int G = b->group_size;
    if (G < 1 || b->n_rows < 0 || b->n_rows % G != 0)
        return err_set("replay buffer: batch of %d rows does not split into groups of %d",
                       b->n_rows, G);
    if (b->prompt_w < 0 || b->completion_w < 0)
        return err_set("replay buffer: negative batch width");
    if (b->n_rows > 0 && !group_std) return err_set("replay buffer: no group std given");
    for (int r = 0; r < b->n_rows; r++) {
        if (b->prompt_len[r] < 0 || b->prompt_len[r] > b->prompt_w)
            return err_set("replay buffer: row %d: prompt_len %d outside [0, %d]", r,
                           b->prompt_len[r], b->prompt_w);
        if (b->completion_len[r] < 0 || b->completion_len[r] > b->completion_w)
            return err_set("replay buffer: row %d: completion_len %d outside [0, %d]", r,
                           b->completion_len[r], b->completion_w);
    }
    return 0;
}

/* The buffer can serve this batch: same group size, and every log-prob array the batch carries
 * present in every entry (checked for all entries, not just drawn ones, so that a mismatch
 * fails on the first batch rather than on whichever draw happens to hit it). */
static int check_compatible(const ReplayBuffer *rb, const GrpoBatch *b) {
    for (int i = 0; i < rb->size; i++) {
        const ReplayEntry *e = &rb->heap[i];
        if (e->group_size != b->group_size)
            return err_set("replay buffer: stored groups have %d rows but the batch's have %d",
                           e->group_size, b->group_size);
        if ((b->old_logps && !e->old_logps) || (b->ref_logps && !e->ref_logps))
            return err_set("replay buffer: entry %llu was stored without %s log-probs, which "
                           "this batch has (a buffer from a run with another configuration?)",
                           (unsigned long long)e->counter,
                           b->old_logps && !e->old_logps ? "old" : "reference");
    }
    return 0;
}

static double group_score(const GrpoBatch *b, int g, float sigma) {
    double sum = 0;
    for (int i = 0; i < b->group_size; i++)
        sum += fabs((double)b->advantages[g * b->group_size + i]);
    return sum * (double)sigma;
}

/* A deep copy of group g's real tokens (invariant 3). */
static void entry_from_group(ReplayEntry *e, const GrpoBatch *b, int g, double score) {
    int G = b->group_size, r0 = g * G, pw = b->prompt_w, cw = b->completion_w;
    size_t np = 0, nc = 0;
    for (int i = 0; i < G; i++)
        np += (size_t)b->prompt_len[r0 + i], nc += (size_t)b->completion_len[r0 + i];
    *e = (ReplayEntry){.group_size = G, .score = score};
    e->prompt_len = xmalloc((size_t)G * sizeof(int));
    e->completion_len = xmalloc((size_t)G * sizeof(int));
    e->advantages = xmalloc((size_t)G * sizeof(float));
    e->prompt_ids = xmalloc(replay_nz(np) * sizeof(int32_t));
    e->completion_ids = xmalloc(replay_nz(nc) * sizeof(int32_t));
    e->completion_mask = xmalloc(replay_nz(nc));
    if (b->old_logps) e->old_logps = xmalloc(replay_nz(nc) * sizeof(float));
    if (b->ref_logps) e->ref_logps = xmalloc(replay_nz(nc) * sizeof(float));
    size_t po = 0, co = 0;
    for (int i = 0; i < G; i++) {
        size_t r = (size_t)(r0 + i);
        int pl = b->prompt_len[r], cl = b->completion_len[r];
        e->prompt_len[i] = pl, e->completion_len[i] = cl;
        e->advantages[i] = b->advantages[r];
        /* left-padded: the real prompt is the row's last pl columns */
        memcpy(e->prompt_ids + po, b->prompt_ids + r * (size_t)pw + (size_t)(pw - pl),
               (size_t)pl * sizeof(int32_t));
        memcpy(e->completion_ids + co, b->completion_ids + r * (size_t)cw,
               (size_t)cl * sizeof(int32_t));
        memcpy(e->completion_mask + co, b->completion_mask + r * (size_t)cw, (size_t)cl);
        if (b->old_logps)
            memcpy(e->old_logps + co, b->old_logps + r * (size_t)cw, (size_t)cl * sizeof(float));
        if (b->ref_logps)
            memcpy(e->ref_logps + co, b->ref_logps + r * (size_t)cw, (size_t)cl * sizeof(float));
        po += (size_t)pl, co += (size_t)cl;
    }
}

/* Prompt columns to new_pw: every row keeps its tokens right-aligned, new columns on the left
 * are padding. */
static void widen_prompts(GrpoBatch *b, int new_pw) {
    size_t rows = (size_t)b->n_rows, old = (size_t)b->prompt_w, w = (size_t)new_pw;
    int32_t *ids = xmalloc(replay_nz(rows * w) * sizeof *ids);
    uint8_t *mask = xcalloc(replay_nz(rows * w), 1);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < w - old; c++)
            ids[r * w + c] = b->pad_id;
        memcpy(ids + r * w + (w - old), b->prompt_ids + r * old, old * sizeof *ids);
        memcpy(mask + r * w + (w - old), b->prompt_mask + r * old, old);
    }
    free(b->prompt_ids), free(b->prompt_mask);
    b->prompt_ids = ids, b->prompt_mask = mask, b->prompt_w = new_pw;
}

static float *widen_floats(float *src, size_t rows, size_t old, size_t w) {
    if (!src) return NULL;
    float *dst = xcalloc(replay_nz(rows * w), sizeof *dst);
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * w, src + r * old, old * sizeof *dst);
    free(src);
    return dst;
}

/* Completion columns to new_cw: rows keep their tokens left-aligned, new columns on the right are
 * padding (id pad_id, mask 0, log-probs 0). */
static void widen_completions(GrpoBatch *b, int new_cw) {
    size_t rows = (size_t)b->n_rows, old = (size_t)b->completion_w, w = (size_t)new_cw;
    int32_t *ids = xmalloc(replay_nz(rows * w) * sizeof *ids);
    uint8_t *mask = xcalloc(replay_nz(rows * w), 1);
    for (size_t r = 0; r < rows; r++) {
        memcpy(ids + r * w, b->completion_ids + r * old, old * sizeof *ids);
        for (size_t c = old; c < w; c++)
            ids[r * w + c] = b->pad_id;
        memcpy(mask + r * w, b->completion_mask + r * old, old);
    }
    free(b->completion_ids), free(b->completion_mask);
    b->completion_ids = ids, b->completion_mask = mask;
    b->old_logps = widen_floats(b->old_logps, rows, old, w);
    b->ref_logps = widen_floats(b->ref_logps, rows, old, w);
    b->completion_w = new_cw;
}

/* Overwrites group g's rows with a padded copy of e (the batch is already wide enough). */
static void write_group(GrpoBatch *b, int g, const ReplayEntry *e) {
    size_t pw = (size_t)b->prompt_w, cw = (size_t)b->completion_w, po = 0, co = 0;
    for (int i = 0; i < b->group_size; i++) {
        size_t r = (size_t)(g * b->group_size + i), pl = (size_t)e->prompt_len[i],
               cl = (size_t)e->completion_len[i];
        int32_t *pid = b->prompt_ids + r * pw, *cid = b->completion_ids + r * cw;
        uint8_t *pm = b->prompt_mask + r * pw, *cm = b->completion_mask + r * cw;
        for (size_t c = 0; c < pw - pl; c++)
            pid[c] = b->pad_id;
        memset(pm, 0, pw - pl);
        memcpy(pid + (pw - pl), e->prompt_ids + po, pl * sizeof *pid);
        memset(pm + (pw - pl), 1, pl);
        memcpy(cid, e->completion_ids + co, cl * sizeof *cid);
        for (size_t c = cl; c < cw; c++)
            cid[c] = b->pad_id;
        memcpy(cm, e->completion_mask + co, cl);
        memset(cm + cl, 0, cw - cl);
        if (b->old_logps) {
            float *lp = b->old_logps + r * cw;
            memcpy(lp, e->old_logps + co, cl * sizeof *lp);
            memset(lp + cl, 0, (cw - cl) * sizeof *lp);
        }
        if (b->ref_logps) {
            float *lp = b->ref_logps + r * cw;
            memcpy(lp, e->ref_logps + co, cl * sizeof *lp);
            memset(lp + cl, 0, (cw - cl) * sizeof *lp);
        }
        b->prompt_len[r] = (int)pl, b->completion_len[r] = (int)cl;
        b->advantages[r] = e->advantages[i];
        po += pl, co += cl;
    }
}

/* Step 2 of the update: overwrite the n_zero groups listed in `zero` with draws. */
static int replace_groups(ReplayBuffer *rb, GrpoBatch *b, const int *zero, int n_zero,
                          uint64_t seed, uint64_t draw_index) {
    const ReplayEntry **drawn = xmalloc((size_t)n_zero * sizeof *drawn);
    int n = replay_buffer_sample(rb, n_zero, seed, draw_index, drawn);
    int pw = b->prompt_w, cw = b->completion_w;
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < drawn[k]->group_size; i++) {
            if (drawn[k]->prompt_len[i] > pw) pw = drawn[k]->prompt_len[i];
            if (drawn[k]->completion_len[i] > cw) cw = drawn[k]->completion_len[i];
        }
    }
    if (pw > b->prompt_w) widen_prompts(b, pw);
    if (cw > b->completion_w) widen_completions(b, cw);
    for (int k = 0; k < n; k++)
        write_group(b, zero[k], drawn[k]);
    free(drawn);
    return n;
}

int replay_buffer_update(ReplayBuffer *rb, GrpoBatch *b, const float *group_std, uint64_t seed,
                         uint64_t draw_index, ReplayStats *stats) {
    ReplayStats st = {0};
    if (rb->capacity <= 0) {
        if (stats) *stats = st;
        return 0;
    }
    if (check_batch(b, group_std) != 0 || check_compatible(rb, b) != 0) return -1;
    int n_groups = b->n_rows / b->group_size, n_zero = 0;
    for (int g = 0; g < n_groups; g++) {
        if (has_variance(group_std[g]) && !isfinite(group_score(b, g, group_std[g])))
            return err_set("replay buffer: group %d has non-finite advantages", g);
    }

    int *zero = xmalloc(replay_nz((size_t)n_groups) * sizeof *zero);
    for (int g = 0; g < n_groups; g++) {
        if (!has_variance(group_std[g])) {
            zero[n_zero++] = g;
            continue;
        }
        ReplayEntry e;
        entry_from_group(&e, b, g, group_score(b, g, group_std[g]));
        st.num_added += replay_buffer_add(rb, &e);
    }
    if (n_zero > 0) st.num_replaced = replace_groups(rb, b, zero, n_zero, seed, draw_index);
    free(zero);

    st.buffer_size = rb->size;
    for (int i = 0; i < rb->size; i++)
        st.mean_score += rb->heap[i].score;
    if (rb->size) st.mean_score /= rb->size;
    if (stats) *stats = st;
    return 0;
}
