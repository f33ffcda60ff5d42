/* The lm_head + log-softmax under bf16 autocast on gemm_bf16 (AMX where cpuid finds it): the
 * three products of fused_logprob.c (logits, dhidden, dW) with bf16 factors and fp32 sums, the
 * log-softmax and the logit gradients in fp32 as there (fused_logprob_rows.h).
 *
 * Rounding (backend_autocast.c's rule 4, and what torch does where the rule is silent):
 *  1. logits = bf16(hidden) · bf16(W)^T, fp32 sums, not rounded: log-probs stay fp32.
 *  2. dz, each logit's gradient, is rounded to bf16 before both backward products: torch's
 *     logits are a bf16 tensor, so the gradient reaching its lm_head is bf16 (the sgemm path,
 *     taken without a bf16 GEMM, rounds it too: fused_logprob_backward_bf16_dz). dhidden = bf16(dz)
 * · bf16(W) summed in fp32 over all vocabulary tiles (the caller rounds it); dW += bf16(dz)^T ·
 * bf16(hidden), fp32 sums not rounded, as autocast_linear_backward's dW.
 *
 * Layout of the work (invariants):
 *  1. The vocabulary is walked in tiles of VOCAB_BLOCK (a multiple of 32) columns, outermost; the
 *     rows in blocks of ROW_BLOCK (a multiple of 32) inside. A tile of W is packed (or viewed)
 *     once per pass, so a W stored in bf16 is packed tile by tile into a pooled buffer and never
 *     whole, as fused_logprob.c widens it.
 *  2. An fp32 W (the policy's), or a bf16 one declared frozen (gemm_bf16_keep_packed: a DPO
 *     reference's, forward layout only, packed once for the run), is packed whole, both layouts, in
 * gemm_bf16's cache (once per optimizer step, as the linears'); its tiles are views of that packing
 *     (bf16_packed_b_view). hidden is packed once per call, as A (rows) and, for dW, as B
 *     (depth = rows); row blocks are views of those.
 *  3. The fp32 logit tile (ROW_BLOCK x VOCAB_BLOCK) and the per-row accumulators are kept between
 *     calls (scratch_take / scratch_give): the lm_head runs several times per step, and fresh
 *     16 MB buffers cost a page fault per 4 KB each time. */
#include "common/error.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/fused_logprob_rows.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A DPO step scores 2 x 384 completion rows: in one row block each W tile is read once per pass
 * and each dW tile accumulated once. With 512-row blocks (main before 2026-11-29) the two blocks
 * of 512 and 256 rows each read the tile again and added to dW's 14.7 MB tile twice: the 0.5B
 * lm_head's backward took 0.72-0.92 s against 0.53-0.61 s in one block (the step's clocks, 2
 * threads). dW's sums differ in their last bits for more rows than one block (the depth split
 * there); every other output is the same per row whatever the blocks. */
#define ROW_BLOCK   1024
#define VOCAB_BLOCK 4096

/* ---- kept scratch (invariant 3) ---- */

typedef struct {
    float *tile;      /* ROW_BLOCK x VOCAB_BLOCK logits */
    RunningLse *acc;  /* per row */
    float *target_z;  /* per row: the target's finished logit */
    float *lse;       /* per row: the backward's log-sum-exp where none is handed over */
    float *widened;   /* VOCAB_BLOCK x h: a tile of an NF4 W dequantised, else NULL */
    size_t rows_cap;  /* acc, target_z and lse hold this many */
    size_t widen_cap; /* widened holds this many floats */
} Scratch;

static Scratch kept; /* valid while kept_full */
static bool kept_full;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* The kept scratch if no other call holds it, else a fresh one; grown to n rows and, if widen,
 * a VOCAB_BLOCK x h tile of floats. */
