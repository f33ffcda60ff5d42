/* gemm_bf16's AVX2/FMA path (gemm_bf16_kernels.h), for CPUs without bf16 dot products: each bf16
 * value widened to fp32 exactly (a 16-bit shift), each product exact in fp32, summed by FMA.
 * A block is 4 rows x one 16-column panel: 8 ymm of sums, 4 of B's widened pair step, 2 of A's
 * broadcast values. Per element the sum runs over the depth in order, k = 0, 1, 2, ... */
#include "kernels/cpu/gemm_bf16_kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET     __attribute__((target("avx2,fma")))
#define BLOCK_ROWS 4
#define ROW_CHUNK  64 /* rows whose packed A stays in L2 while the panels pass by */

TARGET static void block_4x16(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                              const uint16_t *panel, int i0, int j0, int cols) {
    const uint16_t *row[BLOCK_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++)
        row[r] = a->data + (size_t)(i0 + r) * a->row_stride;
    __m256 sum[BLOCK_ROWS][2];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++)
        sum[r][0] = sum[r][1] = _mm256_setzero_ps();
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    int pairs = (a->depth + 1) / 2; /* past it the padding is zero */
    for (int q = 0; q < pairs; q++) {
        /* low half of each 32-bit lane: B[2q][j]; high half: B[2q + 1][j] */
        __m256i v0 = _mm256_load_si256((const __m256i *)(panel + (size_t)q * 32));
        __m256i v1 = _mm256_load_si256((const __m256i *)(panel + (size_t)q * 32 + 16));
        __m256 even0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
        __m256 odd0 = _mm256_castsi256_ps(_mm256_and_si256(v0, odd_mask));
        __m256 even1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
        __m256 odd1 = _mm256_castsi256_ps(_mm256_and_si256(v1, odd_mask));
#pragma GCC unroll 8
        for (int r = 0; r < BLOCK_ROWS; r++) {
            uint32_t p;
            memcpy(&p, row[r] + 2 * q, sizeof p);
            __m256 ae = _mm256_castsi256_ps(_mm256_set1_epi32((int)(p << 16)));
            __m256 ao = _mm256_castsi256_ps(_mm256_set1_epi32((int)(p & 0xffff0000u)));
            sum[r][0] = _mm256_fmadd_ps(ae, even0, sum[r][0]);
            sum[r][0] = _mm256_fmadd_ps(ao, odd0, sum[r][0]);
            sum[r][1] = _mm256_fmadd_ps(ae, even1, sum[r][1]);
            sum[r][1] = _mm256_fmadd_ps(ao, odd1, sum[r][1]);
        }
    }
    float buf[BLOCK_ROWS * GEMM_BF16_PANEL];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++) {
        _mm256_storeu_ps(buf + r * GEMM_BF16_PANEL, sum[r][0]);
        _mm256_storeu_ps(buf + r * GEMM_BF16_PANEL + 8, sum[r][1]);
    }
    gemm_bf16_store_block(c, ldc, st, buf, GEMM_BF16_PANEL, i0, j0,
                          a->rows - i0 < BLOCK_ROWS ? a->rows - i0 : BLOCK_ROWS, cols);
}

void gemm_bf16_run_avx2(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                        const Bf16PackedB *b) {
    int panels = (b->cols + GEMM_BF16_PANEL - 1) / GEMM_BF16_PANEL;
#pragma omp parallel for schedule(static) collapse(2)
    for (int i0 = 0; i0 < a->rows; i0 += ROW_CHUNK)
        for (int p = 0; p < panels; p++) {
            int j0 = p * GEMM_BF16_PANEL, end = i0 + ROW_CHUNK < a->rows ? i0 + ROW_CHUNK : a->rows;
            int cols = b->cols - j0 < GEMM_BF16_PANEL ? b->cols - j0 : GEMM_BF16_PANEL;
            for (int i = i0; i < end; i += BLOCK_ROWS)
                block_4x16(c, ldc, st, a, gemm_bf16_panel(b, p), i, j0, cols);
        }
}

#else

void gemm_bf16_run_avx2(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                        const Bf16PackedB *b) {
    (void)c, (void)ldc, (void)st, (void)a, (void)b;
    abort(); /* gemm_bf16_supported said no: unreachable */
}

#endif
