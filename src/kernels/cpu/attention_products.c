/* attention_product: an 8 x 32 tile of C in 16 zmm accumulators, A broadcast from where it lies
 * (8 row pointers; a transposed A is 8 consecutive floats of one stored row), B's 32 columns two
 * vector loads of one row, masked at the right edge. 8 rows divide attention's 64-row query
 * blocks; a tile at the bottom edge reads row 0 again for its missing rows and stores none of
 * them. */
#include "kernels/cpu/attention_products.h"

#include "kernels/cpu/gemm_f32.h"

#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TILE_ROWS 8
#define TILE_COLS 32

__attribute__((target("avx512f"))) static void tile_8x32(bool trans_a, int rows, int cols, int k,
                                                         float alpha, const float *a, int lda,
                                                         const float *b, int ldb, float beta,
                                                         float *c, int ldc) {
    /* element (i, l) of op(A) is a_row[i][l * a_step] */
    const float *a_row[TILE_ROWS];
    size_t a_step = trans_a ? (size_t)lda : 1;
    for (int i = 0; i < TILE_ROWS; i++) {
        int r = i < rows ? i : 0;
        a_row[i] = trans_a ? a + r : a + (size_t)r * lda;
    }
    __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    __m512 acc[TILE_ROWS][2];
#pragma GCC unroll 8
    for (int i = 0; i < TILE_ROWS; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int l = 0; l < k; l++) {
        const float *bl = b + (size_t)l * ldb;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, bl), b1 = _mm512_maskz_loadu_ps(m1, bl + 16);
        size_t at = (size_t)l * a_step;
#pragma GCC unroll 8
        for (int i = 0; i < TILE_ROWS; i++) {
            __m512 av = _mm512_set1_ps(a_row[i][at]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int i = 0; i < TILE_ROWS; i++) {
        if (i >= rows) break;
        float *ci = c + (size_t)i * ldc;
        __m512 r0 = _mm512_mul_ps(acc[i][0], va), r1 = _mm512_mul_ps(acc[i][1], va);
        if (beta != 0.0f) {
            r0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), r0);
            r1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, m0, r0);
        _mm512_mask_storeu_ps(ci + 16, m1, r1);
    }
}

static bool have_avx512(void) {
    return __builtin_cpu_supports("avx512f");
}
#else
#define TILE_ROWS 8
#define TILE_COLS 32
static void tile_8x32(bool trans_a, int rows, int cols, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
    (void)trans_a, (void)rows, (void)cols, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
    (void)ldb, (void)beta, (void)c, (void)ldc;
}
static bool have_avx512(void) {
    return false;
}
#endif

static int clamp(int x, int lo, int hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/* ATTN_CAUSAL_OUTPUT's left-out part: C(i, j) = 0 for j > i + diag. */
static void zero_upper(int m, int n, float *c, int ldc, int diag) {
    for (int i = 0; i < m; i++)
        for (int j = clamp(i + diag + 1, 0, n); j < n; j++)
            c[(size_t)i * ldc + j] = 0.0f;
}

void attention_product_fallback(bool trans_a, int m, int n, int k, float alpha, const float *a,
                                int lda, const float *b, int ldb, float beta, float *c, int ldc,
                                AttnShape shape, int diag) {
    gemm_f32(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (shape == ATTN_CAUSAL_OUTPUT) zero_upper(m, n, c, ldc, diag);
}

void attention_product(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                       int diag) {
    if (!have_avx512()) {
        attention_product_fallback(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape,
                                   diag);
        return;
    }
    if (m <= 0 || n <= 0) return;
    /* column tiles outer: B's 32-column panel (k rows) stays in cache across the row tiles */
    for (int j = 0; j < n; j += TILE_COLS) {
        int cols = n - j < TILE_COLS ? n - j : TILE_COLS;
        for (int i = 0; i < m; i += TILE_ROWS) {
            int rows = m - i < TILE_ROWS ? m - i : TILE_ROWS;
            float *ci = c + (size_t)i * ldc + j;
            int l0 = 0, l1 = k; /* the depth this tile sums over */
            if (shape == ATTN_CAUSAL_OUTPUT && j > i + rows - 1 + diag)
                continue; /* no row of the tile sees its columns: zeroed below */
            if (shape == ATTN_CAUSAL_DEPTH && !trans_a) l1 = clamp(i + rows + diag, 0, k);
            if (shape == ATTN_CAUSAL_DEPTH && trans_a) l0 = clamp(i - diag, 0, k);
            const float *ai = trans_a ? a + (size_t)l0 * lda + i : a + (size_t)i * lda + l0;
            tile_8x32(trans_a, rows, cols, l1 - l0, alpha, ai, lda, b + (size_t)l0 * ldb + j, ldb,
                      beta, ci, ldc);
        }
    }
    if (shape == ATTN_CAUSAL_OUTPUT) zero_upper(m, n, c, ldc, diag);
}