static Scratch scratch_take(size_t n, bool widen, int h) {
    Scratch s = {0};
    pthread_mutex_lock(&kept_lock);
    if (kept_full) s = kept, kept_full = false;
    pthread_mutex_unlock(&kept_lock);
    if (!s.tile) s.tile = xmalloc((size_t)ROW_BLOCK * VOCAB_BLOCK * sizeof *s.tile);
    if (s.rows_cap < n) {
        free(s.acc);
        free(s.target_z);
        free(s.lse);
        s.acc = xmalloc(n * sizeof *s.acc);
        s.target_z = xmalloc(n * sizeof *s.target_z);
        s.lse = xmalloc(n * sizeof *s.lse);
        s.rows_cap = n;
    }
    size_t want = widen ? (size_t)VOCAB_BLOCK * h : 0;
    if (s.widen_cap < want) {
        free(s.widened);
        s.widened = xmalloc(want * sizeof *s.widened);
        s.widen_cap = want;
    }
    return s;
}

/* Into the kept slot if it is empty, else freed (another call's scratch is kept). */
static void scratch_give(Scratch *s) {
    pthread_mutex_lock(&kept_lock);
    bool keep = !kept_full;
    if (keep) kept = *s, kept_full = true;
    pthread_mutex_unlock(&kept_lock);
    if (keep) return;
    free(s->tile);
    free(s->acc);
    free(s->target_z);
    free(s->lse);
    free(s->widened);
}

/* ---- tiles of W (invariants 1 and 2) ---- */

typedef struct {
    WeightRef w;
    int h, vocab;
    /* an fp32 W's cached packings (dx_all: backward only), copied: the cache's entries may move
     * when it grows, their data stays until the next optimizer step drops them */
    Bf16PackedB fwd_all, dx_all;
    Bf16PackedB fwd_own, dx_own; /* a bf16 or NF4 W's tile, packed here */
    float *widened;              /* scratch for an NF4 tile */
} LmHead;

static LmHead lm_head_open(WeightRef w, int h, int vocab, bool backward, float *widened) {
    LmHead l = {.w = w, .h = h, .vocab = vocab, .widened = widened};
    /* an fp32 W, or a bf16 one declared frozen (a DPO reference's, gemm_bf16_keep_packed) */
    if (w.f32 || gemm_bf16_weight_kept(w.bf16)) {
        const uint16_t *w16 = w.f32 ? NULL : w.bf16;
        l.fwd_all = *bf16_weight_packed(w.f32, w16, vocab, h, true);
        if (backward) l.dx_all = *bf16_weight_packed(w.f32, w16, vocab, h, false);
    }
    return l;
}

/* Vocabulary columns c0.. c0 + cols of W as the forward's B (W^T: depth h) and, if dx, as dX's
 * B (W: depth cols, h columns). Valid until the next call or lm_head_close. */
static void lm_head_tile(LmHead *l, int c0, int cols, bool dx, Bf16PackedB *fwd, Bf16PackedB *dxb) {
    int h = l->h;
    if (l->fwd_all.data) { /* packed whole in the cache */
        *fwd = bf16_packed_b_view(&l->fwd_all, 0, h, c0, cols);
        if (dx) *dxb = bf16_packed_b_view(&l->dx_all, c0, cols, 0, h);
        return;
    }
    bf16_packed_b_free(&l->fwd_own);
    bf16_packed_b_free(&l->dx_own);
    Bf16Source src = {.bf16 = l->w.bf16 ? l->w.bf16 + (size_t)c0 * h : NULL};
    if (!l->w.bf16) { /* NF4 (a QLoRA base): dequantised, then rounded by the packing */
        weight_rows_widen(l->widened, l->w, (size_t)c0, cols, h);
        src.f32 = l->widened;
    }
    /* the tile is W[c0.., :] row-major (cols x h); the forward's B is its transpose */
    src.row_stride = 1, src.col_stride = (size_t)h;
    bf16_pack_b(&l->fwd_own, src, h, cols);
    *fwd = l->fwd_own;
    if (dx) {
        src.row_stride = (size_t)h, src.col_stride = 1;
        bf16_pack_b(&l->dx_own, src, cols, h);
        *dxb = l->dx_own;
    }
}

