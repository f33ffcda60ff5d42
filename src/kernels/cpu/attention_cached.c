/* One query head attending over the rows of a KV cache: the inner loop of decoding, where
 * every new token reads every cached key and value of its sequence once.
 *
 * Scores are formed eight keys at a time, with eight vector accumulators whose lanes are added
 * together in one transpose at the end: one horizontal sum per key, as a dot product at a time
 * would do, costs as much as the key's multiplications. The weighted sum of values keeps the
 * output head in registers while the value rows stream past. */
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/kernels.h"

#include <math.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

#if HAVE_AVX2
/* out[j] = q · row j, for 8 rows `stride` floats apart; hd a multiple of 8. */
static void dot8_rows(float *out, const float *q, const float *rows, size_t stride, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        const float *r = rows + d;
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r), qv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + stride), qv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 2 * stride), qv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 3 * stride), qv, a3);
        a4 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 4 * stride), qv, a4);
        a5 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 5 * stride), qv, a5);
        a6 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 6 * stride), qv, a6);
        a7 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 7 * stride), qv, a7);
    }
    /* hadd pairs neighbouring lanes within each 128-bit half; two rounds leave, per half,
     * the partial sums of four rows; adding the halves finishes all eight. */
    __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    __m256 low = _mm256_permute2f128_ps(s0123, s4567, 0x20);
    __m256 high = _mm256_permute2f128_ps(s0123, s4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(low, high));
}

/* out[0..64) = sum over t of w[t] * row t, the rows `stride` floats apart. */
static void weighted_rows64(float *out, const float *w, const float *rows, size_t stride, int len) {
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0, o6 = o0, o7 = o0;
    for (int t = 0; t < len; t++) {
        __m256 wt = _mm256_broadcast_ss(w + t);
        const float *r = rows + (size_t)t * stride;
        o0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r), o0);
        o1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 8), o1);
        o2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 16), o2);
        o3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 24), o3);
        o4 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 32), o4);
        o5 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 40), o5);
        o6 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 48), o6);
        o7 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 56), o7);
    }
    _mm256_storeu_ps(out, o0);
    _mm256_storeu_ps(out + 8, o1);
    _mm256_storeu_ps(out + 16, o2);
    _mm256_storeu_ps(out + 24, o3);
    _mm256_storeu_ps(out + 32, o4);
    _mm256_storeu_ps(out + 40, o5);
    _mm256_storeu_ps(out + 48, o6);
    _mm256_storeu_ps(out + 56, o7);
}
#endif

static float dot(const float *q, const float *row, int hd) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++)
        s += q[d] * row[d];
    return s;
}

void attention_over_cache(float *out, const float *q, const float *k, const float *v, int len,
                          size_t stride, int hd, float *scores) {
    float scale = 1.0f / sqrtf((float)hd);
    int t = 0;
#if HAVE_AVX2
    if (hd % 8 == 0)
        for (; t + 8 <= len; t += 8)
            dot8_rows(scores + t, q, k + (size_t)t * stride, stride, hd);
#endif
    for (; t < len; t++)
        scores[t] = dot(q, k + (size_t)t * stride, hd);
    /* The softmax's loops are vectorised as the full forward's are (-O2 alone leaves them
     * scalar: at a few hundred keys the exponentials cost as much as the dot products). */
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (t = 0; t < len; t++) {
        scores[t] *= scale;
        max = scores[t] > max ? scores[t] : max;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (t = 0; t < len; t++) {
        scores[t] = fast_expf(scores[t] - max);
        sum += scores[t];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (t = 0; t < len; t++)
        scores[t] *= inv;
    int d = 0;
#if HAVE_AVX2
    for (; d + 64 <= hd; d += 64)
        weighted_rows64(out + d, scores, v + d, stride, len);
#endif
    for (; d < hd; d++) {
        float o = 0.0f;
        for (t = 0; t < len; t++)
            o += scores[t] * v[(size_t)t * stride + d];
        out[d] = o;
    }
}
