/* gemm_bf16's AVX512_BF16 path (gemm_bf16_kernels.h): vdpbf16ps adds, per fp32 lane, the two
 * products of a bf16 pair of A (broadcast) and of B's pair step (one zmm of a panel). A block is
 * 8 rows x 32 columns (two panels): 16 zmm of sums, 2 of B, 1 broadcast. Per element the sum runs
 * over the depth one pair at a time, in order; within a pair the instruction's own order. */
#include "kernels/cpu/gemm_bf16_kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET     __attribute__((target("avx512f,avx512bf16")))
#define BLOCK_ROWS 8
#define BLOCK_COLS (2 * GEMM_BF16_PANEL)
#define ROW_CHUNK  64 /* rows whose packed A stays in L2 while the panels pass by */

TARGET static void block_8x32(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                              const uint16_t *panel0, const uint16_t *panel1, int i0, int j0,
                              int cols) {
    const uint16_t *row[BLOCK_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++)
        row[r] = a->data + (size_t)(i0 + r) * a->row_stride;
    __m512 sum[BLOCK_ROWS][2];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++)
        sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    int pairs = (a->depth + 1) / 2; /* past it the padding is zero */
    for (int q = 0; q < pairs; q++) {
        __m512i b0 = _mm512_load_si512(panel0 + (size_t)q * 32);
        __m512i b1 = _mm512_load_si512(panel1 + (size_t)q * 32);
#pragma GCC unroll 8
        for (int r = 0; r < BLOCK_ROWS; r++) {
            uint32_t p;
            memcpy(&p, row[r] + 2 * q, sizeof p);
            __m512i av = _mm512_set1_epi32((int)p);
            sum[r][0] = _mm512_dpbf16_ps(sum[r][0], (__m512bh)av, (__m512bh)b0);
            sum[r][1] = _mm512_dpbf16_ps(sum[r][1], (__m512bh)av, (__m512bh)b1);
        }
    }
    float buf[BLOCK_ROWS * BLOCK_COLS];
#pragma GCC unroll 8
    for (int r = 0; r < BLOCK_ROWS; r++) {
        _mm512_storeu_ps(buf + r * BLOCK_COLS, sum[r][0]);
        _mm512_storeu_ps(buf + r * BLOCK_COLS + 16, sum[r][1]);
    }
    gemm_bf16_store_block(c, ldc, st, buf, BLOCK_COLS, i0, j0,
                          a->rows - i0 < BLOCK_ROWS ? a->rows - i0 : BLOCK_ROWS, cols);
}

void gemm_bf16_run_avx512(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                          const Bf16PackedB *b) {
    int blocks = (b->cols + BLOCK_COLS - 1) / BLOCK_COLS; /* cols_padded holds whole ones */
#pragma omp parallel for schedule(static) collapse(2)
    for (int i0 = 0; i0 < a->rows; i0 += ROW_CHUNK)
        for (int jb = 0; jb < blocks; jb++) {
            int j0 = jb * BLOCK_COLS, end = i0 + ROW_CHUNK < a->rows ? i0 + ROW_CHUNK : a->rows;
            int cols = b->cols - j0 < BLOCK_COLS ? b->cols - j0 : BLOCK_COLS;
            for (int i = i0; i < end; i += BLOCK_ROWS)
                block_8x32(c, ldc, st, a, gemm_bf16_panel(b, 2 * jb),
                           gemm_bf16_panel(b, 2 * jb + 1), i, j0, cols);
        }
}

#else

void gemm_bf16_run_avx512(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                          const Bf16PackedB *b) {
    (void)c, (void)ldc, (void)st, (void)a, (void)b;
    abort(); /* gemm_bf16_supported said no: unreachable */
}

#endif
