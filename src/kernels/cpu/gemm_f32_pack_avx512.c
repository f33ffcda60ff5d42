/* gemm_f32's AVX-512 packing: the copies that lay out A's and B's micro-panels for the 12x32
 * kernel (gemm_f32_kernels.h's GemmF32Pack), with vector loads and stores instead of one float
 * at a time.
 *
 * Why: a profile of the 135M DPO step (1024 token rows, K 576) had the scalar packing loops at
 * about 60% of the micro-kernel's own time, most of it packing W for x W^T, where each of a
 * weight row's kc depths goes to a different line of the panel (a store every 128 bytes). Here
 * 16 items' depths are loaded as 16 vectors, transposed in registers (a 16x16 transpose: 64
 * shuffles for 256 floats), and stored a depth at a time, whole lines. Packing only moves
 * floats, so the panels, and every product's bits, are the scalar packing's.
 *
 * Compiled for AVX-512F by target attribute; gemm_f32.c calls it only with the AVX-512 kernel. */
#include "kernels/cpu/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include "kernels/cpu/transpose16_avx512.h"

/* r[j] := the j-th column of the 16x16 matrix whose rows are r[0..15]. */
__attribute__((target("avx512f"))) static inline void transpose16(__m512 r[16]) {
    __m512i w[16];
    for (int i = 0; i < 16; i++)
        w[i] = _mm512_castps_si512(r[i]);
    transpose16_lanes32(w);
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_castsi512_ps(w[i]);
}

static __mmask16 first_lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* Items first + g .. first + g + 15 of a panel (of `count`, zeros past it) whose depths are
 * adjacent in memory (item i at src + i * ld + k0): transposed 16 depths at a time into lanes
 * lane0 .. lane0 + 15 of each depth's `width` floats (only `lanes` of them stored). */
__attribute__((target("avx512f"))) static void pack_group_along_k(float *dst, const float *src,
                                                                  int ld, int first, int g,
                                                                  int count, int k0, int kc,
                                                                  int width, __mmask16 lanes) {
    int items = count - g; /* of this group's 16 */
    for (int kk = 0; kk < kc; kk += 16) {
        __mmask16 depths = first_lanes(kc - kk);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < items
                       ? _mm512_maskz_loadu_ps(depths, src + (size_t)(first + g + i) * ld + k0 + kk)
                       : _mm512_setzero_ps();
        transpose16(r);
        int n_depths = kc - kk < 16 ? kc - kk : 16;
        for (int t = 0; t < n_depths; t++)
            _mm512_mask_storeu_ps(dst + (size_t)(kk + t) * width + g, lanes, r[t]);
    }
}

__attribute__((target("avx512f"))) void gemm_f32_pack_avx512(float *dst, const float *src, int ld,
                                                             bool along_k, int first, int count,
                                                             int k0, int kc, int width) {
    if (along_k) {
        for (int g = 0; g < width; g += 16)
            pack_group_along_k(dst, src, ld, first, g, count, k0, kc, width,
                               first_lanes(width - g));
        return;
    }
    /* items adjacent at each depth (A transposed, B not): a masked copy per 16 of them */
    for (int kk = 0; kk < kc; kk++) {
        const float *row = src + (size_t)(k0 + kk) * ld + first;
        float *out = dst + (size_t)kk * width;
        for (int g = 0; g < width; g += 16)
            _mm512_mask_storeu_ps(out + g, first_lanes(width - g),
                                  _mm512_maskz_loadu_ps(first_lanes(count - g), row + g));
    }
}

#endif