static void lm_head_close(LmHead *l) {
    bf16_packed_b_free(&l->fwd_own);
    bf16_packed_b_free(&l->dx_own);
}

/* ---- the passes ---- */

/* Each row's running log-sum-exp (acc) and its target's finished logit (target_z) over the
 * whole vocabulary: one pass over W's tiles, with the statistics if stats. */
static void logsumexp_pass(Scratch *s, LmHead *l, const Bf16PackedA *hid, const int32_t *target,
                           int n, bool stats, LogitCap cap) {
    for (int r = 0; r < n; r++)
        s->acc[r] = (RunningLse){-INFINITY, 0.0, 0.0, 0.0, 0};
    for (int c0 = 0; c0 < l->vocab; c0 += VOCAB_BLOCK) {
        int cols = l->vocab - c0 < VOCAB_BLOCK ? l->vocab - c0 : VOCAB_BLOCK;
        Bf16PackedB wt;
        lm_head_tile(l, c0, cols, false, &wt, NULL);
        for (int r0 = 0; r0 < n; r0 += ROW_BLOCK) {
            int rows = n - r0 < ROW_BLOCK ? n - r0 : ROW_BLOCK;
            Bf16PackedA hb = bf16_packed_a_rows(hid, r0, rows);
            gemm_bf16(s->tile, (size_t)cols, false, &hb, &wt);
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *z = s->tile + (size_t)r * cols;
                if (cap_active(cap)) finish_logits(z, cols, cap);
                if (stats)
                    lse_update_stats(&s->acc[r0 + r], z, cols, c0);
                else
                    lse_update(&s->acc[r0 + r], z, cols);
                int t = target[r0 + r] - c0;
                if (t >= 0 && t < cols) s->target_z[r0 + r] = z[t];
            }
        }
    }
}

/* The rows x h matrix x (row-major) as a Bf16Source. */
static Bf16Source rows_source(const float *x, int h) {
    return (Bf16Source){.f32 = x, .row_stride = (size_t)h, .col_stride = 1};
}

/* autocast_logprob_forward, and each row's log-sum-exp into lse if not NULL: the value
 * autocast_logprob_backward's own first pass finds (the same products of the same packings, the
 * same running sums: lse_update_stats adds its exponentials as lse_update does). */
static void forward_rows(float *logp, LogitStats *stats, float *lse, const float *hidden,
                         const int32_t *target, WeightRef lm_head, int n, int h, int vocab,
                         LogitCap cap) {
    if (n == 0) return;
    Scratch s = scratch_take((size_t)n, !lm_head.f32 && !lm_head.bf16, h);
    LmHead l = lm_head_open(lm_head, h, vocab, false, s.widened);
    Bf16PackedA hid;
    bf16_pack_a(&hid, rows_source(hidden, h), n, h);
    logsumexp_pass(&s, &l, &hid, target, n, stats != NULL, cap);
    for (int r = 0; r < n; r++) {
        const RunningLse *a = &s.acc[r];
        double row_lse = a->max + log(a->sum);
        logp[r] = (float)((double)s.target_z[r] - row_lse);
        if (lse) lse[r] = (float)row_lse;
        if (stats) /* H = lse - sum p z = log(s) - sum p (z - m) */
            stats[r] = (LogitStats){(float)(a->zsum / vocab), (float)(log(a->sum) - a->ez / a->sum),
                                    a->argmax};
    }
    bf16_packed_a_free(&hid);
    lm_head_close(&l);
    scratch_give(&s);
}

void autocast_logprob_forward(float *logp, LogitStats *stats, const float *hidden,
                              const int32_t *target, WeightRef lm_head, int n, int h, int vocab,
                              LogitCap cap) {
    forward_rows(logp, stats, NULL, hidden, target, lm_head, n, h, vocab, cap);
}

