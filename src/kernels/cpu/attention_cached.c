/* The query heads that share one kv head, attending over the rows of a KV cache: the inner loop
 * of decoding, where every new token reads every cached key and value of its sequence.
 *
 * The heads of a group go through the keys and values together, a few rows at a time, so each
 * row is fetched from memory once and then read from L1 by every head (Qwen2.5-0.5B has seven
 * query heads per kv head: one head at a time re-read each sequence's keys and values seven
 * times from L2, and attention was 15% of a batch-64 decode step).
 *
 * Scores are formed eight keys at a time, with eight vector accumulators whose lanes are added
 * together in one transpose at the end: one horizontal sum per key, as a dot product at a time
 * would do, costs as much as the key's multiplications. The weighted sum of values keeps the
 * output heads in registers while the value rows stream past.
 *
 * A sequence's rows may lie in two places (CacheRows): a completion that shares its prompt with
 * others reads the prompt's rows from the slot that prefilled it (kv_cache.h invariant 7), so the
 * prompt is read from memory once for the group instead of once per completion. Every key's
 * score and every weighted sum is formed as for one place: the same bits. */
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* One kv head's cached rows of a sequence, t = 0.. from its first attended position: row t at
 * (t < split ? lo : hi) + t * stride. split 0: all in one place. */
typedef struct {
    const float *lo, *hi;
    int split;
    size_t stride;
} CacheRows;

static inline const float *cache_row(const CacheRows *c, int t) {
    return (t < c->split ? c->lo : c->hi) + (size_t)t * c->stride;
}

#if defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

#if HAVE_AVX512
#define DOT8_WIDTH 16
/* out[j] = q · r[j], for 8 rows; hd a multiple of 16. */
static void dot8_rows(float *out, const float *q, const float *const r[8], int hd) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 16) {
        __m512 qv = _mm512_loadu_ps(q + d);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(r[0] + d), qv, a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(r[1] + d), qv, a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(r[2] + d), qv, a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(r[3] + d), qv, a3);
        a4 = _mm512_fmadd_ps(_mm512_loadu_ps(r[4] + d), qv, a4);
        a5 = _mm512_fmadd_ps(_mm512_loadu_ps(r[5] + d), qv, a5);
        a6 = _mm512_fmadd_ps(_mm512_loadu_ps(r[6] + d), qv, a6);
        a7 = _mm512_fmadd_ps(_mm512_loadu_ps(r[7] + d), qv, a7);
    }
    /* Within each 128-bit lane: unpack and add pairs rows (0,1), then a shuffle and add leaves
     * rows 0-3's partial sums side by side; likewise rows 4-7. Two rounds of adding 128-bit lanes
     * across the registers finish all eight in the low half. */
    __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 s45 = _mm512_add_ps(_mm512_unpacklo_ps(a4, a5), _mm512_unpackhi_ps(a4, a5));
    __m512 s67 = _mm512_add_ps(_mm512_unpacklo_ps(a6, a7), _mm512_unpackhi_ps(a6, a7));
    __m512 s0123 = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s4567 = _mm512_add_ps(_mm512_shuffle_ps(s45, s67, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s45, s67, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(s0123, s4567, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s0123, s4567, _MM_SHUFFLE(3, 1, 3, 1)));
    z = _mm512_add_ps(_mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(out, _mm512_castps512_ps256(z));
}

/* acc[0..4) += w * the 64 floats v0..v3 */
#define ACCUMULATE64(acc, w, v0, v1, v2, v3)                                                       \
    do {                                                                                           \
        (acc)[0] = _mm512_fmadd_ps(w, v0, (acc)[0]);                                               \
        (acc)[1] = _mm512_fmadd_ps(w, v1, (acc)[1]);                                               \
        (acc)[2] = _mm512_fmadd_ps(w, v2, (acc)[2]);                                               \
        (acc)[3] = _mm512_fmadd_ps(w, v3, (acc)[3]);                                               \
    } while (0)

/* For nh <= 4 heads: out_h[0..64) = sum over t of w_h[t] * row t (rows: columns d0.. of the
 * cached rows), head h's weights at w + h * len and its output at out + h * hd. Inlined per head
 * count, with each head's accumulators named apart: GCC keeps a 4 x 4 array of them in memory. */
static inline __attribute__((always_inline)) void weighted_rows64(float *out, int hd,
                                                                  const float *w, int len,
                                                                  const CacheRows *rows, int d0,
                                                                  const int nh) {
    __m512 zero = _mm512_setzero_ps();
    __m512 a0[4] = {zero, zero, zero, zero}, a1[4] = {zero, zero, zero, zero};
    __m512 a2[4] = {zero, zero, zero, zero}, a3[4] = {zero, zero, zero, zero};
    for (int t = 0; t < len; t++) {
        const float *r = cache_row(rows, t) + d0;
        __m512 v0 = _mm512_loadu_ps(r), v1 = _mm512_loadu_ps(r + 16);
        __m512 v2 = _mm512_loadu_ps(r + 32), v3 = _mm512_loadu_ps(r + 48);
        ACCUMULATE64(a0, _mm512_set1_ps(w[t]), v0, v1, v2, v3);
        if (nh > 1) ACCUMULATE64(a1, _mm512_set1_ps(w[(size_t)len + t]), v0, v1, v2, v3);
        if (nh > 2) ACCUMULATE64(a2, _mm512_set1_ps(w[(size_t)2 * len + t]), v0, v1, v2, v3);
        if (nh > 3) ACCUMULATE64(a3, _mm512_set1_ps(w[(size_t)3 * len + t]), v0, v1, v2, v3);
    }
    __m512 *acc[4] = {a0, a1, a2, a3};
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < 4; i++)
            _mm512_storeu_ps(out + (size_t)h * hd + 16 * i, acc[h][i]);
}

