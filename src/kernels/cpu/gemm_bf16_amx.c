/* gemm_bf16's AMX-BF16 path (gemm_bf16_kernels.h): tdpbf16ps multiplies a 16 x 32 bf16 tile of A
 * by a 16-pair-step x 16-column tile of B (a panel's layout as packed) into a 16 x 16 fp32 tile.
 * A block is 32 x 32: 4 tiles of sums (tmm0-3), 2 of A (tmm4-5), 2 of B (tmm6-7). Per element
 * the sum runs over the depth 32 values at a time, in order; within those, the tile unit's order.
 * The tile configuration is per thread: each thread of the parallel region loads it and
 * releases the tiles when done (gemm_bf16_cpu.c got the process the kernel's permission). */
#include "kernels/cpu/gemm_bf16_kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET    __attribute__((target("amx-tile,amx-bf16")))
#define BLOCK     32 /* rows and columns of a block */
#define TILE      16
#define ROW_CHUNK 256 /* rows of one task (run_task): its packed A stays in L2 */

/* Palette 1: 8 tiles of 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) TileConfig;

TARGET static void configure_tiles(void) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = TILE;
    _tile_loadconfig(&cfg);
}

TARGET static void release_tiles(void) {
    _tile_release();
}

/* A 32 x 32 block of C over the whole depth into buf, then stored (= or +=) where it is valid:
 * the edge blocks (rows or columns past a's or b's true sizes), which are few. */
TARGET static void edge_block(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a,
                              const uint16_t *panel0, const uint16_t *panel1, int i0, int j0,
                              int cols) {
    int kp = a->depth_padded;
    size_t ld = (size_t)a->row_stride;
    const uint16_t *a0 = a->data + i0 * ld, *a1 = a0 + TILE * ld;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int k = 0; k < kp; k += GEMM_BF16_DEPTH_PAD) {
        _tile_loadd(4, a0 + k, ld * sizeof(uint16_t));
        _tile_loadd(5, a1 + k, ld * sizeof(uint16_t));
        /* pair steps k / 2 .. k / 2 + 15 of each panel, 64 bytes apart */
        _tile_loadd(6, panel0 + (size_t)k * TILE, 64);
        _tile_loadd(7, panel1 + (size_t)k * TILE, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float buf[BLOCK * BLOCK] __attribute__((aligned(64)));
    _tile_stored(0, buf, BLOCK * sizeof(float));
    _tile_stored(1, buf + TILE, BLOCK * sizeof(float));
    _tile_stored(2, buf + TILE * BLOCK, BLOCK * sizeof(float));
    _tile_stored(3, buf + TILE * BLOCK + TILE, BLOCK * sizeof(float));
    gemm_bf16_store_block(c, ldc, accumulate, buf, BLOCK, i0, j0,
                          a->rows - i0 < BLOCK ? a->rows - i0 : BLOCK, cols);
}

/* A whole 32 x 32 block of C (every row and column valid), its tiles loaded from C
 * (accumulating) or zeroed, and stored straight back to C: no copy through a buffer. Per element
 * the sum runs 32 depth values at a time, in order, as edge_block's; accumulating, it starts
 * from C's value instead of adding it at the end. */
TARGET static void whole_block(float *c, size_t ldc, bool from_c, const Bf16PackedA *a,
                               const uint16_t *panel0, const uint16_t *panel1, int i0, int j0) {
    size_t ld = (size_t)a->row_stride, cs = ldc * sizeof(float);
    const uint16_t *a0 = a->data + i0 * ld, *a1 = a0 + TILE * ld;
    float *c0 = c + (size_t)i0 * ldc + j0, *c1 = c0 + TILE * ldc;
    if (from_c) {
        _tile_loadd(0, c0, cs);
        _tile_loadd(1, c0 + TILE, cs);
        _tile_loadd(2, c1, cs);
        _tile_loadd(3, c1 + TILE, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int k = 0; k < a->depth_padded; k += GEMM_BF16_DEPTH_PAD) {
        _tile_loadd(4, a0 + k, ld * sizeof(uint16_t));
        _tile_loadd(5, a1 + k, ld * sizeof(uint16_t));
        _tile_loadd(6, panel0 + (size_t)k * TILE, 64);
        _tile_loadd(7, panel1 + (size_t)k * TILE, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c0, cs);
    _tile_stored(1, c0 + TILE, cs);
    _tile_stored(2, c1, cs);
    _tile_stored(3, c1 + TILE, cs);
}

/* The work of one task: rows i0 .. end of C against column block jb, row block after row block,
 * so that the block's two B panels (64 bytes a depth pair: 36 KB at depth 576) stay in L1 while
 * A's rows come from L2. The old order (each thread's 64 rows against one column block after
 * another, through a buffer) ran at 0.8-0.9x this one's rate (bench/README.md). */
TARGET static void run_task(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a,
                            const Bf16PackedB *b, int i0, int end, int jb) {
    int j0 = jb * BLOCK, cols = b->cols - j0 < BLOCK ? b->cols - j0 : BLOCK;
    const uint16_t *p0 = gemm_bf16_panel(b, 2 * jb), *p1 = gemm_bf16_panel(b, 2 * jb + 1);
    /* whole blocks: all 32 columns valid, and rows up to a's last whole 32 (i0 is a multiple of
     * 32, end a's rows or a multiple of 32) */
    int whole_rows = a->rows - a->rows % BLOCK;
    int whole_end = cols < BLOCK ? i0 : end < whole_rows ? end : whole_rows;
    int i = i0;
    for (; i < whole_end; i += BLOCK)
        whole_block(c, ldc, accumulate, a, p0, p1, i, j0);
    for (; i < end; i += BLOCK)
        edge_block(c, ldc, accumulate, a, p0, p1, i, j0, cols);
}

void gemm_bf16_run_amx(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    int blocks = (b->cols + BLOCK - 1) / BLOCK; /* rows_padded and cols_padded hold whole ones */
    int chunks = (a->rows + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel
    {
        configure_tiles();
#pragma omp for schedule(static) collapse(2)
        for (int ic = 0; ic < chunks; ic++)
            for (int jb = 0; jb < blocks; jb++) {
                int i0 = ic * ROW_CHUNK, end = i0 + ROW_CHUNK < a->rows ? i0 + ROW_CHUNK : a->rows;
                run_task(c, ldc, accumulate, a, b, i0, end, jb);
            }
        release_tiles();
    }
}

#else

void gemm_bf16_run_amx(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    (void)c, (void)ldc, (void)accumulate, (void)a, (void)b;
    abort(); /* gemm_bf16_supported said no: unreachable */
}

#endif
