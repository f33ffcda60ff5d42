/* fp32 values rounded to bf16 for the packings of gemm_bf16 (gemm_bf16.c): nearest, ties to
 * even, every NaN the quiet NaN 0x7fc0, a subnormal rounded as any other value (not flushed).
 *
 * Where the build targets AVX512_BF16 (-march=native on a CPU that has it: RLHF_NATIVE), 16
 * values at a time by its conversion instruction, which rounds to nearest even as narrow_bf16
 * does, but treats a subnormal input as zero and keeps a NaN's sign and payload: lanes holding
 * either (fpclass finds them; weights and activations hardly ever do) take narrow_bf16's integer
 * formula instead, so the bits are narrow_bf16's for every input. The integer formula took ~14
 * vector instructions per 16 values where the conversion takes one (the packings were ~13% of
 * a bf16 DPO step's samples). Elsewhere narrow_bf16 value by value, which the loops vectorise.
 * The integer formula in AVX-512F lanes (narrow_bf16_lanes32) also serves attention_amx.c's
 * packers, which dispatch on cpuid at run time. */
#ifndef RLHF_KERNELS_CPU_NARROW_BF16_H
#define RLHF_KERNELS_CPU_NARROW_BF16_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                   \
    defined(__AVX512DQ__)
#define NARROW_BF16_AVX512 1
#endif

/* The bf16 nearest to f (ties to even); a NaN becomes the quiet NaN 0x7fc0. Branch-free (a
 * select), so that loops vectorise. */
static inline uint16_t narrow_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : r;
}

#if defined(__x86_64__)
/* narrow_bf16 of x's 16 values in AVX-512F integer operations, each bf16 in the low half of its
 * 32-bit lane. Compiled for AVX-512F by target attribute (as transpose16_avx512.h), so a caller
 * must itself be an AVX-512F function, reached only on a CPU that has it (attention_amx.c's
 * packers), or built for one (narrow_bf16_x16's NaN and subnormal lanes). */
__attribute__((target("avx512f"))) static inline __m512i narrow_bf16_lanes32(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
}
#endif

#ifdef NARROW_BF16_AVX512
/* narrow_bf16 of x's 16 values, as 16 words. */
static inline __m256i narrow_bf16_x16(__m512 x) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    /* fpclass categories: 0x01 quiet NaN, 0x80 signalling NaN, 0x20 subnormal */
    __mmask16 special = _mm512_fpclass_ps_mask(x, 0xa1);
    if (__builtin_expect(special != 0, 0))
        h = _mm256_mask_mov_epi16(h, special, _mm512_cvtepi32_epi16(narrow_bf16_lanes32(x)));
    return h;
}
#endif

/* dst[k] = narrow_bf16(src[k]) for k < n. */
static inline void narrow_bf16_run(uint16_t *dst, const float *src, int n) {
    int k = 0;
#ifdef NARROW_BF16_AVX512
    for (; k + 16 <= n; k += 16)
        _mm256_storeu_si256((__m256i *)(dst + k), narrow_bf16_x16(_mm512_loadu_ps(src + k)));
#endif
#pragma omp simd
    for (int j = k; j < n; j++)
        dst[j] = narrow_bf16(src[j]);
}

/* dst[i] = narrow_bf16(lo[i]) | narrow_bf16(hi[i]) << 16 for i < n: pairs of values, the first
 * in the low half (the VNNI pair layout of gemm_bf16's packings). */
static inline void narrow_bf16_pairs(uint32_t *dst, const float *lo, const float *hi, int n) {
    int i = 0;
#ifdef NARROW_BF16_AVX512
    for (; i + 16 <= n; i += 16) {
        __m512i l = _mm512_cvtepu16_epi32(narrow_bf16_x16(_mm512_loadu_ps(lo + i)));
        __m512i h = _mm512_cvtepu16_epi32(narrow_bf16_x16(_mm512_loadu_ps(hi + i)));
        _mm512_storeu_si512((void *)(dst + i), _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
    }
#endif
#pragma omp simd
    for (int j = i; j < n; j++)
        dst[j] = narrow_bf16(lo[j]) | (uint32_t)narrow_bf16(hi[j]) << 16;
}

/* dst[q] = narrow_bf16(src[2q]) | narrow_bf16(src[2q + 1]) << 16 for q < pairs: neighbouring
 * values as pairs (a packing's source read along its depth). */
static inline void narrow_bf16_neighbours(uint32_t *dst, const float *src, int pairs) {
    int q = 0;
#ifdef NARROW_BF16_AVX512
    for (; q + 16 <= pairs; q += 16) { /* 32 values, their words in order: 16 pairs */
        _mm256_storeu_si256((__m256i *)(dst + q), narrow_bf16_x16(_mm512_loadu_ps(src + 2 * q)));
        _mm256_storeu_si256((__m256i *)(dst + q + 8),
                            narrow_bf16_x16(_mm512_loadu_ps(src + 2 * q + 16)));
    }
#endif
#pragma omp simd
    for (int j = q; j < pairs; j++)
        dst[j] = narrow_bf16(src[2 * j]) | (uint32_t)narrow_bf16(src[2 * j + 1]) << 16;
}

#endif
