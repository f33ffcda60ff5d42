/* gemm_f32's AVX-512 micro-kernel: a 12 x 32 tile of C in 24 of the 32 zmm registers (two
 * vectors of 16 columns per row), per k two loads of B's panel and 12 broadcasts of A's, each
 * broadcast feeding two FMAs. 24 independent accumulators cover the FMA latency (4 cycles) of
 * two FMA ports with room to spare. This is BLIS's skx sgemm tile (32 x 12, column-major) seen
 * row-major. Compiled for AVX-512F by target attribute; gemm_f32.c calls it only where cpuid
 * has AVX-512F. */
#include "kernels/cpu/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define MR 12
#define NR 32

__attribute__((target("avx512f"))) static void kernel_12x32(int kc, const float *restrict pa,
                                                            const float *restrict pb, float *c,
                                                            int ldc, int rows, int cols,
                                                            float alpha, float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        /* C's tile is read at the end: its 24 lines are on their way meanwhile */
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + 16), _MM_HINT_T0);
    }
    for (int k = 0; k < kc; k++, pa += MR, pb += NR) {
        __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(pa[i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    if (rows == MR && cols == NR) {
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            float *row = c + (size_t)i * ldc;
            for (int h = 0; h < 2; h++) {
                __m512 t = _mm512_mul_ps(va, acc[i][h]);
                if (beta == 0.0f)
                    _mm512_storeu_ps(row + 16 * h, t);
                else if (beta == 1.0f)
                    _mm512_storeu_ps(row + 16 * h, _mm512_add_ps(_mm512_loadu_ps(row + 16 * h), t));
                else
                    _mm512_storeu_ps(
                        row + 16 * h,
                        _mm512_add_ps(_mm512_mul_ps(vb, _mm512_loadu_ps(row + 16 * h)), t));
            }
        }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(64)));
    for (int i = 0; i < MR; i++) {
        _mm512_store_ps(tile + i * NR, acc[i][0]);
        _mm512_store_ps(tile + i * NR + 16, acc[i][1]);
    }
    gemm_f32_tile_update(c, ldc, tile, NR, rows, cols, alpha, beta);
}

/* kc 384: A's micro-panel 18 KB in L1 (48 KB); nb 640: B's block 960 KB of a 2 MB L2. Panels
 * packed with vector transposes (gemm_f32_pack_avx512.c). */
const GemmF32Kernel gemm_f32_kernel_avx512 = {.mr = MR,
                                              .nr = NR,
                                              .kc = 384,
                                              .mb = 4092,
                                              .nb_max = 640,
                                              .kernel = kernel_12x32,
                                              .pack = gemm_f32_pack_avx512};

#endif
