/* Products of 6 rows or more (decoding several sequences at once; with AVX-512 also prefilling
 * their prompts) with a weight matrix that was copied beforehand into the layout the register
 * kernel reads.
 *
 * Why: for such a product BLAS copies all of W into its own panel layout on every call, and with
 * so few rows to share that copy it costs about a quarter of the product (a profile of batch-64
 * decoding: 18% of the time in OpenBLAS's copy routine, 61% in its kernel); below 17 rows the
 * dot-product path of matmul.c reads W once per 4 rows and is bound by its horizontal sums. The
 * weights do not change during a generate() call, so they are laid out once and every decode
 * step multiplies them in place, a register tile of rows x features at a time: 6 x 16 with AVX2,
 * 12 x 32 with AVX-512 (the training GEMM's tile, gemm_f32_avx512.c), whose FMAs do twice the work
 * where the CPU runs them full width (AMD Zen 5: batch-64 decoding of the 0.5B shape 194 -> 311
 * tok/s against the AVX2 tile, both compiled for the machine; OpenBLAS's own kernels there are the
 * AVX2 ones this workplace pins with OPENBLAS_CORETYPE=Haswell).
 *
 * Layout. The output features are cut into panels of PANEL_COLS; the input dimension into blocks
 * of BLOCK_DEPTH. Block b holds, for each panel in turn, its depth x PANEL_COLS weights with the
 * PANEL_COLS features of one input index adjacent: one vector load per vector of features. The
 * input rows are laid out alike per call (tiles of TILE_ROWS rows, the tile's rows adjacent per
 * input index), which is small next to W. Features past out_dim and rows past n are zero padding.
 *
 * Every output element is summed in the same order (index by index within a block, then block
 * after block), whatever the number of rows or threads: within the packed range
 * (packed_matmul_suits) a sequence's logits do not depend on how many others decode beside it. */
#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The register tile: TILE_ROWS input rows x one panel of PANEL_COLS output features (two vectors),
 * 2 x TILE_ROWS accumulators. AVX-512 (32 registers of 16 floats): 12 x 32, 24 of the registers;
 * AVX2 (16 registers of 8 floats): 6 x 16, 12 of them. 12 rows against the 8 this kernel had:
 * each panel vector loaded serves 12 FMAs, not 8 (one thread, 64 rows, the 135M shape's products
 * 576 -> 1536 148-151 -> 158-160 GFLOP per CPU-second, 1536 -> 576 141 -> 150; alternated runs,
 * bench_packed_matmul, against a 226 FMA peak). */
#if defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_SIMD 1
typedef __m512 vec;
#define VEC_FLOATS 16
#define TILE_ROWS  12
#define vec_zero   _mm512_setzero_ps
#define vec_load   _mm512_load_ps
#define vec_loadu  _mm512_loadu_ps
#define vec_storeu _mm512_storeu_ps
#define vec_set1   _mm512_set1_ps
#define vec_fmadd  _mm512_fmadd_ps
#define vec_add    _mm512_add_ps
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_SIMD  1
typedef __m256 vec;
#define VEC_FLOATS 8
#define TILE_ROWS  6
#define vec_zero   _mm256_setzero_ps
#define vec_load   _mm256_load_ps
#define vec_loadu  _mm256_loadu_ps
#define vec_storeu _mm256_storeu_ps
#define vec_set1   _mm256_set1_ps
#define vec_fmadd  _mm256_fmadd_ps
#define vec_add    _mm256_add_ps
#else
#define VEC_FLOATS 8
#define TILE_ROWS  6
#endif

#define PANEL_COLS (2 * VEC_FLOATS) /* output features per panel: two vectors */
/* A panel block (128 KB with AVX-512) stays in the core's L2 while every row tile reads it. Deep
 * enough that a hidden size up to 1024 is one block: each output is then written once, not
 * re-read and added to per block, which for the lm_head's many outputs (64 rows x 151936 = 39 MB)
 * was memory traffic of its own (Zen 5, 896 -> 151936 at 64 rows: 380 -> 493 GFLOP/s against 256
 * deep blocks; the other 0.5B shapes within noise). */
