/* Packed products with bf16 weights and bf16-rounded inputs, summed in fp32: decoding with a
 * model kept in bf16 (rlhf generate --bf16) on a CPU with AVX512_BF16 dot products.
 *
 * Why: on AMD Zen 5 one vdpbf16ps does the work of two fp32 FMAs in the same time (one core,
 * independent chains: 480 vs 261 GFLOP/s), and the weights are half the bytes. The inputs are
 * rounded to bf16 (nearest, ties to even), as torch's bf16 autocast rounds a matmul's inputs;
 * each product of two bf16 values is exact in fp32 and the sums are fp32.
 *
 * Layout, as packed_matmul.c's with input indices in pairs: a panel's step holds, for each of
 * its PANEL_COLS features, the weights at input indices 2q and 2q + 1 side by side (the two
 * halves of one 32-bit lane, the order vdpbf16ps pairs them in); an input row's step is its two
 * values at 2q and 2q + 1, likewise one 32-bit word. An odd in_dim gets a zero last index. Every
 * tile is TILE_ROWS rows (padding rows are zero): decoding a few rows is bound by reading W, and
 * from 8 rows up the tiles are full.
 *
 * Every output element is summed in the same order whatever the number of rows or threads. */
#include "common/error.h"
#include "common/float16.h"
#include "kernels/cpu/kernels.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_BF16_DOT 1
#else
#define HAVE_BF16_DOT 0
#endif

#define PANEL_COLS               32 /* output features per panel: two vectors of 16 fp32 sums */
#define TILE_ROWS                8
#define STEP_BYTES               (PANEL_COLS * 2 * sizeof(uint16_t)) /* one pair step of a panel: 128 */
#define BLOCK_PAIRS              512 /* 1024 input indices, 64 KB per panel block: as packed_matmul.c's */
#define CHUNK_ROWS               256
#define LONE_TILE_PREFETCH_BYTES 2048 /* packed_matmul.c: PREFETCH_FLOATS */

bool packed_bf16_available(void) {
    return HAVE_BF16_DOT;
}

static int pair_count(int in_dim) {
    return (in_dim + 1) / 2;
}

static int panel_count(int out_dim) {
    return (out_dim + PANEL_COLS - 1) / PANEL_COLS;
}

static int block_pairs(int pairs, int q0) {
    return pairs - q0 < BLOCK_PAIRS ? pairs - q0 : BLOCK_PAIRS;
}

size_t packed_weight_bf16_count(int in_dim, int out_dim) {
    return (size_t)panel_count(out_dim) * PANEL_COLS * 2 * pair_count(in_dim);
}

/* Panel pi's block at pair q0 (depth pairs): weight row f0 + j's values at 2q, 2q + 1 in column
 * j; zeros past out_dim and in_dim. */
static void fill_panel_block(uint16_t *panel, const uint16_t *w, int in_dim, int out_dim, int f0,
                             int q0, int depth) {
    for (int q = q0; q < q0 + depth; q++)
        for (int j = 0; j < PANEL_COLS; j++, panel += 2)
            for (int h = 0; h < 2; h++) {
                int k = 2 * q + h;
                panel[h] = f0 + j < out_dim && k < in_dim ? w[(size_t)(f0 + j) * in_dim + k] : 0;
            }
}

void packed_weight_fill_bf16(PackedWeight *p, uint16_t *dst, const uint16_t *w, int in_dim,
                             int out_dim) {
    int panels = panel_count(out_dim), pairs = pair_count(in_dim);
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < panels; pi++)
        for (int q0 = 0; q0 < pairs; q0 += BLOCK_PAIRS) {
            int depth = block_pairs(pairs, q0);
            uint16_t *block = dst + (size_t)q0 * panels * PANEL_COLS * 2;
            fill_panel_block(block + (size_t)pi * depth * PANEL_COLS * 2, w, in_dim, out_dim,
                             pi * PANEL_COLS, q0, depth);
        }
    *p = (PackedWeight){.panels16 = dst, .in_dim = in_dim, .out_dim = out_dim};
}

/* The input rows in tiles, rounded to bf16: block at q0, tile t holds depth x TILE_ROWS words
 * (a row's values at 2q and 2q + 1), pair major. Called by every thread of a parallel region. */
