/* torch_exponential_f32, fast and bit-identical (torch_exponential.h). Invariants:
 *   1. u_i = (hi_i & (2^21 - 1)) * 2^-21 + lo_i * 2^-53: both terms and their sum are exact in
 *      double (the sum is a 53-bit integer times 2^-53), so it equals the serial
 *      (double)(random64() & (2^53 - 1)) * 2^-53 in every path;
 *   2. an element's float is (float)-log1p(-u) with libm's log1p: from the vector result when no
 *      float midpoint lies within TORCH_EXP_MIDPOINT_ULPS of it (rounding to nearest changes only
 *      across midpoints, and powers of two are floats, so a binade edge is never within it),
 *      else from libm itself; u == 0 always goes to libm, for the sign of its zero;
 *   3. the draws of [a, b) in thread t are made from a copy of g skipped 2a words, and g ends as
 *      the copy of the thread holding the last part: as the serial stream leaves it. */
#include "common/torch_exponential.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>

#define TARGET_AVX2   __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx512f")))

/* draws per block: its words (8 KiB) stay in L1 between the twist and the transform */
#define EXP_BLOCK 1024
/* below this many draws one thread does them all (the skip and the region cost more) */
#define EXP_PARALLEL_MIN (1 << 16)

#ifdef RLHF_WITH_LIBMVEC
/* glibc's libmvec (libc6-dev), x86-64 vector ABI: 'e' AVX-512 with 8 doubles, 'd' AVX2 with 4.
 * Each is an IFUNC that picks its implementation by cpuid itself. */
TARGET_AVX512 __m512d _ZGVeN8v_log1p(__m512d x);
TARGET_AVX2 __m256d _ZGVdN4v_log1p(__m256d x);
#endif

static void exp_scalar(const uint32_t *w, float *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = (float)-log1p(-torch_exponential_u(w + 2 * i));
}

#ifdef RLHF_WITH_LIBMVEC

/* log1p(-u) of 8 pairs (16 words) and the u it was taken of */
TARGET_AVX512 static __m512d log1p_neg_avx512(const uint32_t *w, __m512d *u_out) {
    __m512i p = _mm512_loadu_si512(w); /* 64-bit lanes: low half hi word, high half lo word */
    __m256i hi = _mm512_cvtepi64_epi32(_mm512_and_si512(p, _mm512_set1_epi64((1 << 21) - 1)));
    __m256i lo = _mm512_cvtepi64_epi32(_mm512_srli_epi64(p, 32));
    __m512d u = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(hi), _mm512_set1_pd(0x1.0p-21)),
                              _mm512_mul_pd(_mm512_cvtepu32_pd(lo), _mm512_set1_pd(0x1.0p-53)));
    *u_out = u;
    __m512i neg = _mm512_xor_si512(_mm512_castpd_si512(u), _mm512_set1_epi64(INT64_MIN));
    return _ZGVeN8v_log1p(_mm512_castsi512_pd(neg));
}

TARGET_AVX512 static void exp_avx512(const uint32_t *w, float *out, size_t n) {
    const __m512i low29 = _mm512_set1_epi64((1 << 29) - 1), mid = _mm512_set1_epi64(1 << 28);
    const __m512i margin = _mm512_set1_epi64(TORCH_EXP_MIDPOINT_ULPS);
    const __m512i sign = _mm512_set1_epi64(INT64_MIN);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d u, r = log1p_neg_avx512(w + 2 * i, &u);
        __m512i bits = _mm512_castpd_si512(r);
        __m512i dist = _mm512_abs_epi64(_mm512_sub_epi64(_mm512_and_si512(bits, low29), mid));
        __mmask8 redo = _mm512_cmple_epu64_mask(dist, margin) |
                        _mm512_cmp_pd_mask(u, _mm512_setzero_pd(), _CMP_EQ_OQ);
        _mm256_storeu_ps(out + i,
                         _mm512_cvtpd_ps(_mm512_castsi512_pd(_mm512_xor_si512(bits, sign))));
        for (; redo; redo &= (__mmask8)(redo - 1)) {
            size_t k = i + (size_t)__builtin_ctz(redo);
            exp_scalar(w + 2 * k, out + k, 1);
        }
    }
    exp_scalar(w + 2 * i, out + i, n - i);
}

/* a 64-bit lane holding an integer below 2^52, as a double (exact) */
TARGET_AVX2 static inline __m256d small_u64_to_pd(__m256i x) {
    const __m256d two52 = _mm256_set1_pd(0x1.0p52);
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(x, _mm256_castpd_si256(two52))),
                         two52);
}

TARGET_AVX2 static __m256d log1p_neg_avx2(const uint32_t *w, __m256d *u_out) {
    __m256i p = _mm256_loadu_si256((const __m256i *)w);
    __m256d hi = small_u64_to_pd(_mm256_and_si256(p, _mm256_set1_epi64x((1 << 21) - 1)));
    __m256d lo = small_u64_to_pd(_mm256_srli_epi64(p, 32));
    __m256d u = _mm256_add_pd(_mm256_mul_pd(hi, _mm256_set1_pd(0x1.0p-21)),
                              _mm256_mul_pd(lo, _mm256_set1_pd(0x1.0p-53)));
    *u_out = u;
    return _ZGVdN4v_log1p(_mm256_xor_pd(u, _mm256_set1_pd(-0.0)));
}