#define BLOCK_DEPTH 1024
/* How far ahead of its reads a lone tile (a product of up to TILE_ROWS rows) asks for the panel's
 * next cache lines (2 KB), every line (an AVX-512 step reads two). Such a product is bound by
 * reading W from memory, and the hardware prefetcher alone left it ~15% slower (all of a 0.5B
 * decode step's products, AVX2: 8 rows 118 -> 97 ms; means of 3 alternated runs). Asking for only
 * the first of an AVX-512 step's two lines left batch-8 decoding 1-5% slower (6 alternated pairs,
 * Zen 5). With several tiles, see multiply_packed_rows. */
#define PREFETCH_FLOATS 512

static int panel_count(int out_dim) {
    return (out_dim + PANEL_COLS - 1) / PANEL_COLS;
}

/* The rows each tile of an n-row product takes: as few tiles as TILE_ROWS allows, their heights
 * evened out (16 rows at 12 a tile: 8 + 8, not 12 + 4, whose 4-row tile reads the panel for a
 * third of the FMAs; 64: five of 11 and one of 9). The heights change no output's sum. */
static int tile_height(int n) {
    int tiles = (n + TILE_ROWS - 1) / TILE_ROWS;
    return (n + tiles - 1) / tiles;
}

static int block_depth(int in_dim, int k0) {
    return in_dim - k0 < BLOCK_DEPTH ? in_dim - k0 : BLOCK_DEPTH;
}

bool packed_matmul_suits(int n) {
    return n >= PACKED_MATMUL_MIN_ROWS && n <= PACKED_MATMUL_MAX_ROWS;
}

size_t packed_weight_floats(int in_dim, int out_dim) {
    /* a multiple of PANEL_COLS (16 or 32) floats: the next weight's panels start on a cache line
     * too */
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
    int height = tile_height(n), tiles = (n + height - 1) / height;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; t++)
        for (int k0 = 0; k0 < in_dim; k0 += BLOCK_DEPTH) {
            int depth = block_depth(in_dim, k0);
            float *block = d + (size_t)k0 * tiles * TILE_ROWS;
            for (int i = 0; i < TILE_ROWS; i++) {
                int r = i < height ? t * height + i : n; /* rows past the tile's height: zero */
                float *dst = block + (size_t)t * depth * TILE_ROWS + i;
                for (int k = 0; k < depth; k++)
                    dst[(size_t)k * TILE_ROWS] = r < n ? in[(size_t)r * in_dim + k0 + k] : 0.0f;
            }
        }
}

#if HAVE_SIMD
/* Writes (or adds, for blocks after the first) one row of a tile's sums to the row's first cols
 * (up to PANEL_COLS) outputs. */
static inline void store_row(float *o, vec lo, vec hi, int cols, bool add) {
    if (cols == PANEL_COLS) { /* the common case: straight to out */
        if (add) {
            lo = vec_add(lo, vec_loadu(o));
            hi = vec_add(hi, vec_loadu(o + VEC_FLOATS));
        }
        vec_storeu(o, lo);
        vec_storeu(o + VEC_FLOATS, hi);
        return;
    }
    float sums[PANEL_COLS];
    vec_storeu(sums, lo);
    vec_storeu(sums + VEC_FLOATS, hi);
    for (int j = 0; j < cols; j++)
        o[j] = add ? o[j] + sums[j] : sums[j];
}

/* Row i of a tile, when the tile has that row: its input value at this index times the panel's
 * two weight vectors. Named accumulators, not an array: an array would be kept in memory by the
 * compiler. */
#define TILE_ROW_FMA(i)                                                                            \
    do {                                                                                           \
        if (rows > i) {                                                                            \
            vec a = vec_set1(x[i]);                                                                \
            c##i##a = vec_fmadd(a, w0, c##i##a);                                                   \
            c##i##b = vec_fmadd(a, w1, c##i##b);                                                   \
        }                                                                                          \
    } while (0)
