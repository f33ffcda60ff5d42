/* gemm_f32's micro-kernel in plain C: a 4 x 8 tile, for CPUs without AVX2 (and other
 * architectures), and the simplest statement of what the SIMD kernels compute. */
#include "kernels/cpu/gemm_f32_kernels.h"

#define MR 4
#define NR 8

static void kernel_4x8(int kc, const float *restrict pa, const float *restrict pb, float *c,
                       int ldc, int rows, int cols, float alpha, float beta) {
    float acc[MR * NR] = {0};
    for (int k = 0; k < kc; k++, pa += MR, pb += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] += pa[i] * pb[j];
    gemm_f32_tile_update(c, ldc, acc, NR, rows, cols, alpha, beta);
}

const GemmF32Kernel gemm_f32_kernel_portable = {
    .mr = MR, .nr = NR, .kc = 256, .mb = 4092, .nb_max = 512, .kernel = kernel_4x8};
