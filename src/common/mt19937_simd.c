/* MT19937 in blocks (mt19937_simd.h). The twist regenerates word k from words k, k + 1 and
 * k + 397 (mod 624), in increasing k. Split where k + 397 wraps, each part is a loop whose reads
 * are either not yet written (k + 1 and k + 397 while k < 227) or written at least 227 words
 * earlier (k - 227 from k = 227 on), so 8 or 16 consecutive k can be computed at once from the
 * words as they stand: the same order of writes as the serial recurrence. The last word reads
 * word 0 as already regenerated, as the serial loop does. */
#include "common/mt19937_simd.h"

#include <immintrin.h>

#define MT_N          TORCH_MT_STATE_WORDS
#define MT_M          397
#define MT_MATRIX_A   0x9908B0DFu
#define MT_UPPER_MASK 0x80000000u
#define MT_LOWER_MASK 0x7FFFFFFFu
#define MT_WRAP       (MT_N - MT_M) /* 227: the first k whose k + 397 wraps */

#define TARGET_AVX2   __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx512f")))

bool draw_path_supported(DrawPath path) {
    switch (path) {
    case DRAW_PATH_AVX512:
        return __builtin_cpu_supports("avx512f");
    case DRAW_PATH_AVX2:
        return __builtin_cpu_supports("avx2");
    default:
        return true;
    }
}

DrawPath draw_path_resolve(DrawPath path) {
    if (path != DRAW_PATH_BEST) return path;
    if (draw_path_supported(DRAW_PATH_AVX512)) return DRAW_PATH_AVX512;
    if (draw_path_supported(DRAW_PATH_AVX2)) return DRAW_PATH_AVX2;
    return DRAW_PATH_SCALAR;
}

/* ---- the twist: word k's new value from a = s[k], b = s[k + 1], c = s[k + 397 mod 624] ---- */

static inline uint32_t twist_one(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t y = (a & MT_UPPER_MASK) | (b & MT_LOWER_MASK);
    return c ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
}

/* Words [k, end) serially, with c read at k + delta (397 or -227). */
static void twist_scalar_range(uint32_t *s, int k, int end, int delta) {
    for (; k < end; k++)
        s[k] = twist_one(s[k], s[k + 1], s[k + delta]);
}

static void twist_scalar(uint32_t *s) {
    twist_scalar_range(s, 0, MT_WRAP, MT_M);
    twist_scalar_range(s, MT_WRAP, MT_N - 1, -MT_WRAP);
    s[MT_N - 1] = twist_one(s[MT_N - 1], s[0], s[MT_M - 1]);
}

TARGET_AVX2 static int twist_avx2_range(uint32_t *s, int k, int end, int delta) {
    const __m256i upper = _mm256_set1_epi32((int)MT_UPPER_MASK);
    const __m256i lower = _mm256_set1_epi32((int)MT_LOWER_MASK);
    const __m256i matrix = _mm256_set1_epi32((int)MT_MATRIX_A);
    const __m256i one = _mm256_set1_epi32(1);
    for (; k + 8 <= end; k += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + k));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + k + 1));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + k + delta));
        __m256i y = _mm256_or_si256(_mm256_and_si256(a, upper), _mm256_and_si256(b, lower));
        __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(y, one), one);
        __m256i r = _mm256_xor_si256(c, _mm256_srli_epi32(y, 1));
        _mm256_storeu_si256((__m256i *)(s + k), _mm256_xor_si256(r, _mm256_and_si256(odd, matrix)));
    }
    return k;
}

TARGET_AVX2 static void twist_avx2(uint32_t *s) {
    twist_scalar_range(s, twist_avx2_range(s, 0, MT_WRAP, MT_M), MT_WRAP, MT_M);
    twist_scalar_range(s, twist_avx2_range(s, MT_WRAP, MT_N - 1, -MT_WRAP), MT_N - 1, -MT_WRAP);
    s[MT_N - 1] = twist_one(s[MT_N - 1], s[0], s[MT_M - 1]);
}

