/* A 16 x 16 transpose of 32-bit lanes in zmm registers: the packers' way to turn 16 vectors
 * read along one direction of a matrix into 16 vectors along the other, one whole 64-byte store
 * a row instead of 16 strided 4-byte ones (fp32 panels in gemm_f32_pack_avx512.c, bf16 depth
 * pairs, one 32-bit word each, in gemm_bf16.c and attention_amx.c). Lanes only move: the bits of
 * every value are unchanged.
 *
 * Compiled for AVX-512F by target attribute, so a caller must itself be an AVX-512F function
 * (and reach it only on a CPU that has it). */
#ifndef RLHF_KERNELS_CPU_TRANSPOSE16_AVX512_H
#define RLHF_KERNELS_CPU_TRANSPOSE16_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

/* r[j] := column j of the 16 x 16 matrix whose rows are r[0..15] (lane i of r[j] was lane j of
 * r[i]). Three stages: pairs of rows interleaved, then pairs of pairs (after it r[4q + c]'s
 * 128-bit lane l holds column 4l + c of rows 4q .. 4q + 3), then the lanes gathered. */
__attribute__((target("avx512f"))) static inline void transpose16_lanes32(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88); /* lanes 0, 2 of each */
        __m512i w = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd); /* lanes 1, 3 */
        __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        __m512i w2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        r[c] = _mm512_shuffle_i32x4(v, v2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(w, w2, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(v, v2, 0xdd);
        r[12 + c] = _mm512_shuffle_i32x4(w, w2, 0xdd);
    }
}

#endif
#endif
