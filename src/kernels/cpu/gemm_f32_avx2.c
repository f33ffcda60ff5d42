/* gemm_f32's AVX2 micro-kernel: a 6 x 16 tile of C in 12 of the 16 ymm registers (two vectors
 * of 8 columns per row), per k two loads of B's panel and 6 broadcasts of A's; the tile of the
 * Haswell-era kernels (BLIS haswell: 16 x 6 column-major). Compiled for AVX2 and FMA by target
 * attribute; gemm_f32.c calls it only where cpuid has both. */
#include "kernels/cpu/gemm_f32_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define MR 6
#define NR 16

__attribute__((target("avx2,fma"))) static void kernel_6x16(int kc, const float *restrict pa,
                                                            const float *restrict pb, float *c,
                                                            int ldc, int rows, int cols,
                                                            float alpha, float beta) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, pa += MR, pb += NR) {
        __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    if (rows == MR && cols == NR) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            float *row = c + (size_t)i * ldc;
            for (int h = 0; h < 2; h++) {
                __m256 t = _mm256_mul_ps(va, acc[i][h]);
                if (beta == 0.0f)
                    _mm256_storeu_ps(row + 8 * h, t);
                else if (beta == 1.0f)
                    _mm256_storeu_ps(row + 8 * h, _mm256_add_ps(_mm256_loadu_ps(row + 8 * h), t));
                else
                    _mm256_storeu_ps(
                        row + 8 * h,
                        _mm256_add_ps(_mm256_mul_ps(vb, _mm256_loadu_ps(row + 8 * h)), t));
            }
        }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(32)));
    for (int i = 0; i < MR; i++) {
        _mm256_store_ps(tile + i * NR, acc[i][0]);
        _mm256_store_ps(tile + i * NR + 8, acc[i][1]);
    }
    gemm_f32_tile_update(c, ldc, tile, NR, rows, cols, alpha, beta);
}

/* kc 256: A's micro-panel 6 KB in L1; nb 768: B's block 768 KB in L2. */
const GemmF32Kernel gemm_f32_kernel_avx2 = {
    .mr = MR, .nr = NR, .kc = 256, .mb = 4092, .nb_max = 768, .kernel = kernel_6x16};

#endif
