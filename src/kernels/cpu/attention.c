#include "kernels/cpu/kernels.h"

#include "common/error.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/attention_products.h"
#include "kernels/cpu/attention_train.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/lane_sum.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Query rows are processed in blocks; a block only meets the keys some row of it can see
 * (causal: up to its last row; window: from its first row's window start), which skips the
 * upper triangle and, with a sliding window, everything before the window. */
#define QUERY_BLOCK 64
_Static_assert(QUERY_BLOCK % ATTN_PACK_STEP == 0, "a packed block's rows are whole steps");

static int pack_stride(int n_keys) {
    return (n_keys + ATTN_PACK_STEP - 1) / ATTN_PACK_STEP * ATTN_PACK_STEP;
}

/* f's bf16 bits, rounded as gemm_bf16 packs (nearest, ties to even): gemm_bf16_round's. */
static inline uint16_t to_bf16(float f) {
    float r = gemm_bf16_round(f);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

/* A packed row (ATTN_PACK_STEP's layout) from columns 0..n - 1 of an fp32 row, zeros to stride. */
static void pack_row(uint16_t *dst, const float *row, int n, int stride) {
#pragma omp simd
    for (int j = 0; j < n; j++)
        dst[j] = to_bf16(row[j]);
    memset(dst + n, 0, (size_t)(stride - n) * sizeof *dst);
}

/* The keys one block of queries meets, as its score columns hold them: first the prefix rows
 * a_row.., then the segment's own rows b_row... Column j is key `first` + j. */
typedef struct {
    int first;        /* the block's first key (prefix first, then own rows) */
    int n_keys;       /* columns */
    int a_row, a_len; /* prefix piece */
    int b_row, b_len; /* own piece */
    int diag;         /* query row r of the block sees columns up to r + diag (its own key) */
} BlockKeys;

/* The row holding key c of segment s. */
static int key_row(const AttnSegment *s, int c) {
    return c < s->prefix_len ? s->prefix_start + c : s->start + (c - s->prefix_len);
}

/* The first key of s that query row `row` sees under the window (0 without one). Keys' seq_index
 * increases along the key order, so the window's start is found by bisection. */
static int window_first_key(const AttnSegment *s, const int32_t *seq_index, int row, int n_keys,
                            int window) {
    if (window <= 0) return 0;
    int lo = 0, hi = n_keys; /* the first key with seq_index > seq_index[row] - window */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (seq_index[key_row(s, mid)] > seq_index[row] - window)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* key_align: the first key rounded down to a multiple of it (prepacked panels start there); the
 * keys so added lie before every row's window, so the softmax gives them 0. */
static BlockKeys block_keys(const AttnSegment *s, const int32_t *seq_index, int i0, int rows,
                            int window, int key_align) {
    BlockKeys bk;
    int end = s->prefix_len + i0 + rows; /* one past the last row's own key */
    bk.first = window_first_key(s, seq_index, s->start + i0, end, window) / key_align * key_align;
    bk.n_keys = end - bk.first;
    bk.a_len = bk.first < s->prefix_len ? s->prefix_len - bk.first : 0;
    bk.a_row = s->prefix_start + bk.first;
    int own_first = bk.first > s->prefix_len ? bk.first - s->prefix_len : 0;
    bk.b_row = s->start + own_first;
    bk.b_len = bk.n_keys - bk.a_len;
    bk.diag = s->prefix_len + i0 - bk.first;
    return bk;
}

/* Softmax of one score row over columns lo..hi (the keys the query sees); the other columns get
 * probability 0 (transformers adds the dtype's minimum, which underflows to exactly 0). The
 * exponentials are fast_expf's, vectorised (relative error below 3e-7, as libm's expf), and so
 * is the maximum (a scalar compare chain was half of the softmax's time). Returns 1 / the sum of
 * the exponentials; with `normalise` false the row keeps the exponentials unscaled (the forward
 * scales its output row instead: hd products where the row has up to n). With `packed` (not
 * NULL, normalise true) the normalising pass writes the probabilities there instead, rounded
 * (ATTN_PACK_STEP's layout, stride values): the bits bf16_pack_a gives the fp32 row normalised,
 * without that row being stored and read again; the fp32 row is then left as it is outside
 * lo..hi (nothing reads it). Without `packed`, the columns past hi must hold 0 already
 * (ATTN_CAUSAL_OUTPUT's zeros, which soft-capping keeps) and are not written again.
 *
 * The last len % LANE_SUM_WIDTH columns (len = hi - lo + 1) run as one more vector over the
 * row's last LANE_SUM_WIDTH columns where the row has that many: the maximum reads some columns
 * twice (exact in any order); the exponentials of the columns the whole groups did are dropped,
 * so every column's exponential and the lanes' sums are what the scalar tail gave (one
 * fast_expf, no contraction in C11 mode: the same bits in a vector lane as scalar). The scalar
 * tail (up to 15 fast_expf and a compare chain) was a fifth of the softmax's time (perf). */
static float softmax_columns(float *row, int lo, int hi, bool normalise, uint16_t *packed,
                             int stride) {
    enum { W = LANE_SUM_WIDTH };
    int len = hi + 1 - lo, full = lo + len / W * W, rem = hi + 1 - full;
    const float *tail = len >= W ? row + hi + 1 - W : NULL; /* the row's last W columns */
    /* the maximum per lane, then the lanes halved (omp simd's max reduction went through a
     * 16-step scalar compare chain after each loop) */
    float lane_max[W];
    for (int l = 0; l < W; l++)
        lane_max[l] = -INFINITY;
    for (int j = lo; j < full; j += W)
#pragma omp simd
        for (int l = 0; l < W; l++)
            lane_max[l] = row[j + l] > lane_max[l] ? row[j + l] : lane_max[l];
    if (tail)
#pragma omp simd
        for (int l = 0; l < W; l++)
            lane_max[l] = tail[l] > lane_max[l] ? tail[l] : lane_max[l];
    else
        for (int j = full; j <= hi; j++)
            lane_max[0] = row[j] > lane_max[0] ? row[j] : lane_max[0];
    for (int w = W / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane_max[l] = lane_max[l + w] > lane_max[l] ? lane_max[l + w] : lane_max[l];
    float max = lane_max[0];
    if (!packed)
        for (int j = 0; j < lo; j++)
            row[j] = 0.0f;
    /* the tail's exponentials first, from the scores the whole groups are about to overwrite */
    float tail_exp[W];
    if (tail && rem > 0)
#pragma omp simd
        for (int l = 0; l < W; l++)
            tail_exp[l] = fast_expf(tail[l] - max);
    /* the sum in lane_sum.h's order: the same bits in every build */
    float lane[W] = {0};
    for (int j = lo; j < full; j += W)
#pragma omp simd
        for (int l = 0; l < W; l++) {
            float e = fast_expf(row[j + l] - max);
            row[j + l] = e;
            lane[l] += e;
        }
    for (int l = 0; l < rem; l++) {
        float e = tail ? tail_exp[W - rem + l] : fast_expf(row[full + l] - max);
        row[full + l] = e;
        lane[l] += e;
    }
    float inv = 1.0f / lane_sum_total(lane);
    if (packed) {
        memset(packed, 0, (size_t)lo * sizeof *packed);
#pragma omp simd
        for (int c = lo; c <= hi; c++)
            packed[c] = to_bf16(row[c] * inv);
        memset(packed + hi + 1, 0, (size_t)(stride - hi - 1) * sizeof *packed);
    } else if (normalise) {
#pragma omp simd
        for (int c = lo; c <= hi; c++)
            row[c] *= inv;
    }
    return inv;
}

/* Each (segment, kv head)'s keys or values in the segment's key order (key c in row
 * key_row(s, c)), laid out as the products read them: rows (n_keys, hd), or transposed
 * (hd, n_keys), the right operand of X · R^T. A query block's keys are the columns first..first +
 * n_keys - 1 of its segment's panel, so each is gathered once per call, for all the blocks and
 * the n_rep query heads that read it (per block and head, the gathering took 12% of the time).
 * Where the kernel packs its panels (kern->pack_panel), a transposed panel's fp32 copy holds the
 * keys' rows all the same, and its packing reads them transposed (the word-by-word transposing
 * gather was 4.5% of the AMX attention's samples, perf): its PanelRef has no fp32 view. */
typedef struct {
    float *base;
    size_t *at; /* (n_segs * n_kv_heads + 1): where panel (si, kvh) starts */
    int n_kv_heads, n_panels;
    bool transposed;
    const AttnKernel *kern;
    void **packed; /* kern->pack_panel's packing of each panel, or NULL */
} KeyPanels;

static void key_panels_build(KeyPanels *kp, const float *x, bool transposed,
                             const AttnSegment *segs, int n_segs, int n_kv_heads, int hd,
                             const AttnKernel *kern) {
    int n_panels = n_segs * n_kv_heads, kv_stride = n_kv_heads * hd;
    kp->at = xmalloc((size_t)(n_panels + 1) * sizeof *kp->at);
    kp->at[0] = 0;
    for (int i = 0; i < n_panels; i++) {
        const AttnSegment *s = &segs[i / n_kv_heads];
        kp->at[i + 1] = kp->at[i] + (size_t)(s->prefix_len + s->len) * hd;
    }
    kp->base = xmalloc((kp->at[n_panels] + 1) * sizeof(float));
    kp->n_kv_heads = n_kv_heads, kp->n_panels = n_panels;
    kp->transposed = transposed;
    kp->kern = kern;
    kp->packed = kern->pack_panel ? xcalloc((size_t)n_panels, sizeof *kp->packed) : NULL;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n_panels; i++) {
        const AttnSegment *s = &segs[i / n_kv_heads];
        const float *xh = x + (size_t)(i % n_kv_heads) * hd;
        float *dst = kp->base + kp->at[i];
        int n = s->prefix_len + s->len;
        /* 16 keys at a time: the transposed stores are runs of 16 floats */
        for (int c0 = 0; c0 < n; c0 += 16) {
            int cn = n - c0 < 16 ? n - c0 : 16;
            const float *src[16];
            for (int c = 0; c < cn; c++)
                src[c] = xh + (size_t)key_row(s, c0 + c) * kv_stride;
            if (!transposed || kp->packed) {
                for (int c = 0; c < cn; c++)
                    memcpy(dst + (size_t)(c0 + c) * hd, src[c], (size_t)hd * sizeof(float));
                continue;
            }
            for (int d = 0; d < hd; d++)
                for (int c = 0; c < cn; c++)
                    dst[(size_t)d * n + c0 + c] = src[c][d];
        }
        if (kp->packed) /* B of X · R^T (depth hd, a column per key), or of P · V (a key per row) */
            kp->packed[i] = transposed ? kern->pack_panel(dst, hd, n, 1, (size_t)hd)
                                       : kern->pack_panel(dst, n, hd, (size_t)hd, 1);
    }
}

/* A product's B read from a key panel: fp32 from key `first` on (leading dimension ld), and the
 * panel's packing (NULL: none) with that key. */
typedef struct {
    const float *f32;
    int ld;
    const void *packed;
    int first;
} PanelRef;

/* Panel (si, kvh) from key `first` on; ld is the segment's key count when transposed, hd for
 * rows. */
static PanelRef key_panel(const KeyPanels *kp, const AttnSegment *segs, int si, int kvh, int first,
                          int hd) {
    int i = si * kp->n_kv_heads + kvh;
    const float *p = kp->base + kp->at[i];
    const float *f32 = kp->transposed ? p + first : p + (size_t)first * hd;
    if (kp->transposed && kp->packed) f32 = NULL; /* the rows: only the packing is transposed */
    PanelRef r = {f32, kp->transposed ? segs[si].prefix_len + segs[si].len : hd,
                  kp->packed ? kp->packed[i] : NULL, first};
    return r;
}

static void key_panels_free(KeyPanels *kp) {
    for (int i = 0; kp->packed && i < kp->n_panels; i++)
        kp->kern->free_panel(kp->packed[i]);
    free(kp->packed);
    free(kp->base);
    free(kp->at);
}

/* out (rows, n_keys) = alpha X · R^T, with rt = R^T (hd, n_keys), a transposed panel (keys, or
 * values for dP); X (rows, hd) the block's query-side rows. Entries past a row's own key are 0
 * (each query's masked keys: neither its softmax nor dS reads them). */
static void times_key_rows(const AttnKernel *kern, float *out, const float *x, int x_stride,
                           PanelRef rt, int hd, const BlockKeys *bk, int rows, float alpha) {
    if (rt.packed)
        kern->panel_product(rows, bk->n_keys, hd, alpha, x, x_stride, rt.packed, 0, rt.first, out,
                            bk->n_keys, ATTN_CAUSAL_OUTPUT, bk->diag);
    else
        kern->product(false, rows, bk->n_keys, hd, alpha, x, x_stride, rt.f32, rt.ld, 0.0f, out,
                      bk->n_keys, ATTN_CAUSAL_OUTPUT, bk->diag);
}

/* Soft-capping of a block's scores, in place: t = tanh(s / cap), s = cap t (Gemma 2, as
 * transformers' eager attention: divide, tanh, multiply). */
static void cap_scores(float *p, size_t n, float cap) {
    for (size_t i = 0; i < n; i++)
        p[i] = tanhf(p[i] / cap) * cap;
}

/* The probabilities of a query block: scores against the block's keys (kt: their transposed
 * panel from the block's first key), soft-capped when sc.softcap > 0, then
 * a softmax per row over the keys it sees. qh points at head h's column of row 0. With inv_sum
 * NULL the rows are probabilities; otherwise they are left unnormalised and inv_sum[r] receives
 * row r's 1 / sum (softmax_columns). With `packed` (inv_sum NULL) the probabilities go there
 * packed (softmax_columns), p keeping the scores' exponentials. */
static void block_probs(const AttnKernel *kern, float *p, float *inv_sum, uint16_t *packed,
                        const float *qh, int q_stride, PanelRef kt, int hd, const AttnSegment *s,
                        const int32_t *seq_index, const BlockKeys *bk, int i0, int rows,
                        AttnScores sc, int window) {
    times_key_rows(kern, p, qh + (size_t)(s->start + i0) * q_stride, q_stride, kt, hd, bk, rows,
                   sc.scale);
    if (sc.softcap > 0) cap_scores(p, (size_t)rows * bk->n_keys, sc.softcap);
    int lo = 0;
    for (int r = 0; r < rows; r++) {
        if (window > 0) /* the window's start only moves forward as the query does */
            while (seq_index[key_row(s, bk->first + lo)] <= seq_index[s->start + i0 + r] - window)
                lo++;
        int stride = pack_stride(bk->n_keys);
        float *row = p + (size_t)r * bk->n_keys;
        uint16_t *packed_row = packed ? packed + (size_t)r * stride : NULL;
        float inv = kern->softmax ? kern->softmax(row, lo, r + bk->diag, packed_row, stride)
                                  : softmax_columns(row, lo, r + bk->diag, inv_sum == NULL,
                                                    packed_row, stride);
        if (inv_sum) inv_sum[r] = inv;
    }
}

/* out (rows, hd) = alpha P · V, vr (n_keys, hd) the block's values (or keys, for dQ): a rows
 * panel from the block's first key. P's entries past each row's own key are 0 and skipped. P is
 * read packed where `packed` is not NULL (kern->packed_product's), else from p. */
static void probs_times_values(const AttnKernel *kern, float *out, int out_stride, const float *p,
                               const uint16_t *packed, PanelRef vr, int hd, const BlockKeys *bk,
                               int rows, float alpha) {
    if (packed)
        kern->packed_product(rows, hd, bk->n_keys, alpha, packed, pack_stride(bk->n_keys),
                             vr.packed, vr.first, 0, out, out_stride, ATTN_CAUSAL_DEPTH, bk->diag);
    else if (vr.packed)
        kern->panel_product(rows, hd, bk->n_keys, alpha, p, bk->n_keys, vr.packed, vr.first, 0, out,
                            out_stride, ATTN_CAUSAL_DEPTH, bk->diag);
    else
        kern->product(false, rows, hd, bk->n_keys, alpha, p, bk->n_keys, vr.f32, vr.ld, 0.0f, out,
                      out_stride, ATTN_CAUSAL_DEPTH, bk->diag);
}

const AttnKernel attention_kernel_fp32 = {
    attention_product, false, 1, NULL, NULL, NULL, NULL, false, NULL};

static int max_keys(const AttnSegment *segs, int n_segs) {
    int most = 1;
    for (int s = 0; s < n_segs; s++)
        if (segs[s].prefix_len + segs[s].len > most) most = segs[s].prefix_len + segs[s].len;
    return most;
}

/* Each thread's packed block (QUERY_BLOCK rows of the longest key range), where kern packs P and
 * dS itself (zeroed: rows past a block's last are read, invariant of ATTN_PACK_STEP); else NULL. */
static uint16_t *packed_blocks(const AttnKernel *kern, const AttnSegment *segs, int n_segs,
                               size_t *each) {
    *each = (size_t)QUERY_BLOCK * pack_stride(max_keys(segs, n_segs));
    if (!kern->packed_product) return NULL;
    return xcalloc(*each * (size_t)omp_get_max_threads(), sizeof(uint16_t));
}

static int max_blocks(const AttnSegment *segs, int n_segs) {
    int most = 0;
    for (int s = 0; s < n_segs; s++) {
        int blocks = (segs[s].len + QUERY_BLOCK - 1) / QUERY_BLOCK;
        most = blocks > most ? blocks : most;
    }
    return most;
}

void attention_forward(float *out, const float *q, const float *k, const float *v,
                       const AttnSegment *segs, int n_segs, const int32_t *seq_index, int n_heads,
                       int n_kv_heads, int hd, int window) {
    AttnScores sc = {1.0f / sqrtf((float)hd), 0.0f};
    attention_forward_scored(out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads, hd, window,
                             sc);
}

void attention_forward_scored(float *out, const float *q, const float *k, const float *v,
                              const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                              int n_heads, int n_kv_heads, int hd, int window, AttnScores sc) {
    attention_forward_with(&attention_kernel_fp32, out, q, k, v, segs, n_segs, seq_index, n_heads,
                           n_kv_heads, hd, window, sc);
}

void attention_forward_with(const AttnKernel *kern, float *out, const float *q, const float *k,
                            const float *v, const AttnSegment *segs, int n_segs,
                            const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                            int window, AttnScores sc) {
    /* a kernel's own softmax normalises its rows (attention_train.h): the output is not scaled */
    if (kern->softmax && !kern->normalise_first) abort();
    int n_rep = n_heads / n_kv_heads, q_stride = n_heads * hd;
    size_t scratch = (size_t)QUERY_BLOCK * max_keys(segs, n_segs);
    float *scores_all = xmalloc(scratch * sizeof(float) * (size_t)omp_get_max_threads());
    int n_blocks = max_blocks(segs, n_segs);
    size_t packed_each;
    uint16_t *packed_all = packed_blocks(kern, segs, n_segs, &packed_each);
    KeyPanels kt, vr;
    key_panels_build(&kt, k, true, segs, n_segs, n_kv_heads, hd, kern);
    key_panels_build(&vr, v, false, segs, n_segs, n_kv_heads, hd, kern);

    /* One (segment, head, query block) per task. */
#pragma omp parallel for schedule(dynamic) collapse(3)
    for (int si = 0; si < n_segs; si++) {
        for (int h = 0; h < n_heads; h++) {
            for (int blk = 0; blk < n_blocks; blk++) {
                const AttnSegment *s = &segs[si];
                int i0 = blk * QUERY_BLOCK;
                if (i0 >= s->len) continue;
                int rows = s->len - i0 < QUERY_BLOCK ? s->len - i0 : QUERY_BLOCK;
                float *p = scores_all + scratch * (size_t)omp_get_thread_num();
                BlockKeys bk = block_keys(s, seq_index, i0, rows, window, kern->key_align);
                PanelRef kp = key_panel(&kt, segs, si, h / n_rep, bk.first, hd);
                PanelRef vp = key_panel(&vr, segs, si, h / n_rep, bk.first, hd);
                float inv_sum[QUERY_BLOCK];
                bool first = kern->normalise_first;
                uint16_t *packed =
                    packed_all ? packed_all + packed_each * (size_t)omp_get_thread_num() : NULL;
                block_probs(kern, p, first ? NULL : inv_sum, packed, q + (size_t)h * hd, q_stride,
                            kp, hd, s, seq_index, &bk, i0, rows, sc, window);
                float *o = out + (size_t)(s->start + i0) * q_stride + (size_t)h * hd;
                probs_times_values(kern, o, q_stride, p, packed, vp, hd, &bk, rows, 1.0f);
                for (int r = 0; r < rows && !first; r++) { /* else P was normalised */
                    float *orow = o + (size_t)r * q_stride;
#pragma omp simd
                    for (int d = 0; d < hd; d++)
                        orow[d] *= inv_sum[r];
                }
            }
        }
    }
    key_panels_free(&kt);
    key_panels_free(&vr);
    free(packed_all);
    free(scores_all);
}

/* dS = P ⊙ (dP - rowsum(dP ⊙ P)) in place of dP, row by row; the row sum in double, both loops
 * vectorised. With `packed` (not NULL) dS also goes there packed (ATTN_PACK_STEP's layout) by the
 * same pass. */
static void softmax_backward_rows(float *dp, const float *p, int rows, int n, uint16_t *packed) {
    int stride = pack_stride(n);
    for (int r = 0; r < rows; r++) {
        const float *pr = p + (size_t)r * n;
        float *dr = dp + (size_t)r * n;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int l = 0; l < n; l++)
            sum += (double)dr[l] * pr[l];
        float rowsum = (float)sum;
        if (!packed) {
#pragma omp simd
            for (int l = 0; l < n; l++)
                dr[l] = pr[l] * (dr[l] - rowsum);
            continue;
        }
        uint16_t *pk = packed + (size_t)r * stride;
#pragma omp simd
        for (int l = 0; l < n; l++) {
            float ds = pr[l] * (dr[l] - rowsum);
            dr[l] = ds;
            pk[l] = to_bf16(ds);
        }
        memset(pk + n, 0, (size_t)(stride - n) * sizeof *pk);
    }
}

/* dK or dV of both key pieces += M^T X (M: rows x n_keys, X: rows x hd); the prefix piece goes to
 * `prefix_acc` (the segment's own accumulator of its prefix rows, indexed by prefix key). M's
 * entries past each query's own key are 0 and skipped. */
static void keys_accumulate(const AttnKernel *kern, float *d_own, float *prefix_acc, int acc_stride,
                            int kv_stride, const float *mat, const float *x, int x_stride, int hd,
                            const BlockKeys *bk, int rows, float alpha) {
    if (bk->a_len > 0)
        kern->product(true, bk->a_len, hd, rows, alpha, mat, bk->n_keys, x, x_stride, 1.0f,
                      prefix_acc + (size_t)bk->first * acc_stride, acc_stride, ATTN_CAUSAL_DEPTH,
                      bk->diag);
    kern->product(true, bk->b_len, hd, rows, alpha, mat + bk->a_len, bk->n_keys, x, x_stride, 1.0f,
                  d_own + (size_t)bk->b_row * kv_stride, kv_stride, ATTN_CAUSAL_DEPTH,
                  bk->diag - bk->a_len);
}

/* Per query block of segment s, head h, with P the block's probabilities (recomputed), dO its
 * output gradient: dV += P^T dO, dP = dO V^T, dS = P ⊙ (dP - rowsum(dP ⊙ P)), dQ = scale dS K,
 * dK += scale dS^T Q. With soft-capping, dS is taken back through the cap first:
 * d(s)/d(scale q·k) = 1 - tanh², from the uncapped scores recomputed into `raw`. The keys and
 * values come from KeyPanels: kt and vt transposed, kr rows. */
typedef struct {
    KeyPanels kt, vt, kr;
    const AttnSegment *segs;
} BackwardPanels;

typedef struct {
    const AttnKernel *kern;
    float *dq, *dk, *dv;
    const float *dout, *q, *k, *v;
    const int32_t *seq_index;
    int q_stride, kv_stride, hd, window;
    AttnScores sc;
} AttentionGrads;

/* A thread's transposed key-side sums for one (segment, kv head) where g->kern->keys_transposed:
 * dV^T and dK^T (hd x ld each, a column per key of the segment in its key order, prefix first). */
typedef struct {
    float *dvt, *dkt;
    int ld;
} KeySums;

/* ks with its first n_keys columns of dV^T and dK^T zeroed (the columns a segment's blocks add
 * to). */
static KeySums *key_sums_zero(KeySums *ks, int hd, int n_keys) {
    for (int d = 0; d < hd; d++) {
        memset(ks->dvt + (size_t)d * ks->ld, 0, (size_t)n_keys * sizeof(float));
        memset(ks->dkt + (size_t)d * ks->ld, 0, (size_t)n_keys * sizeof(float));
    }
    return ks;
}

/* A segment's finished transposed sums added to its keys: the prefix's to its own accumulators
 * pdk, pdv (prefix_len x hd, zero), the own keys' to dk, dv (a kv head's column of rows kv_stride
 * apart, zero): each value added to its zero once, as block-by-block adding gave it (0 + x). */
static void key_sums_add(const KeySums *ks, const AttnSegment *s, int hd, float *dk, float *dv,
                         int kv_stride, float *pdk, float *pdv) {
    for (int c = 0; c < s->prefix_len + s->len; c++) {
        bool prefix = c < s->prefix_len;
        size_t row = prefix ? 0 : (size_t)(s->start + c - s->prefix_len) * kv_stride;
        float *dkr = prefix ? pdk + (size_t)c * hd : dk + row;
        float *dvr = prefix ? pdv + (size_t)c * hd : dv + row;
        for (int d = 0; d < hd; d++) {
            dkr[d] += ks->dkt[(size_t)d * ks->ld + c];
            dvr[d] += ks->dvt[(size_t)d * ks->ld + c];
        }
    }
}

/* packed: this thread's packed block where g->kern packs dS itself (packed_blocks), else NULL.
 * ks: this thread's KeySums where g->kern->keys_transposed, else NULL (dK and dV rows added to
 * block by block, the prefix's to pdk and pdv). */
static void block_backward(const AttentionGrads *g, const BackwardPanels *pan, int si, int h,
                           int kvh, int i0, int rows, float *probs, float *dprobs, float *raw,
                           uint16_t *packed, float *pdk, float *pdv, const KeySums *ks) {
    int hd = g->hd, qs = g->q_stride, kvs = g->kv_stride;
    const AttnSegment *s = &pan->segs[si];
    BlockKeys bk = block_keys(s, g->seq_index, i0, rows, g->window, g->kern->key_align);
    PanelRef kt = key_panel(&pan->kt, pan->segs, si, kvh, bk.first, hd);
    PanelRef vt = key_panel(&pan->vt, pan->segs, si, kvh, bk.first, hd);
    PanelRef kr = key_panel(&pan->kr, pan->segs, si, kvh, bk.first, hd);
    block_probs(g->kern, probs, NULL, NULL, g->q + (size_t)h * hd, qs, kt, hd, s, g->seq_index, &bk,
                i0, rows, g->sc, g->window);
    size_t q_off = (size_t)(s->start + i0) * qs + (size_t)h * hd;
    if (ks) { /* dV^T += dO^T P */
        g->kern->product(true, hd, bk.n_keys, rows, 1.0f, g->dout + q_off, qs, probs, bk.n_keys,
                         1.0f, ks->dvt + bk.first, ks->ld, ATTN_DENSE, 0);
    } else {
        keys_accumulate(g->kern, g->dv + (size_t)kvh * hd, pdv, hd, kvs, probs, g->dout + q_off, qs,
                        hd, &bk, rows, 1.0f);
    }
    times_key_rows(g->kern, dprobs, g->dout + q_off, qs, vt, hd, &bk, rows, 1.0f); /* dP = dO V^T */
    bool capped = g->sc.softcap > 0;
    softmax_backward_rows(dprobs, probs, rows, bk.n_keys, capped ? NULL : packed);
    if (capped) {
        times_key_rows(g->kern, raw, g->q + q_off, qs, kt, hd, &bk, rows, g->sc.scale);
        size_t cells = (size_t)rows * bk.n_keys;
        for (size_t i = 0; i < cells; i++) {
            float t = tanhf(raw[i] / g->sc.softcap);
            dprobs[i] *= 1.0f - t * t;
        }
        for (int r = 0; packed && r < rows; r++) /* dS is final only now */
            pack_row(packed + (size_t)r * pack_stride(bk.n_keys), dprobs + (size_t)r * bk.n_keys,
                     bk.n_keys, pack_stride(bk.n_keys));
    }
    probs_times_values(g->kern, g->dq + q_off, qs, dprobs, packed, kr, hd, &bk, rows, g->sc.scale);
    if (ks) { /* dK^T += scale Q^T dS */
        g->kern->product(true, hd, bk.n_keys, rows, g->sc.scale, g->q + q_off, qs, dprobs,
                         bk.n_keys, 1.0f, ks->dkt + bk.first, ks->ld, ATTN_DENSE, 0);
    } else {
        keys_accumulate(g->kern, g->dk + (size_t)kvh * hd, pdk, hd, kvs, dprobs, g->q + q_off, qs,
                        hd, &bk, rows, g->sc.scale);
    }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const AttnSegment *segs, int n_segs,
                        const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads, int hd,
                        int window) {
    AttnScores sc = {1.0f / sqrtf((float)hd), 0.0f};
    attention_backward_scored(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, n_heads,
                              n_kv_heads, hd, window, sc);
}

void attention_backward_scored(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const AttnSegment *segs, int n_segs,
                               const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads,
                               int hd, int window, AttnScores sc) {
    attention_backward_with(&attention_kernel_fp32, dq, dk, dv, dout, q, k, v, segs, n_segs,
                            seq_index, n_rows, n_heads, n_kv_heads, hd, window, sc);
}

void attention_backward_with(const AttnKernel *kern, float *dq, float *dk, float *dv,
                             const float *dout, const float *q, const float *k, const float *v,
                             const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                             int n_rows, int n_heads, int n_kv_heads, int hd, int window,
                             AttnScores sc) {
    int n_rep = n_heads / n_kv_heads, kv_stride = n_kv_heads * hd;
    AttentionGrads g = {kern, dq,        dk,           dv,        dout, q,      k,
                        v,    seq_index, n_heads * hd, kv_stride, hd,   window, sc};
    memset(dk, 0, (size_t)n_rows * kv_stride * sizeof(float));
    memset(dv, 0, (size_t)n_rows * kv_stride * sizeof(float));
    /* each segment's share of its prefix's dk (then dv): prefix_len x hd per kv head */
    size_t *acc_off = xmalloc((size_t)(n_segs + 1) * sizeof *acc_off);
    acc_off[0] = 0;
    for (int si = 0; si < n_segs; si++)
        acc_off[si + 1] = acc_off[si] + (size_t)segs[si].prefix_len * kv_stride;
    size_t acc_total = acc_off[n_segs];
    float *acc = xcalloc(2 * acc_total + 1, sizeof(float));
    size_t scratch = (size_t)QUERY_BLOCK * max_keys(segs, n_segs);
    float *scratch_all = xmalloc(3 * scratch * sizeof(float) * (size_t)omp_get_max_threads());
    size_t packed_each;
    uint16_t *packed_all = packed_blocks(kern, segs, n_segs, &packed_each);
    BackwardPanels pan = {.segs = segs};
    key_panels_build(&pan.kt, k, true, segs, n_segs, n_kv_heads, hd, kern);
    key_panels_build(&pan.vt, v, true, segs, n_segs, n_kv_heads, hd, kern);
    key_panels_build(&pan.kr, k, false, segs, n_segs, n_kv_heads, hd, kern);
    /* each thread's KeySums where kern->keys_transposed: dV^T and dK^T of the longest segment */
    int ld = max_keys(segs, n_segs);
    size_t sums_each = kern->keys_transposed ? 2 * (size_t)hd * ld : 0;
    float *sums_all = sums_each ? xmalloc(sums_each * sizeof(float) * omp_get_max_threads()) : NULL;

#pragma omp parallel for schedule(dynamic) collapse(2)
    for (int si = 0; si < n_segs; si++) {
        for (int kvh = 0; kvh < n_kv_heads; kvh++) {
            const AttnSegment *s = &segs[si];
            size_t t = (size_t)omp_get_thread_num();
            float *probs = scratch_all + 3 * scratch * t;
            float *pdk = acc + acc_off[si] + (size_t)kvh * s->prefix_len * hd;
            float *pdv = pdk + acc_total;
            uint16_t *packed = packed_all ? packed_all + packed_each * t : NULL;
            KeySums sums, *ks = NULL;
            if (sums_all) {
                sums = (KeySums){sums_all + sums_each * t, sums_all + sums_each * t + hd * ld, ld};
                ks = key_sums_zero(&sums, hd, s->prefix_len + s->len);
            }
            for (int h = kvh * n_rep; h < (kvh + 1) * n_rep; h++)
                for (int i0 = 0; i0 < s->len; i0 += QUERY_BLOCK) {
                    int rows = s->len - i0 < QUERY_BLOCK ? s->len - i0 : QUERY_BLOCK;
                    block_backward(&g, &pan, si, h, kvh, i0, rows, probs, probs + scratch,
                                   probs + 2 * scratch, packed, pdk, pdv, ks);
                }
            if (ks)
                key_sums_add(ks, s, hd, dk + (size_t)kvh * hd, dv + (size_t)kvh * hd, kv_stride,
                             pdk, pdv);
        }
    }
    free(sums_all);

    /* the prefixes' shares, added segment by segment */
#pragma omp parallel for schedule(static)
    for (int kvh = 0; kvh < n_kv_heads; kvh++) {
        for (int si = 0; si < n_segs; si++) {
            const AttnSegment *s = &segs[si];
            const float *pdk = acc + acc_off[si] + (size_t)kvh * s->prefix_len * hd;
            const float *pdv = pdk + acc_total;
            for (int c = 0; c < s->prefix_len; c++) {
                size_t at = (size_t)(s->prefix_start + c) * kv_stride + (size_t)kvh * hd;
                for (int d = 0; d < hd; d++) {
                    dk[at + d] += pdk[(size_t)c * hd + d];
                    dv[at + d] += pdv[(size_t)c * hd + d];
                }
            }
        }
    }
    key_panels_free(&pan.kt);
    key_panels_free(&pan.vt);
    key_panels_free(&pan.kr);
    free(packed_all);
    free(scratch_all);
    free(acc);
    free(acc_off);
}