static void pack_rows(uint32_t *d, const float *in, int n, int in_dim) {
    int tiles = (n + TILE_ROWS - 1) / TILE_ROWS, pairs = pair_count(in_dim);
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; t++)
        for (int q0 = 0; q0 < pairs; q0 += BLOCK_PAIRS) {
            int depth = block_pairs(pairs, q0);
            uint32_t *block = d + (size_t)q0 * tiles * TILE_ROWS + (size_t)t * depth * TILE_ROWS;
            for (int i = 0; i < TILE_ROWS; i++) {
                int r = t * TILE_ROWS + i;
                uint32_t *dst = block + i;
                if (r >= n) { /* a padding row */
                    for (int q = 0; q < depth; q++)
                        dst[(size_t)q * TILE_ROWS] = 0;
                    continue;
                }
                const float *src = in + (size_t)r * in_dim + 2 * q0;
                /* pairs with both values; an odd in_dim's last has only its first */
                int whole = 2 * (q0 + depth) <= in_dim ? depth : depth - 1, q = 0;
#if HAVE_BF16_DOT
                /* 16 pairs at a time, rounded by the CPU (the same nearest-even rounding; it
                 * flushes subnormal inputs to zero): one rounding per value otherwise cost ~9% of
                 * a batch-64 decode step (the 128-wide k and v products repack their input) */
                for (; q + 16 <= whole; q += 16) {
                    uint32_t words[16];
                    _mm512_storeu_si512(
                        words, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 2 * q + 16),
                                                            _mm512_loadu_ps(src + 2 * q)));
                    for (int j = 0; j < 16; j++)
                        dst[(size_t)(q + j) * TILE_ROWS] = words[j];
                }
#endif
                for (; q < whole; q++)
                    dst[(size_t)q * TILE_ROWS] =
                        f32_to_bf16(src[2 * q]) | (uint32_t)f32_to_bf16(src[2 * q + 1]) << 16;
                if (whole < depth) dst[(size_t)whole * TILE_ROWS] = f32_to_bf16(src[2 * whole]);
            }
        }
}

/* Writes (or adds, for blocks after the first) a tile's sums, acc[i][j] for row i and feature j,
 * to its first rows x cols outputs. */
static void store_tile(float *out, size_t ld, const float acc[TILE_ROWS][PANEL_COLS], int rows,
                       int cols, bool add) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            out[(size_t)i * ld + j] = add ? out[(size_t)i * ld + j] + acc[i][j] : acc[i][j];
}

#if HAVE_BF16_DOT
/* Row i of the tile: its pair of inputs at this step times the panel's two weight vectors.
 * Named accumulators, not an array, so that they stay in registers. */
#define TILE_ROW_DOT(i)                                                                            \
    do {                                                                                           \
        __m512bh a = (__m512bh)_mm512_set1_epi32((int)x[i]);                                       \
        c##i##a = _mm512_dpbf16_ps(c##i##a, a, w0);                                                \
        c##i##b = _mm512_dpbf16_ps(c##i##b, a, w1);                                                \
    } while (0)
