/* gemm_bf16's AMX-BF16 path (gemm_bf16_kernels.h): tdpbf16ps multiplies a 16 x 32 bf16 tile of A
 * by a 16-pair-step x 16-column tile of B (a panel's layout as packed) into a 16 x 16 fp32 tile.
 * A block is 32 x 32: 4 tiles of sums (tmm0-3), 2 of A (tmm4-5), 2 of B (tmm6-7). Per element
 * the sum runs over the depth 32 values at a time, in order; within those, the tile unit's order.
 * A block's sums reach C (gemm_bf16_store_block) during the next block's depth loop (block_32x32).
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
#define ROW_CHUNK 64 /* rows whose packed A stays in L2 while the panels pass by */

/* Palette 1: 8 tiles of 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) TileConfig;

/* The tiles for blocks whose two halves have top and bottom rows (16 and 16 for a product of
 * more than 32 rows): tmm0, tmm1 (sums) and tmm4 (A) of top rows, tmm2, tmm3 and tmm5 of bottom
 * rows, unconfigured if bottom is 0; B's tmm6 and tmm7 16 pair steps. The tile unit's time goes
 * by the rows of A, and the rollout's decode steps multiply 8-64 rows: 8 rows on 32-row tiles
 * spent 3/4 of it on padding. Each row's sums are the same whatever the tile's row count. */
TARGET void gemm_bf16_amx_configure_tiles(int top, int bottom) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int rows[8] = {top, top, bottom, bottom, top, bottom, TILE, TILE};
    for (int t = 0; t < 8; t++)
        if (rows[t] > 0) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)rows[t];
    /* GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of the configuration, so
     * without -march=native's inlining choices it dropped the stores of colsb and rows and
     * ldtilecfg faulted on the stack's garbage (the portable CUDA bundle, 2026-11-28): the
     * barrier makes every store to cfg happen first (test_gemm_bf16_portable builds this file so).
     */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

TARGET void gemm_bf16_amx_release_tiles(void) {
    _tile_release();
}

/* A finished block's sums, waiting in buf (BLOCK x BLOCK, row stride BLOCK) to be stored to c's
 * rows i0.. i0 + rows, columns j0.. j0 + cols; rows 0.. stored are stored already. */
typedef struct {
    float *buf;
    int i0, j0, rows, cols, stored;
} Pending;

/* Rows up to `to` (at most p->rows) of p stored as st says. */
static inline void store_rows(float *c, size_t ldc, const GemmBf16Store *st, Pending *p, int to) {
    if (to > p->rows) to = p->rows;
    if (p->stored >= to) return;
    gemm_bf16_store_block(c, ldc, st, p->buf + (size_t)p->stored * BLOCK, BLOCK, p->i0 + p->stored,
                          p->j0, to - p->stored, p->cols);
    p->stored = to;
}

/* The block at (i0, j0) into the tiles, while the previous block (prev, in buf) is stored a few
 * rows per depth step: the stores' cache misses and vector work overlap the tile unit's work
 * instead of following it (they were ~31% of this kernel's samples, run after the depth loop).
 * ceil(32 / steps) rows a step store all of prev within the loop, so buf is free for this
 * block's tiles after it, and prev becomes this block, pending. The sums are made as before:
 * only when they reach C changes. */
TARGET static void block_32x32(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                               const uint16_t *panel0, const uint16_t *panel1, int i0, int j0,
                               int cols, bool bottom, float *buf, Pending *prev) {
    int kp = a->depth_padded, steps = kp / GEMM_BF16_DEPTH_PAD;
    int per_step = (BLOCK + steps - 1) / steps; /* prev's rows stored per depth step */
    size_t ld = (size_t)a->row_stride;
    const uint16_t *a0 = a->data + i0 * ld, *a1 = a0 + TILE * ld;
    _tile_zero(0);
    _tile_zero(1);
    if (bottom) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int k = 0, s = 1; k < kp; k += GEMM_BF16_DEPTH_PAD, s++) {
        _tile_loadd(4, a0 + k, ld * sizeof(uint16_t));
        /* pair steps k / 2 .. k / 2 + 15 of each panel, 64 bytes apart */
        _tile_loadd(6, panel0 + (size_t)k * TILE, 64);
        _tile_loadd(7, panel1 + (size_t)k * TILE, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (bottom) {
            _tile_loadd(5, a1 + k, ld * sizeof(uint16_t));
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        if (prev->stored < prev->rows) store_rows(c, ldc, st, prev, s * per_step);
    }
    _tile_stored(0, buf, BLOCK * sizeof(float));
    _tile_stored(1, buf + TILE, BLOCK * sizeof(float));
    if (bottom) {
        _tile_stored(2, buf + TILE * BLOCK, BLOCK * sizeof(float));
        _tile_stored(3, buf + TILE * BLOCK + TILE, BLOCK * sizeof(float));
    }
    *prev = (Pending){buf, i0, j0, a->rows - i0 < BLOCK ? a->rows - i0 : BLOCK, cols, 0};
}

void gemm_bf16_run_amx(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    int blocks = (b->cols + BLOCK - 1) / BLOCK; /* rows_padded and cols_padded hold whole ones */
#pragma omp parallel
    {
        float buf[BLOCK * BLOCK] __attribute__((aligned(64))); /* the pending block's sums */
        Pending prev = {buf, 0, 0, 0, 0, 0};                   /* nothing pending */
        /* more than 32 rows: 16 and 16 (a last block's padding rows are zero); else the rows */
        int top = a->rows > TILE ? TILE : a->rows, bottom = a->rows > BLOCK ? TILE : a->rows - top;
        gemm_bf16_amx_configure_tiles(top, bottom);
#pragma omp for schedule(static) collapse(2)
        for (int i0 = 0; i0 < a->rows; i0 += ROW_CHUNK)
            for (int jb = 0; jb < blocks; jb++) {
                int j0 = jb * BLOCK, end = i0 + ROW_CHUNK < a->rows ? i0 + ROW_CHUNK : a->rows;
                int cols = b->cols - j0 < BLOCK ? b->cols - j0 : BLOCK;
                /* a last block of at most 16 rows skips its lower tiles (padding) */
                for (int i = i0; i < end; i += BLOCK)
                    block_32x32(c, ldc, st, a, gemm_bf16_panel(b, 2 * jb),
                                gemm_bf16_panel(b, 2 * jb + 1), i, j0, cols,
                                bottom > 0 && a->rows - i > TILE, buf, &prev);
            }
        store_rows(c, ldc, st, &prev, BLOCK); /* the last block's */
        gemm_bf16_amx_release_tiles();
    }
}

#else

void gemm_bf16_run_amx(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    (void)c, (void)ldc, (void)st, (void)a, (void)b;
    abort(); /* gemm_bf16_supported said no: unreachable */
}

#endif
