/* Products of 6 to 128 rows (decoding several sequences at once) with a weight matrix that was
 * copied beforehand into the layout the register kernel reads.
 *
 * Why: for such a product BLAS copies all of W into its own panel layout on every call, and with
 * so few rows to share that copy it costs about a quarter of the product (a profile of batch-64
 * decoding: 18% of the time in OpenBLAS's copy routine, 61% in its kernel); below 17 rows the
 * dot-product path of matmul.c reads W once per 4 rows and is bound by its horizontal sums. The
 * weights do not change during a generate() call, so they are laid out once and every decode
 * step multiplies them in place, 6 rows x 16 features per register tile.
 *
 * Layout. The output features are cut into panels of PANEL_COLS; the input dimension into blocks
 * of BLOCK_DEPTH. Block b holds, for each panel in turn, its depth x PANEL_COLS weights with the
 * PANEL_COLS features of one input index adjacent: one vector load per 8 features. The input
 * rows are laid out alike per call (tiles of TILE_ROWS rows, the tile's rows adjacent per input
 * index), which is small next to W. Features past out_dim and rows past n are zero padding.
 *
 * Every output element is summed in the same order (index by index within a block, then block
 * after block), whatever the number of rows or threads: within the packed range (6 to 128 rows)
 * a sequence's logits do not depend on how many others decode beside it. */
#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

#define TILE_ROWS   6   /* input rows per register tile: 6 x 2 vector accumulators, 12 of 16 */
#define PANEL_COLS  16  /* output features per panel: two 8-float vectors */
#define BLOCK_DEPTH 512 /* a panel block (32 KB) stays in cache while every row tile reads it */
/* How far ahead of its reads a tile asks for the panel's next cache lines (32 input indices, 2
 * KB). Up to a few dozen rows a product is bound by reading W from memory, and the hardware
 * prefetcher alone left it ~15% slower (all of a 0.5B decode step's products: 8 rows 118 -> 97
 * ms, 16 rows 180 -> 155, 64 rows 534 -> 485; means of 3 alternated runs). */
#define PREFETCH_FLOATS 512

static int panel_count(int out_dim) {
    return (out_dim + PANEL_COLS - 1) / PANEL_COLS;
}

static int block_depth(int in_dim, int k0) {
    return in_dim - k0 < BLOCK_DEPTH ? in_dim - k0 : BLOCK_DEPTH;
}

bool packed_matmul_suits(int n) {
    return n >= PACKED_MATMUL_MIN_ROWS && n <= PACKED_MATMUL_MAX_ROWS;
}

size_t packed_weight_floats(int in_dim, int out_dim) {
    /* a multiple of 16 floats: the next weight's panels start on a cache line too */
    return (size_t)panel_count(out_dim) * PANEL_COLS * in_dim;
}

/* Panel pi's block at k0 (depth input indices): weight row f0 + j's values at k0.. in column j;
 * zeros for rows past out_dim. Reads the panel's rows side by side, writes it in order. */
static void fill_panel_block(float *panel, const float *w, int in_dim, int out_dim, int f0, int k0,
                             int depth) {
    const float *rows[PANEL_COLS];
    for (int j = 0; j < PANEL_COLS; j++)
        rows[j] = f0 + j < out_dim ? w + (size_t)(f0 + j) * in_dim + k0 : NULL;
    for (int k = 0; k < depth; k++, panel += PANEL_COLS)
        for (int j = 0; j < PANEL_COLS; j++)
            panel[j] = rows[j] ? rows[j][k] : 0.0f;
}

void packed_weight_fill(PackedWeight *p, float *dst, const float *w, int in_dim, int out_dim) {
    int panels = panel_count(out_dim);
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < panels; pi++)
        for (int k0 = 0; k0 < in_dim; k0 += BLOCK_DEPTH) {
            int depth = block_depth(in_dim, k0);
            float *block = dst + (size_t)k0 * panels * PANEL_COLS;
            fill_panel_block(block + (size_t)pi * depth * PANEL_COLS, w, in_dim, out_dim,
                             pi * PANEL_COLS, k0, depth);
        }
    *p = (PackedWeight){.panels = dst, .in_dim = in_dim, .out_dim = out_dim};
}

/* The input rows in tiles: block b, tile t holds depth x TILE_ROWS values, input index major.
 * Called by every thread of a parallel region: the tiles are shared out. */
static void pack_rows(float *d, const float *in, int n, int in_dim) {
    int tiles = (n + TILE_ROWS - 1) / TILE_ROWS;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; t++)
        for (int k0 = 0; k0 < in_dim; k0 += BLOCK_DEPTH) {
            int depth = block_depth(in_dim, k0);
            float *block = d + (size_t)k0 * tiles * TILE_ROWS;
            for (int i = 0; i < TILE_ROWS; i++) {
                int r = t * TILE_ROWS + i;
                float *dst = block + (size_t)t * depth * TILE_ROWS + i;
                for (int k = 0; k < depth; k++)
                    dst[(size_t)k * TILE_ROWS] = r < n ? in[(size_t)r * in_dim + k0 + k] : 0.0f;
            }
        }
}

/* Writes (or adds, for blocks after the first) a tile's sums to rows x cols of out. */
static void store_tile(float *out, size_t ld, float acc[TILE_ROWS][PANEL_COLS], int rows, int cols,
                       bool add) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            out[(size_t)i * ld + j] = add ? out[(size_t)i * ld + j] + acc[i][j] : acc[i][j];
}

#if HAVE_AVX2
/* Row i of a tile, when the tile has that row: its input value at this index times the panel's
 * two weight vectors. Twelve named accumulators, not an array: an array would be kept in memory
 * by the compiler. */