/* weighted_rows64 for the heads of a group, four at a time. */
static void weighted_rows64_heads(float *out, int hd, const float *w, int len,
                                  const CacheRows *rows, int d0, int n_q) {
    for (int h = 0; h < n_q; h += 4) {
        float *o = out + (size_t)h * hd;
        const float *wh = w + (size_t)h * len;
        switch (n_q - h) {
        case 1:
            weighted_rows64(o, hd, wh, len, rows, d0, 1);
            break;
        case 2:
            weighted_rows64(o, hd, wh, len, rows, d0, 2);
            break;
        case 3:
            weighted_rows64(o, hd, wh, len, rows, d0, 3);
            break;
        default:
            weighted_rows64(o, hd, wh, len, rows, d0, 4);
            break;
        }
    }
}
#elif HAVE_AVX2
#define DOT8_WIDTH 8
/* out[j] = q · r[j], for 8 rows; hd a multiple of 8. */
static void dot8_rows(float *out, const float *q, const float *const r[8], int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r[0] + d), qv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r[1] + d), qv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r[2] + d), qv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r[3] + d), qv, a3);
        a4 = _mm256_fmadd_ps(_mm256_loadu_ps(r[4] + d), qv, a4);
        a5 = _mm256_fmadd_ps(_mm256_loadu_ps(r[5] + d), qv, a5);
        a6 = _mm256_fmadd_ps(_mm256_loadu_ps(r[6] + d), qv, a6);
        a7 = _mm256_fmadd_ps(_mm256_loadu_ps(r[7] + d), qv, a7);
    }
    /* hadd pairs neighbouring lanes within each 128-bit half; two rounds leave, per half,
     * the partial sums of four rows; adding the halves finishes all eight. */
    __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    __m256 low = _mm256_permute2f128_ps(s0123, s4567, 0x20);
    __m256 high = _mm256_permute2f128_ps(s0123, s4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(low, high));
}

/* out_h[0..64) = sum over t of w_h[t] * row t for each head h (weights at w + h * len, output
 * at out + h * hd), rows: columns d0.. of the cached rows: one head at a time, as eight ymm
 * accumulators hold one head's 64 outputs. */
static void weighted_rows64_heads(float *out, int hd, const float *w, int len,
                                  const CacheRows *rows, int d0, int n_q) {
    for (int h = 0; h < n_q; h++) {
        const float *wh = w + (size_t)h * len;
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0, o6 = o0,
               o7 = o0;
        for (int t = 0; t < len; t++) {
            __m256 wt = _mm256_broadcast_ss(wh + t);
            const float *r = cache_row(rows, t) + d0;
            o0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r), o0);
            o1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 8), o1);
            o2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 16), o2);
            o3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 24), o3);
            o4 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 32), o4);
            o5 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 40), o5);
            o6 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 48), o6);
            o7 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 56), o7);
        }
        float *o = out + (size_t)h * hd;
        _mm256_storeu_ps(o, o0);
        _mm256_storeu_ps(o + 8, o1);
        _mm256_storeu_ps(o + 16, o2);
        _mm256_storeu_ps(o + 24, o3);
        _mm256_storeu_ps(o + 32, o4);
        _mm256_storeu_ps(o + 40, o5);
        _mm256_storeu_ps(o + 48, o6);
        _mm256_storeu_ps(o + 56, o7);
    }
}
#endif