#define TILE_ROW_SAVE(i)                                                                           \
    do {                                                                                           \
        _mm512_storeu_ps(acc[i], c##i##a);                                                         \
        _mm512_storeu_ps(acc[i] + 16, c##i##b);                                                    \
    } while (0)

/* One tile x one panel over `depth` pairs, asking for the cache line at `ahead` and the next
 * every step (ahead moving ahead_stride bytes a step: see packed_matmul.c). */
static void tile_product(float *out, size_t ld, const uint32_t *x, const uint16_t *w, int depth,
                         int rows, int cols, bool add, uintptr_t ahead, int ahead_stride) {
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
    __m512 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a;
    __m512 c7a = c0a, c7b = c0a;
    for (int q = 0; q < depth; q++, x += TILE_ROWS, w += PANEL_COLS * 2) {
        __m512bh w0 = (__m512bh)_mm512_load_si512(w), w1 = (__m512bh)_mm512_load_si512(w + 32);
        _mm_prefetch((const char *)ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)(ahead + 64), _MM_HINT_T0);
        ahead += (uintptr_t)ahead_stride;
        TILE_ROW_DOT(0);
        TILE_ROW_DOT(1);
        TILE_ROW_DOT(2);
        TILE_ROW_DOT(3);
        TILE_ROW_DOT(4);
        TILE_ROW_DOT(5);
        TILE_ROW_DOT(6);
        TILE_ROW_DOT(7);
    }
    float acc[TILE_ROWS][PANEL_COLS];
    TILE_ROW_SAVE(0);
    TILE_ROW_SAVE(1);
    TILE_ROW_SAVE(2);
    TILE_ROW_SAVE(3);
    TILE_ROW_SAVE(4);
    TILE_ROW_SAVE(5);
    TILE_ROW_SAVE(6);
    TILE_ROW_SAVE(7);
    store_tile(out, ld, acc, rows, cols, add);
}
#else
/* Without the instruction (packed_bf16_available() is false, so only tests get here): the same
 * products, exact in fp32, each pair summed before it joins the sum. */
static void tile_product(float *out, size_t ld, const uint32_t *x, const uint16_t *w, int depth,
                         int rows, int cols, bool add, uintptr_t ahead, int ahead_stride) {
    (void)ahead, (void)ahead_stride;
    float acc[TILE_ROWS][PANEL_COLS] = {{0}};
    for (int q = 0; q < depth; q++, x += TILE_ROWS, w += PANEL_COLS * 2)
        for (int i = 0; i < TILE_ROWS; i++)
            for (int j = 0; j < PANEL_COLS; j++)
                acc[i][j] += bf16_to_f32((uint16_t)x[i]) * bf16_to_f32(w[2 * j]) +
                             bf16_to_f32((uint16_t)(x[i] >> 16)) * bf16_to_f32(w[2 * j + 1]);
    store_tile(out, ld, acc, rows, cols, add);
}
#endif

/* out (n rows, n <= CHUNK_ROWS) = x · W^T, x already packed; every thread of a parallel region
 * calls it. The order of packed_matmul.c's multiply_packed_rows, and its prefetch: with several
 * tiles each asks for its share of the next panel block, a lone tile for the lines 2 KB ahead. */
static void multiply_packed_rows(float *out, const uint32_t *x, const PackedWeight *w, int n) {
    int out_dim = w->out_dim, panels = panel_count(out_dim), pairs = pair_count(w->in_dim);
    int tiles = (n + TILE_ROWS - 1) / TILE_ROWS;
    int ahead_stride = tiles == 1 ? (int)STEP_BYTES : ((int)STEP_BYTES + tiles - 1) / tiles;
    for (int q0 = 0; q0 < pairs; q0 += BLOCK_PAIRS) {
        int depth = block_pairs(pairs, q0);
        const uint16_t *wb = w->panels16 + (size_t)q0 * panels * PANEL_COLS * 2;
        const uint32_t *xb = x + (size_t)q0 * tiles * TILE_ROWS;
#pragma omp for schedule(static) nowait
        for (int pi = 0; pi < panels; pi++) {
            int cols =
                out_dim - pi * PANEL_COLS < PANEL_COLS ? out_dim - pi * PANEL_COLS : PANEL_COLS;
            const uint16_t *panel = wb + (size_t)pi * depth * PANEL_COLS * 2;
            for (int t = 0; t < tiles; t++) {
                int rows = n - t * TILE_ROWS < TILE_ROWS ? n - t * TILE_ROWS : TILE_ROWS;
                size_t lead = tiles == 1 ? LONE_TILE_PREFETCH_BYTES
                                         : (size_t)depth * (STEP_BYTES + (size_t)t * ahead_stride);
                /* an integer: past the last panel the address is outside W */
                uintptr_t ahead = (uintptr_t)panel + lead;
                tile_product(out + (size_t)t * TILE_ROWS * out_dim + (size_t)pi * PANEL_COLS,
                             (size_t)out_dim, xb + (size_t)t * depth * TILE_ROWS, panel, depth,
                             rows, cols, q0 > 0, ahead, ahead_stride);
            }
        }
    }
}

void packed_matmul_bf16_forward(float *out, const float *in, const PackedWeight *w,
                                const float *bias, int n) {
    if (n == 0) return;
    int chunk = n < CHUNK_ROWS ? n : CHUNK_ROWS;
    size_t words = (size_t)(chunk + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS * pair_count(w->in_dim);
    uint32_t *x = xmalloc(words * sizeof *x);
#pragma omp parallel
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int rows = n - r0 < chunk ? n - r0 : chunk;
        pack_rows(x, in + (size_t)r0 * w->in_dim, rows, w->in_dim); /* ends with a barrier */
        multiply_packed_rows(out + (size_t)r0 * w->out_dim, x, w, rows);
        /* every thread done with x before the next chunk is packed into it; after the last (the
         * only one, decoding) the region's own barrier does (the test is the same in every
         * thread, so all meet it or none) */
        if (r0 + chunk < n) {
#pragma omp barrier
        }
    }
    free(x);
    bias_add_rows(out, bias, n, w->out_dim);
}