void autocast_logprob_forward_lse(float *logp, LogitStats *stats, float *lse, const float *hidden,
                                  const int32_t *target, WeightRef lm_head, int n, int h,
                                  int vocab) {
    forward_rows(logp, stats, lse, hidden, target, lm_head, n, h, vocab, (LogitCap){0.0f, 1.0f});
}

/* The backward of both public variants. lse: each row's log-sum-exp from forward_rows of the
 * same rows (the hand-over), or NULL to find it here with a first pass over the vocabulary (one
 * logits product and its exponentials more). */
static void backward_rows(float *dhidden, float *dlm_head, const float *dlogp, const float *lse,
                          const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                          int h, int vocab, LogitCap cap) {
    if (n == 0) return;
    Scratch s = scratch_take((size_t)n, !lm_head.f32 && !lm_head.bf16, h);
    LmHead l = lm_head_open(lm_head, h, vocab, true, s.widened);
    Bf16PackedA hid;
    bf16_pack_a(&hid, rows_source(hidden, h), n, h);
    Bf16PackedB hid_b = {0}; /* hidden as dW's B: depth n, h columns */
    if (dlm_head) bf16_pack_b(&hid_b, rows_source(hidden, h), n, h);
    if (!lse) {
        logsumexp_pass(&s, &l, &hid, target, n, false, cap);
        for (int r = 0; r < n; r++)
            s.lse[r] = (float)(s.acc[r].max + log(s.acc[r].sum));
        lse = s.lse;
    }
    memset(dhidden, 0, (size_t)n * h * sizeof *dhidden);
    for (int c0 = 0; c0 < vocab; c0 += VOCAB_BLOCK) {
        int cols = vocab - c0 < VOCAB_BLOCK ? vocab - c0 : VOCAB_BLOCK;
        Bf16PackedB wt, w;
        lm_head_tile(&l, c0, cols, true, &wt, &w);
        for (int r0 = 0; r0 < n; r0 += ROW_BLOCK) {
            int rows = n - r0 < ROW_BLOCK ? n - r0 : ROW_BLOCK;
            Bf16PackedA hb = bf16_packed_a_rows(&hid, r0, rows);
            gemm_bf16(s.tile, (size_t)cols, false, &hb, &wt);
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++)
                logit_grads(s.tile + (size_t)r * cols, cols, dlogp[r0 + r], lse[r0 + r],
                            target[r0 + r] - c0, cap);
            /* dhidden rows += bf16(dz) · bf16(W tile): A = dz (rows x cols) */
            Bf16PackedA dz;
            bf16_pack_a(&dz, rows_source(s.tile, cols), rows, cols);
            gemm_bf16(dhidden + (size_t)r0 * h, (size_t)h, true, &dz, &w);
            if (dlm_head) { /* NULL: a frozen lm_head */
                /* dW tile += bf16(dz)^T · bf16(hidden rows): A = dz^T (cols x rows), from dz's
                 * packing (the same bits as from the fp32 tile, half the bytes read) */
                Bf16PackedA dzt;
                bf16_pack_a_transposed(&dzt, &dz);
                Bf16PackedB hv = bf16_packed_b_view(&hid_b, r0, rows, 0, h);
                gemm_bf16(dlm_head + (size_t)c0 * h, (size_t)h, true, &dzt, &hv);
                bf16_packed_a_free(&dzt);
            }
            bf16_packed_a_free(&dz);
        }
    }
    bf16_packed_b_free(&hid_b);
    bf16_packed_a_free(&hid);
    lm_head_close(&l);
    scratch_give(&s);
}

void autocast_logprob_backward(float *dhidden, float *dlm_head, const float *dlogp,
                               const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                               int h, int vocab, LogitCap cap) {
    backward_rows(dhidden, dlm_head, dlogp, NULL, hidden, target, lm_head, n, h, vocab, cap);
}

void autocast_logprob_backward_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                   const float *lse, const float *hidden, const int32_t *target,
                                   WeightRef lm_head, int n, int h, int vocab) {
    backward_rows(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n, h, vocab,
                  (LogitCap){0.0f, 1.0f});
}