TARGET_AVX512 static int twist_avx512_range(uint32_t *s, int k, int end, int delta) {
    const __m512i upper = _mm512_set1_epi32((int)MT_UPPER_MASK);
    const __m512i lower = _mm512_set1_epi32((int)MT_LOWER_MASK);
    const __m512i matrix = _mm512_set1_epi32((int)MT_MATRIX_A);
    const __m512i one = _mm512_set1_epi32(1);
    for (; k + 16 <= end; k += 16) {
        __m512i a = _mm512_loadu_si512(s + k);
        __m512i b = _mm512_loadu_si512(s + k + 1);
        __m512i c = _mm512_loadu_si512(s + k + delta);
        __m512i y = _mm512_or_si512(_mm512_and_si512(a, upper), _mm512_and_si512(b, lower));
        __mmask16 odd = _mm512_test_epi32_mask(y, one);
        __m512i r = _mm512_xor_si512(c, _mm512_srli_epi32(y, 1));
        _mm512_storeu_si512(s + k, _mm512_mask_xor_epi32(r, odd, r, matrix));
    }
    return k;
}

TARGET_AVX512 static void twist_avx512(uint32_t *s) {
    twist_scalar_range(s, twist_avx512_range(s, 0, MT_WRAP, MT_M), MT_WRAP, MT_M);
    twist_scalar_range(s, twist_avx512_range(s, MT_WRAP, MT_N - 1, -MT_WRAP), MT_N - 1, -MT_WRAP);
    s[MT_N - 1] = twist_one(s[MT_N - 1], s[0], s[MT_M - 1]);
}

static void twist(TorchGenerator *g, DrawPath path) {
    if (path == DRAW_PATH_AVX512)
        twist_avx512(g->state);
    else if (path == DRAW_PATH_AVX2)
        twist_avx2(g->state);
    else
        twist_scalar(g->state);
}

/* ---- the tempering of words read ---- */

static inline uint32_t temper_one(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    return y ^ (y >> 18);
}

static void temper_scalar(const uint32_t *s, uint32_t *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = temper_one(s[i]);
}

TARGET_AVX2 static void temper_avx2(const uint32_t *s, uint32_t *out, size_t n) {
    const __m256i b = _mm256_set1_epi32((int)0x9D2C5680u), c = _mm256_set1_epi32((int)0xEFC60000u);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i y = _mm256_loadu_si256((const __m256i *)(s + i));
        y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
        y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 7), b));
        y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 15), c));
        y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
        _mm256_storeu_si256((__m256i *)(out + i), y);
    }
    temper_scalar(s + i, out + i, n - i);
}

TARGET_AVX512 static void temper_avx512(const uint32_t *s, uint32_t *out, size_t n) {
    const __m512i b = _mm512_set1_epi32((int)0x9D2C5680u), c = _mm512_set1_epi32((int)0xEFC60000u);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i y = _mm512_loadu_si512(s + i);
        y = _mm512_xor_si512(y, _mm512_srli_epi32(y, 11));
        y = _mm512_xor_si512(y, _mm512_and_si512(_mm512_slli_epi32(y, 7), b));
        y = _mm512_xor_si512(y, _mm512_and_si512(_mm512_slli_epi32(y, 15), c));
        y = _mm512_xor_si512(y, _mm512_srli_epi32(y, 18));
        _mm512_storeu_si512(out + i, y);
    }
    temper_scalar(s + i, out + i, n - i);
}

/* The words left to read before the next twist (torch_generator.h invariant 1), twisting first
 * when none are: then all 624 are, and g->left is one more than that count once settled. */
static size_t words_ready(TorchGenerator *g, DrawPath path) {
    if (g->left > 1) return (size_t)(g->left - 1);
    twist(g, path);
    g->next = 0;
    return MT_N;
}

void mt19937_words(TorchGenerator *g, uint32_t *out, size_t n, DrawPath path) {
    path = draw_path_resolve(path);
    while (n > 0) {
        size_t ready = words_ready(g, path), take = n < ready ? n : ready;
        const uint32_t *s = g->state + g->next;
        if (path == DRAW_PATH_AVX512)
            temper_avx512(s, out, take);
        else if (path == DRAW_PATH_AVX2)
            temper_avx2(s, out, take);
        else
            temper_scalar(s, out, take);
        g->next += (int)take;
        g->left = (int)(ready - take) + 1;
        out += take;
        n -= take;
    }
}

void mt19937_skip(TorchGenerator *g, uint64_t n, DrawPath path) {
    path = draw_path_resolve(path);
    while (n > 0) {
        size_t ready = words_ready(g, path), take = n < ready ? (size_t)n : ready;
        g->next += (int)take;
        g->left = (int)(ready - take) + 1;
        n -= take;
    }
}