#define TILE_ROW_FMA(i)                                                                            \
    do {                                                                                           \
        if (rows > i) {                                                                            \
            __m256 a = _mm256_broadcast_ss(x + i);                                                 \
            c##i##a = _mm256_fmadd_ps(a, w0, c##i##a);                                             \
            c##i##b = _mm256_fmadd_ps(a, w1, c##i##b);                                             \
        }                                                                                          \
    } while (0)

/* One tile of `rows` (1..TILE_ROWS) rows x one panel over `depth` input indices. Inlined with
 * rows a constant, so a tile of fewer rows (the last one of n rows) does only its own FMAs: 8
 * rows cost a 6-row and a 2-row tile, not two 6-row ones. Each output's sum is the same chain of
 * FMAs whatever the tile's height. */
static inline __attribute__((always_inline)) void tile_rows(float *out, size_t ld, const float *x,
                                                            const float *w, int depth,
                                                            const int rows, int cols, bool add) {
    __m256 c0a = _mm256_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
    __m256 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
    for (int k = 0; k < depth; k++, x += TILE_ROWS, w += PANEL_COLS) {
        __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
        /* as an integer: past the last panel the address is outside W (harmless to a prefetch,
         * but not a pointer C lets us form) */
        _mm_prefetch((const char *)((uintptr_t)w + PREFETCH_FLOATS * sizeof(float)), _MM_HINT_T0);
        TILE_ROW_FMA(0);
        TILE_ROW_FMA(1);
        TILE_ROW_FMA(2);
        TILE_ROW_FMA(3);
        TILE_ROW_FMA(4);
        TILE_ROW_FMA(5);
    }
    const __m256 sums[TILE_ROWS][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b},
                                       {c3a, c3b}, {c4a, c4b}, {c5a, c5b}};
    if (cols == PANEL_COLS) { /* the common case: straight to out */
        for (int i = 0; i < rows; i++) {
            float *o = out + (size_t)i * ld;
            __m256 lo = sums[i][0], hi = sums[i][1];
            if (add) {
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(o));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(o + 8));
            }
            _mm256_storeu_ps(o, lo);
            _mm256_storeu_ps(o + 8, hi);
        }
        return;
    }
    float acc[TILE_ROWS][PANEL_COLS];
    for (int i = 0; i < rows; i++) {
        _mm256_storeu_ps(acc[i], sums[i][0]);
        _mm256_storeu_ps(acc[i] + 8, sums[i][1]);
    }
    store_tile(out, ld, acc, rows, cols, add);
}

static void tile_product(float *out, size_t ld, const float *x, const float *w, int depth, int rows,
                         int cols, bool add) {
    switch (rows) {
    case 1:
        tile_rows(out, ld, x, w, depth, 1, cols, add);
        break;
    case 2:
        tile_rows(out, ld, x, w, depth, 2, cols, add);
        break;
    case 3:
        tile_rows(out, ld, x, w, depth, 3, cols, add);
        break;
    case 4:
        tile_rows(out, ld, x, w, depth, 4, cols, add);
        break;
    case 5:
        tile_rows(out, ld, x, w, depth, 5, cols, add);
        break;
    default:
        tile_rows(out, ld, x, w, depth, TILE_ROWS, cols, add);
        break;
    }
}
#else
static void tile_product(float *out, size_t ld, const float *x, const float *w, int depth, int rows,
                         int cols, bool add) {
    float acc[TILE_ROWS][PANEL_COLS] = {{0}};
    for (int k = 0; k < depth; k++, x += TILE_ROWS, w += PANEL_COLS)
        for (int i = 0; i < TILE_ROWS; i++)
            for (int j = 0; j < PANEL_COLS; j++)
                acc[i][j] += x[i] * w[j];
    store_tile(out, ld, acc, rows, cols, add);
}
#endif

void packed_matmul_forward(float *out, const float *in, const PackedWeight *w, const float *bias,
                           int n) {
    if (n == 0) return;
    int in_dim = w->in_dim, out_dim = w->out_dim, panels = panel_count(out_dim);
    int tiles = (n + TILE_ROWS - 1) / TILE_ROWS;
    /* small: at most PACKED_MATMUL_MAX_ROWS rows where the product suits (few MB) */
    float *x = xmalloc((size_t)tiles * TILE_ROWS * in_dim * sizeof *x);
    /* Blocks in order; panels split between threads, each panel block read once from memory
     * and then from cache by every tile. No barrier between blocks: a static schedule over the
     * same number of panels gives every thread the same panels in each block (OpenMP guarantees
     * it), so each output is only ever added to by the thread that wrote it, block after block. */
#pragma omp parallel
    {
        pack_rows(x, in, n, in_dim);
        for (int k0 = 0; k0 < in_dim; k0 += BLOCK_DEPTH) {
            int depth = block_depth(in_dim, k0);
            const float *wb = w->panels + (size_t)k0 * panels * PANEL_COLS;
            const float *xb = x + (size_t)k0 * tiles * TILE_ROWS;
#pragma omp for schedule(static) nowait
            for (int pi = 0; pi < panels; pi++) {
                int cols =
                    out_dim - pi * PANEL_COLS < PANEL_COLS ? out_dim - pi * PANEL_COLS : PANEL_COLS;
                for (int t = 0; t < tiles; t++) {
                    int rows = n - t * TILE_ROWS < TILE_ROWS ? n - t * TILE_ROWS : TILE_ROWS;
                    tile_product(out + (size_t)t * TILE_ROWS * out_dim + (size_t)pi * PANEL_COLS,
                                 (size_t)out_dim, xb + (size_t)t * depth * TILE_ROWS,
                                 wb + (size_t)pi * depth * PANEL_COLS, depth, rows, cols, k0 > 0);
                }
            }
        }
    }
    free(x);
    bias_add_rows(out, bias, n, out_dim);
}
