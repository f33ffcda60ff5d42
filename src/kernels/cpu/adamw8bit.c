#include "kernels/cpu/adamw8bit.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* torch.linspace(0.1, 1, steps) in float32 as ATen's CPU kernel computes it: from the start for
 * the first half, from the end for the second, each value with one rounding (a fused
 * multiply-add; plain float arithmetic differs in the last bit of a quarter of the values). */
static float linspace_at(int steps, int i) {
    const float start = 0.1f, end = 1.0f, step = (end - start) / (float)(steps - 1);
    return i < steps / 2 ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
}

static int float_cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The first biased exponent with buckets of its own; |x| < 2^-31 falls in bucket 0. */
#define Q8_FIRST_EXPONENT 96u

/* The bucket of |x| for |x| <= 1 (or a rounding above it): exponent and top mantissa bits,
 * counted from the first exponent with buckets of its own. Branch-free (a conditional move):
 * the quantiser calls it for every value. */
static inline unsigned bucket_of(uint32_t magnitude_bits) {
    uint32_t key = magnitude_bits >> (23 - Q8_SUB_BITS);
    return key >= (Q8_FIRST_EXPONENT << Q8_SUB_BITS)
               ? key - ((Q8_FIRST_EXPONENT - 1) << Q8_SUB_BITS)
               : 0;
}

/* Bucket b holds the magnitudes [lo, hi). */
static void bucket_range(unsigned b, float *lo, float *hi) {
    if (b == 0) {
        *lo = 0.0f;
        *hi = bits_float(Q8_FIRST_EXPONENT << 23);
        return;
    }
    uint32_t lo_bits = (((b >> Q8_SUB_BITS) + Q8_FIRST_EXPONENT - 1) << 23) |
                       ((b & ((1u << Q8_SUB_BITS) - 1)) << (23 - Q8_SUB_BITS));
    *lo = bits_float(lo_bits);
    *hi = bits_float(lo_bits + (1u << (23 - Q8_SUB_BITS)));
}

static void fill_buckets(Q8Map *map) {
    for (unsigned b = 0; b < Q8_BUCKETS; b++) {
        float lo, hi;
        bucket_range(b, &lo, &hi);
        unsigned pos = 0, neg = 0;
        while (pos < 255 && map->bound[pos] < lo) /* positive x >= lo */
            pos++;
        while (neg < 255 && map->bound[neg] <= -hi) /* negative x > -hi */
            neg++;
        map->below[0][b] = (int32_t)pos;
        map->below[1][b] = (int32_t)neg;
    }
}

void q8_map_dynamic(Q8Map *map, bool is_signed) {
    int n = 0; /* 7 exponent bits; unsigned, the sign bit doubles the fraction steps */
    for (int i = 0; i < 7; i++) {
        int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        float scale = (float)pow(10.0, (double)(i - 6));
        for (int k = 0; k + 1 < items; k++) {
            float mean = (linspace_at(items, k) + linspace_at(items, k + 1)) / 2.0f;
            map->value[n++] = scale * mean;
            if (is_signed) map->value[n++] = -scale * mean;
        }
    }
    map->value[n++] = 0.0f;
    map->value[n++] = 1.0f; /* 2 * 127 + 2 values signed, 254 + 2 unsigned: 256 either way */
    qsort(map->value, 256, sizeof *map->value, float_cmp);
    for (int i = 0; i < 255; i++)
        map->bound[i] = (map->value[i] + map->value[i + 1]) / 2.0f;
    map->bound[255] = INFINITY;
    fill_buckets(map);
}

/* With 7 mantissa bits no bucket of either map holds more than one bound (test_optimizer
 * checks every code against the plain count, one ulp either side of every bound), so one
 * branch-free compare finishes the count; bound[255] is +inf. */
static inline unsigned map_code(const Q8Map *map, float x) {
    uint32_t bits = float_bits(x);
    unsigned b = bucket_of(bits & 0x7fffffffu);
    unsigned below = (unsigned)map->below[bits >> 31][b];
    return below + (map->bound[below] < x);
}

uint8_t q8_map_code(const Q8Map *map, float x) {
    return (uint8_t)map_code(map, x);
}