static float dot(const float *q, const float *row, int hd) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++)
        s += q[d] * row[d];
    return s;
}

#ifdef DOT8_WIDTH
/* Asks for rows [first, end) of a head's cache, hd floats each, `stride` apart: into L1 for the
 * next block of keys, into L2 (into_l1 false) for the values the weighted sum reads after the
 * softmax. Each sequence's rows are a fresh read from memory at every step, and at 8 keys x 7
 * heads of work per block the hardware's own prefetch does not run far enough ahead. */
static void prefetch_rows(const CacheRows *rows, int first, int end, int hd, bool into_l1) {
    for (int j = first; j < end; j++)
        for (int d = 0; d < hd; d += 16) {
            const char *line = (const char *)(cache_row(rows, j) + d);
            if (into_l1)
                _mm_prefetch(line, _MM_HINT_T0);
            else
                _mm_prefetch(line, _MM_HINT_T1);
        }
}
#endif

#ifdef DOT8_WIDTH
#define TAIL_MAX_HD 256
/* scores[h * len + t] = q_h · key t for the keys t0 <= t < len left after the blocks of eight,
 * each summed as dot() sums it: index by index, each product and each sum rounded (a multiply,
 * then an add: no FMA). Eight heads side by side, a head a lane (q transposed so that index d of
 * the eight is one vector): dot() one head after another is a chain of hd dependent adds per head
 * and key, which at ~130 keys cost 16% of attention_over_cache_scored's samples (perf, Qwen2.5's
 * seven heads a group). The lanes are independent: the same bits. hd <= TAIL_MAX_HD. */
static void tail_scores(float *scores, const float *q, const CacheRows *k, int t0, int len, int hd,
                        int n_q) {
    float qt[TAIL_MAX_HD * 8], lanes[8];
    for (int h0 = 0; h0 < n_q; h0 += 8) {
        int nh = n_q - h0 < 8 ? n_q - h0 : 8;
        for (int d = 0; d < hd; d++)
            for (int i = 0; i < 8; i++)
                qt[d * 8 + i] = i < nh ? q[(size_t)(h0 + i) * hd + d] : 0.0f;
        for (int t = t0; t < len; t++) {
            const float *row = cache_row(k, t);
            __m256 acc = _mm256_setzero_ps();
            for (int d = 0; d < hd; d++)
                acc = _mm256_add_ps(
                    acc, _mm256_mul_ps(_mm256_loadu_ps(qt + d * 8), _mm256_set1_ps(row[d])));
            _mm256_storeu_ps(lanes, acc);
            for (int i = 0; i < nh; i++)
                scores[(size_t)(h0 + i) * len + t] = lanes[i];
        }
    }
}
#endif

/* scores[h * len + t] = q_h · key t, for the n_q heads: eight keys at a time, read by every head
 * while they are in L1; the rest as dot() computes them. */
static void key_scores(float *scores, const float *q, const CacheRows *k, const CacheRows *v,
                       int len, int hd, int n_q) {
    int t = 0;
#ifdef DOT8_WIDTH
    if (hd % DOT8_WIDTH == 0)
        for (; t + 8 <= len; t += 8) {
            prefetch_rows(k, t + 8, t + 16 < len ? t + 16 : len, hd, true);
            prefetch_rows(v, t, t + 8, hd, false);
            const float *rows[8];
            for (int i = 0; i < 8; i++)
                rows[i] = cache_row(k, t + i);
            for (int h = 0; h < n_q; h++)
                dot8_rows(scores + (size_t)h * len + t, q + (size_t)h * hd, rows, hd);
        }
    if (hd <= TAIL_MAX_HD) {
        tail_scores(scores, q, k, t, len, hd, n_q);
        return;
    }
#endif
    for (; t < len; t++)
        for (int h = 0; h < n_q; h++)
            scores[(size_t)h * len + t] = dot(q + (size_t)h * hd, cache_row(k, t), hd);
}

/* w = softmax(scores(w)) over len entries, scores as AttnScores says. */
static void scaled_softmax(float *w, int len, AttnScores sc) {
    /* The loops are vectorised as the full forward's are (-O2 alone leaves them scalar: at a few
     * hundred keys the exponentials cost as much as the dot products). */
    float max = -INFINITY;
    if (sc.softcap > 0) /* Gemma 2: as the batch forward's attention_cap_scores */
        for (int t = 0; t < len; t++)
            w[t] = sc.softcap * tanhf(w[t] * sc.scale / sc.softcap);
    else
#pragma omp simd
        for (int t = 0; t < len; t++)
            w[t] *= sc.scale;
#pragma omp simd reduction(max : max)
    for (int t = 0; t < len; t++)
        max = w[t] > max ? w[t] : max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < len; t++) {
        w[t] = fast_expf(w[t] - max);
        sum += w[t];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int t = 0; t < len; t++)
        w[t] *= inv;
}