#define TILE_ROW_STORE(i)                                                                          \
    do {                                                                                           \
        if (rows > i) store_row(out + (size_t)i * ld, c##i##a, c##i##b, cols, add);                \
    } while (0)

/* One tile of `rows` (1..TILE_ROWS) rows x one panel over `depth` input indices. Inlined with
 * rows a constant, so a tile of fewer rows (the last one of n rows) does only its own FMAs: 8
 * rows at 6 per tile cost a 6-row and a 2-row tile, not two 6-row ones. Each output's sum is the
 * same chain of FMAs whatever the tile's height. */
static inline __attribute__((always_inline)) void tile_rows(float *out, size_t ld, const float *x,
                                                            const float *w, int depth,
                                                            const int rows, int cols, bool add,
                                                            uintptr_t ahead, int ahead_stride) {
    vec c0a = vec_zero(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a;
    vec c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a;
    vec c7b = c0a, c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a,
        c11b = c0a;
    for (int k = 0; k < depth; k++, x += TILE_ROWS, w += PANEL_COLS) {
        vec w0 = vec_load(w), w1 = vec_load(w + VEC_FLOATS);
        /* two 64-byte lines a step: the stride is at most a step's PANEL_COLS floats (128 bytes
         * with AVX-512) */
        _mm_prefetch((const char *)ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)(ahead + 64), _MM_HINT_T0);
        ahead += (uintptr_t)ahead_stride * sizeof(float);
        TILE_ROW_FMA(0);
        TILE_ROW_FMA(1);
        TILE_ROW_FMA(2);
        TILE_ROW_FMA(3);
        TILE_ROW_FMA(4);
        TILE_ROW_FMA(5);
        TILE_ROW_FMA(6);
        TILE_ROW_FMA(7);
        TILE_ROW_FMA(8);
        TILE_ROW_FMA(9);
        TILE_ROW_FMA(10);
        TILE_ROW_FMA(11);
    }
    TILE_ROW_STORE(0);
    TILE_ROW_STORE(1);
    TILE_ROW_STORE(2);
    TILE_ROW_STORE(3);
    TILE_ROW_STORE(4);
    TILE_ROW_STORE(5);
    TILE_ROW_STORE(6);
    TILE_ROW_STORE(7);
    TILE_ROW_STORE(8);
    TILE_ROW_STORE(9);
    TILE_ROW_STORE(10);
    TILE_ROW_STORE(11);
}

static void tile_product(float *out, size_t ld, const float *x, const float *w, int depth, int rows,
                         int cols, bool add, uintptr_t ahead, int ahead_stride) {
    /* one inlined copy per height, the height a constant in each */
#define TILE_CASE(r)                                                                               \
    case r:                                                                                        \
        tile_rows(out, ld, x, w, depth, r, cols, add, ahead, ahead_stride);                        \
        break
    switch (rows) {
        TILE_CASE(1);
        TILE_CASE(2);
        TILE_CASE(3);
        TILE_CASE(4);
        TILE_CASE(5);
#if TILE_ROWS > 6
        TILE_CASE(6);
        TILE_CASE(7);
        TILE_CASE(8);
        TILE_CASE(9);
        TILE_CASE(10);
        TILE_CASE(11);
#endif
    default:
        tile_rows(out, ld, x, w, depth, TILE_ROWS, cols, add, ahead, ahead_stride);
        break;
    }
#undef TILE_CASE
}
#else
static void tile_product(float *out, size_t ld, const float *x, const float *w, int depth, int rows,
                         int cols, bool add, uintptr_t ahead, int ahead_stride) {
    (void)ahead, (void)ahead_stride; /* no prefetch without intrinsics */
    float acc[TILE_ROWS][PANEL_COLS] = {{0}};
    for (int k = 0; k < depth; k++, x += TILE_ROWS, w += PANEL_COLS)
        for (int i = 0; i < TILE_ROWS; i++)
            for (int j = 0; j < PANEL_COLS; j++)
                acc[i][j] += x[i] * w[j];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            out[(size_t)i * ld + j] = add ? out[(size_t)i * ld + j] + acc[i][j] : acc[i][j];
}
#endif

/* Rows of the packed input per pass over W: enough that each panel block read serves many tiles,
 * few enough that their packed copy stays in the caches while every panel reads it. */
#define CHUNK_ROWS 256

/* out (n rows, n <= CHUNK_ROWS) = x · W^T, x already packed. Called by every thread of a
 * parallel region. Blocks in order; panels split between threads, each panel block read once
 * from memory and then from cache by every tile. No barrier between blocks: a static schedule
 * over the same number of panels gives every thread the same panels in each block (OpenMP
 * guarantees it), so each output is only ever added to by the thread that wrote it, block after
 * block.
 *
 * Prefetch. With several tiles the first one to read a panel block would wait on memory while
 * the others read it from cache; so each tile asks for its share of the next panel block instead
 * (the one after it in memory: the thread's next, or for its last panel of a block another
 * thread's), and the first tile finds its panel block in cache too (Zen 5, 64 rows, the 0.5B
 * shapes: 896 -> 4864 421 -> 490 GFLOP/s, 4864 -> 896 400 -> 460, 896 -> 151936 346 -> 385).
 * A lone tile reads its panel block once and asks for the lines PREFETCH_FLOATS ahead. */
static void multiply_packed_rows(float *out, const float *x, const PackedWeight *w, int n) {
    int in_dim = w->in_dim, out_dim = w->out_dim, panels = panel_count(out_dim);
    int height = tile_height(n), tiles = (n + height - 1) / height;
    int ahead_stride = tiles == 1 ? PANEL_COLS : (PANEL_COLS + tiles - 1) / tiles; /* per step */
    for (int k0 = 0; k0 < in_dim; k0 += BLOCK_DEPTH) {
        int depth = block_depth(in_dim, k0);
        const float *wb = w->panels + (size_t)k0 * panels * PANEL_COLS;
        const float *xb = x + (size_t)k0 * tiles * TILE_ROWS;
#pragma omp for schedule(static) nowait
        for (int pi = 0; pi < panels; pi++) {
            int cols =
                out_dim - pi * PANEL_COLS < PANEL_COLS ? out_dim - pi * PANEL_COLS : PANEL_COLS;
            for (int t = 0; t < tiles; t++) {
                int rows = n - t * height < height ? n - t * height : height;
                const float *panel = wb + (size_t)pi * depth * PANEL_COLS;
                size_t lead =
                    tiles == 1 ? PREFETCH_FLOATS : (size_t)depth * (PANEL_COLS + t * ahead_stride);
                /* as an integer: past the last panel the address is outside W (harmless to a
                 * prefetch, but not a pointer C lets us form) */
                uintptr_t ahead = (uintptr_t)panel + lead * sizeof(float);
                tile_product(out + (size_t)t * height * out_dim + (size_t)pi * PANEL_COLS,
                             (size_t)out_dim, xb + (size_t)t * depth * TILE_ROWS, panel, depth,
                             rows, cols, k0 > 0, ahead, ahead_stride);
            }
        }
    }
}

void packed_matmul_forward(float *out, const float *in, const PackedWeight *w, const float *bias,
                           int n) {
    if (w->panels16) {
        packed_matmul_bf16_forward(out, in, w, bias, n);
        return;
    }
    if (packed_weight_is_amx(w)) {
        packed_matmul_amx_forward(out, in, w, bias, n);
        return;
    }
    if (n == 0) return;
    int in_dim = w->in_dim, out_dim = w->out_dim;
    int chunk = n < CHUNK_ROWS ? n : CHUNK_ROWS;
    float *x =
        xmalloc((size_t)(chunk + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS * in_dim * sizeof *x);
#pragma omp parallel
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int rows = n - r0 < chunk ? n - r0 : chunk;
        pack_rows(x, in + (size_t)r0 * in_dim, rows, in_dim); /* ends with a barrier */
        multiply_packed_rows(out + (size_t)r0 * out_dim, x, w, rows);
        /* every thread done with x before the next chunk is packed into it; after the last (the
         * only one, decoding) the region's own barrier does (the test is the same in every
         * thread, so all meet it or none) */
        if (r0 + chunk < n) {
#pragma omp barrier
        }
    }
    free(x);
    bias_add_rows(out, bias, n, out_dim);
}