#if defined(__AVX2__)
/* map_code on eight values: the same bucket, start count and compare, as gathers. */
static void map_codes8(const Q8Map *map, __m256 y, uint8_t *code) {
    const __m256i bits = _mm256_castps_si256(y);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i key = _mm256_srli_epi32(magnitude, 23 - Q8_SUB_BITS);
    const __m256i first = _mm256_set1_epi32((int)(Q8_FIRST_EXPONENT << Q8_SUB_BITS) - 1);
    __m256i bucket =
        _mm256_sub_epi32(key, _mm256_set1_epi32((int)((Q8_FIRST_EXPONENT - 1) << Q8_SUB_BITS)));
    bucket = _mm256_and_si256(bucket, _mm256_cmpgt_epi32(key, first)); /* below: bucket 0 */
    const __m256i row =
        _mm256_mullo_epi32(_mm256_srli_epi32(bits, 31), _mm256_set1_epi32(Q8_BUCKETS));
    __m256i below = _mm256_i32gather_epi32(&map->below[0][0], _mm256_add_epi32(row, bucket), 4);
    __m256 bound = _mm256_i32gather_ps(map->bound, below, 4);
    /* the compare's all-ones lanes are -1: subtracting them counts the bound */
    below = _mm256_sub_epi32(below, _mm256_castps_si256(_mm256_cmp_ps(bound, y, _CMP_LT_OQ)));
    __m128i lo = _mm256_castsi256_si128(below), hi = _mm256_extracti128_si256(below, 1);
    __m128i words = _mm_packus_epi32(lo, hi);
    _mm_storel_epi64((__m128i *)code, _mm_packus_epi16(words, words));
}
#endif

void q8_map_codes(const Q8Map *map, const float *x, float scale, size_t n, uint8_t *code) {
    size_t i = 0;
#if defined(__AVX2__)
    const __m256 s = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8)
        map_codes8(map, _mm256_mul_ps(_mm256_loadu_ps(x + i), s), code + i);
#endif
    for (; i < n; i++)
        code[i] = (uint8_t)map_code(map, x[i] * scale);
}

size_t q8_blocks(size_t numel) {
    return (numel + Q8_BLOCK - 1) / Q8_BLOCK;
}

int q8_moments_init(Q8Moments *q, size_t numel) {
    size_t blocks = q8_blocks(numel);
    memset(q, 0, sizeof *q);
    q->numel = numel;
    q->code_m = calloc_written(numel ? numel : 1, 1);
    q->code_v = calloc_written(numel ? numel : 1, 1);
    q->absmax_m = calloc_written(blocks ? blocks : 1, sizeof(float));
    q->absmax_v = calloc_written(blocks ? blocks : 1, sizeof(float));
    if (q->code_m && q->code_v && q->absmax_m && q->absmax_v) return 0;
    q8_moments_free(q);
    return -1;
}

void q8_moments_free(Q8Moments *q) {
    free(q->code_m);
    free(q->code_v);
    free(q->absmax_m);
    free(q->absmax_v);
    memset(q, 0, sizeof *q);
}

/* x (n values) as codes of `map` scaled by its largest magnitude, which is returned. */
static float quantise_block(const Q8Map *map, const float *x, size_t n, uint8_t *code) {
    float absmax = 0.0f;
#pragma omp simd reduction(max : absmax)
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        absmax = a > absmax ? a : absmax;
    }
    /* bitsandbytes scales by the reciprocal, guarding an all-zero block */
    float inv = 1.0f / (absmax > 1e-38f ? absmax : 1e-38f);
    /* |x * inv| may round a little above 1: its bucket exists and every bound lies below 1,
     * so it gets the code of 1 (or of -1), as bitsandbytes' clamp to [-1, 1] gives */
    q8_map_codes(map, x, inv, n, code);
    return absmax;
}

void adamw8bit_update(Q8Moments *q, const Q8Map *m_map, const Q8Map *v_map, float *p,
                      const float *g, const AdamWStepCoefs *coefs) {
    const AdamWStepCoefs c = *coefs; /* locals: the stores to p cannot alias them */
    size_t blocks = q8_blocks(q->numel);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t at = b * Q8_BLOCK, n = q->numel - at < Q8_BLOCK ? q->numel - at : Q8_BLOCK;
        float m[Q8_BLOCK], v[Q8_BLOCK];
        float am = q->absmax_m[b], av = q->absmax_v[b];
        for (size_t i = 0; i < n; i++) {
            m[i] = m_map->value[q->code_m[at + i]] * am;
            v[i] = v_map->value[q->code_v[at + i]] * av;
        }
        float *pb = p + at;
        const float *gb = g + at;
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float gi = gb[i] * c.grad_scale; /* the clip, as adamw_f32_update reads it */
            m[i] = m[i] * c.beta1 + c.one_minus_beta1 * gi;
            v[i] = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
            float denom = sqrtf(v[i]) / c.bc2_sqrt + c.eps;
            pb[i] = pb[i] * c.shrink + c.neg_step * m[i] / denom;
        }
        q->absmax_m[b] = quantise_block(m_map, m, n, q->code_m + at);
        q->absmax_v[b] = quantise_block(v_map, v, n, q->code_v + at);
    }
}