void attention_over_cache(float *out, const float *q, const float *k, const float *v, int len,
                          size_t stride, int hd, int n_q, float *scores) {
    AttnScores sc = {1.0f / sqrtf((float)hd), 0.0f};
    attention_over_cache_scored(out, q, k, v, len, stride, hd, n_q, scores, sc);
}

/* attention_over_cache_scored over rows that may lie in two places. */
static void over_cache_rows(float *out, const float *q, const CacheRows *k, const CacheRows *v,
                            int len, int hd, int n_q, float *scores, AttnScores sc) {
    key_scores(scores, q, k, v, len, hd, n_q);
    for (int h = 0; h < n_q; h++)
        scaled_softmax(scores + (size_t)h * len, len, sc);
    int d = 0;
#ifdef DOT8_WIDTH
    for (; d + 64 <= hd; d += 64)
        weighted_rows64_heads(out + d, hd, scores, len, v, d, n_q);
#endif
    for (; d < hd; d++)
        for (int h = 0; h < n_q; h++) {
            const float *w = scores + (size_t)h * len;
            float o = 0.0f;
            for (int t = 0; t < len; t++)
                o += w[t] * cache_row(v, t)[d];
            out[(size_t)h * hd + d] = o;
        }
}

void attention_over_cache_scored(float *out, const float *q, const float *k, const float *v,
                                 int len, size_t stride, int hd, int n_q, float *scores,
                                 AttnScores sc) {
    CacheRows kr = {k, k, 0, stride}, vr = {v, v, 0, stride};
    over_cache_rows(out, q, &kr, &vr, len, hd, n_q, scores, sc);
}

void attention_cached_rows(float *out, const float *q, const float *k_cache, const float *v_cache,
                           const int32_t *slot, const int32_t *pos, int n, int max_len, int n_heads,
                           int n_kv_heads, int hd, int window) {
    AttnScores sc = {1.0f / sqrtf((float)hd), 0.0f};
    attention_cached_rows_scored(out, q, k_cache, v_cache, slot, pos, n, max_len, n_heads,
                                 n_kv_heads, hd, window, sc);
}

void attention_cached_rows_scored(float *out, const float *q, const float *k_cache,
                                  const float *v_cache, const int32_t *slot, const int32_t *pos,
                                  int n, int max_len, int n_heads, int n_kv_heads, int hd,
                                  int window, AttnScores sc) {
    attention_cached_rows_prefixed(out, q, k_cache, v_cache, slot, pos, NULL, NULL, n, max_len,
                                   n_heads, n_kv_heads, hd, window, sc);
}

void attention_cached_rows_prefixed(float *out, const float *q, const float *k_cache,
                                    const float *v_cache, const int32_t *slot, const int32_t *pos,
                                    const int32_t *prefix_slot, const int32_t *prefix_len, int n,
                                    int max_len, int n_heads, int n_kv_heads, int hd, int window,
                                    AttnScores sc) {
    int n_rep = n_heads / n_kv_heads;
    size_t kvd = (size_t)n_kv_heads * hd;
#pragma omp parallel
    {
        float *scores = xmalloc((size_t)n_rep * max_len * sizeof *scores);
#pragma omp for collapse(2) schedule(static)
        for (int r = 0; r < n; r++) {
            for (int g = 0; g < n_kv_heads; g++) { /* query heads g * n_rep .. share kv head g */
                int p = pos[r], first = 0;
                if (window > 0 && p - window + 1 > first) first = p - window + 1;
                size_t head = (size_t)g * hd, at = ((size_t)r * n_heads + (size_t)g * n_rep) * hd;
                size_t own = ((size_t)slot[r] * max_len + first) * kvd + head, lent = own;
                int split = 0; /* rows below it read from the prefix's slot */
                if (prefix_len && prefix_len[r] > first) {
                    split = prefix_len[r] - first;
                    lent = ((size_t)prefix_slot[r] * max_len + first) * kvd + head;
                }
                CacheRows kr = {k_cache + lent, k_cache + own, split, kvd};
                CacheRows vr = {v_cache + lent, v_cache + own, split, kvd};
                over_cache_rows(out + at, q + at, &kr, &vr, p - first + 1, hd, n_rep, scores, sc);
            }
        }
        free(scores);
    }
}
