/* attention_softmax_avx512 (attention_softmax_avx512.h). Three passes over the row's columns
 * lo..hi, 16 at a time, the last vector masked: the maximum, the exponentials (stored) and their
 * sum, the normalising pass (in place, or rounded into `packed`). */
#include "kernels/cpu/attention_softmax_avx512.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/narrow_bf16.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* Columns j .. j + 15 of n (j < n) as a load mask: all 16, or the n - j left. */
static inline __mmask16 lanes_left(int j, int n) {
    return n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
}

/* e^x for x <= 0 (or NaN): x clamped below at -87.3 as fast_expf clamps (e^-87.3 ~ 1.2e-38
 * rather than 0; NaN passes the clamp: vmaxps returns its second operand when one is NaN),
 * x = n ln2 + r with n = round(x log2e) and |r| <= ln2/2 (Cody-Waite: ln2 in two parts, the
 * first exact in 9 bits, so n ln2_hi is exact), e^r by fast_expf's degree-6 Taylor polynomial
 * in FMA Horner steps, then scaled by 2^n (vscalefps: no exponent bits built by hand). */
TARGET static inline __m512 exp_nonpositive(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(FAST_EXP_MIN_X), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(FAST_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FAST_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FAST_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The largest of x[0..n) (n >= 1), two accumulators: a vmaxps chain's latency per vector was the
 * pass's time with one. A NaN among them may or may not be the result; the exponentials' pass
 * makes the row NaN either way. */
TARGET static float row_max(const float *x, int n) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + j + 16));
    }
    for (; j < n; j += 16)
        m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(m0, lanes_left(j, n), x + j));
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

/* x[j] = e^(x[j] - max) for j < n; returns their sum (16 lane sums, then reduced in
 * _mm512_reduce_add_ps's fixed order). The last vector's missing lanes load max (e^0, not
 * summed or stored). */
TARGET static float exponentials(float *x, int n, float max) {
    __m512 vmax = _mm512_set1_ps(max), sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        __mmask16 in = lanes_left(j, n);
        __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(vmax, in, x + j), vmax));
        _mm512_mask_storeu_ps(x + j, in, e);
        sum = _mm512_mask_add_ps(sum, in, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

TARGET float attention_softmax_avx512(float *row, int lo, int hi, uint16_t *packed, int stride) {
    int n = hi + 1 - lo;
    float *x = row + lo;
    float inv = 1.0f / exponentials(x, n, row_max(x, n));
    __m512 vinv = _mm512_set1_ps(inv);
    if (!packed) {
        memset(row, 0, (size_t)lo * sizeof *row);
        for (int j = 0; j < n; j += 16) {
            __mmask16 in = lanes_left(j, n);
            _mm512_mask_storeu_ps(x + j, in, _mm512_mul_ps(_mm512_maskz_loadu_ps(in, x + j), vinv));
        }
        return inv;
    }
    memset(packed, 0, (size_t)lo * sizeof *packed);
    for (int j = 0; j < n; j += 16) {
        __mmask16 in = lanes_left(j, n);
        __m512i words = narrow_bf16_lanes32(_mm512_mul_ps(_mm512_maskz_loadu_ps(in, x + j), vinv));
        _mm256_mask_storeu_epi16(packed + lo + j, in, _mm512_cvtepi32_epi16(words));
    }
    memset(packed + hi + 1, 0, (size_t)(stride - hi - 1) * sizeof *packed);
    return inv;
}

#else

float attention_softmax_avx512(float *row, int lo, int hi, uint16_t *packed, int stride) {
    (void)row, (void)lo, (void)hi, (void)packed, (void)stride;
    abort(); /* the AMX attention, its only caller, never runs off x86-64 */
}

#endif