TARGET_AVX2 static void exp_avx2(const uint32_t *w, float *out, size_t n) {
    const __m256i low29 = _mm256_set1_epi64x((1 << 29) - 1);
    /* near a midpoint: 0 <= low29 - (2^28 - margin) <= 2 margin */
    const __m256i start = _mm256_set1_epi64x((1 << 28) - TORCH_EXP_MIDPOINT_ULPS);
    const __m256i width = _mm256_set1_epi64x(2 * TORCH_EXP_MIDPOINT_ULPS);
    const __m256i zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d u, r = log1p_neg_avx2(w + 2 * i, &u);
        __m256i t = _mm256_sub_epi64(_mm256_and_si256(_mm256_castpd_si256(r), low29), start);
        __m256i far = _mm256_or_si256(_mm256_cmpgt_epi64(zero, t), _mm256_cmpgt_epi64(t, width));
        __m256d near =
            _mm256_or_pd(_mm256_castsi256_pd(_mm256_xor_si256(far, _mm256_set1_epi64x(-1))),
                         _mm256_cmp_pd(u, _mm256_setzero_pd(), _CMP_EQ_OQ));
        _mm_storeu_ps(out + i, _mm256_cvtpd_ps(_mm256_xor_pd(r, _mm256_set1_pd(-0.0))));
        for (int redo = _mm256_movemask_pd(near); redo; redo &= redo - 1) {
            size_t k = i + (size_t)__builtin_ctz((unsigned)redo);
            exp_scalar(w + 2 * k, out + k, 1);
        }
    }
    exp_scalar(w + 2 * i, out + i, n - i);
}

TARGET_AVX512 static void log1p_raw_avx512(const uint32_t *w, double *r, size_t n) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        __m512d u;
        _mm512_storeu_pd(r + i, log1p_neg_avx512(w + 2 * i, &u));
    }
    for (size_t i = n / 8 * 8; i < n; i++)
        r[i] = log1p(-torch_exponential_u(w + 2 * i));
}

TARGET_AVX2 static void log1p_raw_avx2(const uint32_t *w, double *r, size_t n) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
        __m256d u;
        _mm256_storeu_pd(r + i, log1p_neg_avx2(w + 2 * i, &u));
    }
    for (size_t i = n / 4 * 4; i < n; i++)
        r[i] = log1p(-torch_exponential_u(w + 2 * i));
}

#endif /* RLHF_WITH_LIBMVEC */

bool torch_exponential_vector_log1p(const uint32_t *w, double *r, size_t n, DrawPath path) {
    path = draw_path_resolve(path);
#ifdef RLHF_WITH_LIBMVEC
    if (path == DRAW_PATH_AVX512) return log1p_raw_avx512(w, r, n), true;
    if (path == DRAW_PATH_AVX2) return log1p_raw_avx2(w, r, n), true;
#endif
    if (path != DRAW_PATH_SCALAR) return false;
    for (size_t i = 0; i < n; i++)
        r[i] = log1p(-torch_exponential_u(w + 2 * i));
    return true;
}

void torch_exponential_from_words(const uint32_t *w, float *out, size_t n, DrawPath path) {
    path = draw_path_resolve(path);
#ifdef RLHF_WITH_LIBMVEC
    if (path == DRAW_PATH_AVX512) return exp_avx512(w, out, n);
    if (path == DRAW_PATH_AVX2) return exp_avx2(w, out, n);
#endif
    exp_scalar(w, out, n);
}

/* Draws out[0 .. n) from g, a block of words at a time. */
static void exp_blocks(TorchGenerator *g, float *out, size_t n, DrawPath path) {
    uint32_t words[2 * EXP_BLOCK];
    for (size_t i = 0; i < n; i += EXP_BLOCK) {
        size_t m = n - i < EXP_BLOCK ? n - i : EXP_BLOCK;
        mt19937_words(g, words, 2 * m, path);
        torch_exponential_from_words(words, out + i, m, path);
    }
}

/* The serial reference: one random64 and one libm log1p per element. */
static void exp_serial(TorchGenerator *g, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t x = torch_generator_random64(g) & ((1ull << 53) - 1);
        out[i] = (float)-log1p(-((double)x * 0x1.0p-53));
    }
}

void torch_exponential_f32_serial(TorchGenerator *g, float *out, size_t n) {
    DrawPath path = draw_path_resolve(DRAW_PATH_BEST);
    if (path == DRAW_PATH_SCALAR)
        exp_serial(g, out, n);
    else
        exp_blocks(g, out, n, path);
}

void torch_exponential_words(TorchGenerator *g, uint32_t *w, size_t n) {
    mt19937_words(g, w, 2 * n, DRAW_PATH_BEST);
}

void torch_exponential_skip(TorchGenerator *g, uint64_t n) {
    mt19937_skip(g, 2 * n, DRAW_PATH_BEST);
}

void torch_exponential_f32_path(TorchGenerator *g, float *out, size_t n, DrawPath path) {
    path = draw_path_resolve(path);
    if (path == DRAW_PATH_SCALAR) {
        exp_serial(g, out, n);
        return;
    }
    int threads = n >= EXP_PARALLEL_MIN ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t a = n * (size_t)t / (size_t)nt, b = n * (size_t)(t + 1) / (size_t)nt;
        TorchGenerator own = *g;
        mt19937_skip(&own, 2 * (uint64_t)a, path);
        exp_blocks(&own, out + a, b - a, path);
#pragma omp barrier
        if (t == nt - 1) *g = own;
    }
}

void torch_exponential_f32(TorchGenerator *g, float *out, size_t n) {
    torch_exponential_f32_path(g, out, n, DRAW_PATH_BEST);
}
