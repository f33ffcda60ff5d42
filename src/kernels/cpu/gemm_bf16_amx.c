/* gemm_bf16's AMX-BF16 path (gemm_bf16_kernels.h): tdpbf16ps multiplies a 16 x 32 bf16 tile of A
 * by a 16-pair-step x 16-column tile of B (a panel's layout as packed) into a 16 x 16 fp32 tile.
 * A block is 32 x 32: 4 tiles of sums (tmm0-3), 2 of A (tmm4-5), 2 of B (tmm6-7). Per element
 * the sum runs over the depth 32 values at a time, in order; within those, the tile unit's order.
 * A block's sums reach C (gemm_bf16_store_block) during the next block's depth loop (block_32x32).
 * The depth runs in chunks (GemmBf16AmxBlocking): per chunk a row block's A (32 x at most 1024
 * values: 64 KB, mostly in L1) meets a group of column pairs' panels (in L2), and a block's 4 sum
 * tiles wait in the thread's spill buffer between chunks, stored and loaded back exactly (fp32):
 * the tdpbf16ps sequence of every element is the one of a whole-depth run, the same bits. At depth
 * 896-4864 a whole-depth block read both A's rows and B's panels from L2, at its bandwidth limit,
 * and the 64-row chunks streamed all of B from L3 once per 64 rows; 256-row chunks do so a quarter
 * as often. The tile configuration is per thread: each thread of the parallel region loads it and
 * releases the tiles when done (gemm_bf16_cpu.c got the process the kernel's permission). */
#include "kernels/cpu/gemm_bf16_kernels.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* How gemm_bf16_run_amx walks the product (gemm_bf16_kernels.h); the result does not depend on
 * it. Set by gemm_bf16_amx_set_blocking (tests and bench drivers only). */
static GemmBf16AmxBlocking blocking = {GEMM_BF16_AMX_DEPTH_CHUNK, GEMM_BF16_AMX_ROW_CHUNK,
                                       GEMM_BF16_AMX_COL_GROUP, GEMM_BF16_AMX_SHORT_ROWS, false};

void gemm_bf16_amx_set_blocking(const GemmBf16AmxBlocking *b) {
    GemmBf16AmxBlocking d = {GEMM_BF16_AMX_DEPTH_CHUNK, GEMM_BF16_AMX_ROW_CHUNK,
                             GEMM_BF16_AMX_COL_GROUP, GEMM_BF16_AMX_SHORT_ROWS, false};
    blocking = b ? *b : d;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET __attribute__((target("amx-tile,amx-bf16")))
#define BLOCK  32 /* rows and columns of a block */
#define TILE   16

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

/* A product's C past this many bytes has its blocks' rows fetched ahead (block_32x32). With C
 * pushed out to L3 first, the fetch was 0.99-1.03x main's at 1.3-3.5 MB (the 135M model's dW
 * products) in a driver, 0.81-0.87x at 9.4 MB (its lm_head's), so it began at 4 MB (twice L2).
 * In the 135M bf16 DPO step, where the 538 MB gradient lies further out than L3, the
 * accumulating stores of those products waited on C (43% of store_rows' samples, themselves 7.5%
 * of the step's). Steps alternating 4 MB, 1 MB and 256 KB in one process (5 steps each, twice,
 * the order reversed the second time; 2026-11-29): the backward's linears took 2.43 / 2.36x the
 * layers' attention time from 4 MB on, 2.27 / 2.18x from 1 MB, 2.12 / 2.18x from 256 KB; the
 * backward phase 1.651 / 1.590 s, 1.603 / 1.474 s, 1.410 / 1.478 s. */
#define FETCH_C_BYTES       (256u << 10)
#define FETCH_C_BYTES_SHORT (4u << 20) /* a product of at most short_rows rows (the decode's) */

/* c's lines of rows r0.. r1 (at most rows) of the block at (i0, j0), cols wide, requested for
 * writing (prefetchw: in L1, owned). always_inline: GCC 12 found an out-of-line copy free of
 * side effects (a prefetch is none to it) and deleted its calls, prefetches and all. */
static inline __attribute__((always_inline)) void
prefetch_rows(const float *c, size_t ldc, int i0, int j0, int cols, int rows, int r0, int r1) {
    if (r1 > rows) r1 = rows;
    for (int r = r0; r < r1; r++) {
        uintptr_t from = (uintptr_t)(c + (size_t)(i0 + r) * ldc + j0);
        uintptr_t to = from + (uintptr_t)cols * sizeof(float); /* each line of the row once */
        for (uintptr_t line = from & ~(uintptr_t)63; line < to; line += 64)
            _mm_prefetch((const char *)line, _MM_HINT_ET0);
    }
}

/* Depth steps k0.. k1 of the block at (i0, j0) into the tiles: the sums start from zero if
 * k0 is 0, else from spill (4 tiles, as the last chunk left them: fp32 stored and loaded back
 * exactly, so every element's sum runs over the depth in the same order as in one go). If k1
 * ends the depth, the sums go to buf and the block becomes prev, pending; else back to spill.
 * Meanwhile the previous block (prev, in buf) is stored a few rows per depth step: the stores'
 * cache misses and vector work overlap the tile unit's work instead of following it (they were
 * ~31% of this kernel's samples, run after the depth loop). ceil(32 / steps) rows a step store
 * all of prev within the loop, so buf is free for this block's tiles after it. If fetch_c, the
 * last chunk's steps also fetch this block's rows of C, as many a step, one block ahead of their
 * store: C far past L2 (FETCH_C_BYTES; the 0.5B model's gate/up dW is 17 MB) had the
 * accumulate store's loads wait on memory, 28% of the kernel's samples on the 0.5B dW gate/up
 * product (4864 x 654 x 896) and none with the fetch. A block's 32 rows of C lie ldc apart (3.5
 * KB there), each on its own page, a pattern the hardware's prefetchers do not follow. */
TARGET static void block_32x32(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                               const uint16_t *panel0, const uint16_t *panel1, int i0, int j0,
                               int cols, bool bottom, int k0, int k1, float *spill, float *buf,
                               Pending *prev, bool fetch_c) {
    int steps = (k1 - k0) / GEMM_BF16_DEPTH_PAD;
    int per_step = (BLOCK + steps - 1) / steps; /* prev's rows stored per depth step */
    size_t ld = (size_t)a->row_stride;
    const uint16_t *a0 = a->data + i0 * ld, *a1 = a0 + TILE * ld;
    if (k0 == 0) {
        _tile_zero(0);
        _tile_zero(1);
        if (bottom) {
            _tile_zero(2);
            _tile_zero(3);
        }
    } else {
        _tile_loadd(0, spill, BLOCK * sizeof(float));
        _tile_loadd(1, spill + TILE, BLOCK * sizeof(float));
        if (bottom) {
            _tile_loadd(2, spill + TILE * BLOCK, BLOCK * sizeof(float));
            _tile_loadd(3, spill + TILE * BLOCK + TILE, BLOCK * sizeof(float));
        }
    }
    bool last = k1 == a->depth_padded, fetch = fetch_c && last;
    int rows = a->rows - i0 < BLOCK ? a->rows - i0 : BLOCK;
    for (int k = k0, s = 1; k < k1; k += GEMM_BF16_DEPTH_PAD, s++) {
        if (fetch) prefetch_rows(c, ldc, i0, j0, cols, rows, (s - 1) * per_step, s * per_step);
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
    float *to = last ? buf : spill;
    _tile_stored(0, to, BLOCK * sizeof(float));
    _tile_stored(1, to + TILE, BLOCK * sizeof(float));
    if (bottom) {
        _tile_stored(2, to + TILE * BLOCK, BLOCK * sizeof(float));
        _tile_stored(3, to + TILE * BLOCK + TILE, BLOCK * sizeof(float));
    }
    if (last) *prev = (Pending){buf, i0, j0, rows, cols, 0};
}

void gemm_bf16_run_amx(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    GemmBf16AmxBlocking bl = blocking;
    int kp = a->depth_padded, pairs = (b->cols + BLOCK - 1) / BLOCK; /* whole ones are padded */
    /* the depth in the fewest chunks of at most depth_chunk (0: one chunk), of equal numbers of
     * 32-value steps but the last: no short chunk whose spill costs more than its steps */
    int steps = kp / GEMM_BF16_DEPTH_PAD, most = bl.depth_chunk / GEMM_BF16_DEPTH_PAD;
    bool short_product = a->rows <= bl.short_rows;
    int chunks = most > 0 && !short_product ? (steps + most - 1) / most : 1;
    int kc = chunks > 0 ? (steps + chunks - 1) / chunks * GEMM_BF16_DEPTH_PAD : 0;
    if (kc <= 0) kc = GEMM_BF16_DEPTH_PAD; /* an empty depth: no chunk runs */
    int rc = (bl.row_chunk + BLOCK - 1) / BLOCK * BLOCK, group = bl.col_group;
    if (short_product) rc = a->rows, group = 1; /* main's order: a pair's panels, rows inner */
    if (rc <= 0) rc = BLOCK;
    if (group <= 0) group = 1;
    /* at least 8 items a thread, so that a thread slowed by its neighbours (a vCPU's AMX unit
     * runs at half speed minutes at a time) hands items to the others: smaller groups first
     * (A's chunk stays in L2 either way), then row chunks down to 64 rows */
    int threads = omp_get_max_threads(), row_chunks, col_groups, want = 8 * threads;
    for (;;) {
        row_chunks = (a->rows + rc - 1) / rc, col_groups = (pairs + group - 1) / group;
        if (row_chunks * col_groups >= want || (group == 1 && rc <= 2 * BLOCK)) break;
        if (group > 1)
            group = (group + 1) / 2;
        else
            rc = (rc / 2 + BLOCK - 1) / BLOCK * BLOCK;
    }
    /* a short product's items (a few microseconds each) in one run a thread, as main had them */
    int per_take = short_product ? (row_chunks * col_groups + threads - 1) / threads : 1;
    bool spills = kc < kp; /* else each block runs its whole depth in one go */
    /* the rollout's short products keep the 4 MB threshold they were measured with */
    bool fetch_c = (size_t)a->rows * (size_t)b->cols * sizeof(float) >
                   (short_product ? FETCH_C_BYTES_SHORT : FETCH_C_BYTES);
#pragma omp parallel
    {
        float buf[BLOCK * BLOCK] __attribute__((aligned(64))); /* the pending block's sums */
        Pending prev = {buf, 0, 0, 0, 0, 0};                   /* nothing pending */
        /* the sums of a work item's blocks between depth chunks, (row block, pair) in order */
        float *spill = spills && !bl.no_spill_buffer
                           ? aligned_alloc(64, (size_t)(rc / BLOCK) * (size_t)group * BLOCK *
                                                   BLOCK * sizeof(float))
                           : NULL;
        /* without a spill buffer this thread runs each block's whole depth in one go: slower
         * for a deep product, the same bits (the chunks' sums are stored and loaded exactly) */
        int depth_step = spill ? kc : kp;
        /* more than 32 rows: 16 and 16 (a last block's padding rows are zero); else the rows */
        int top = a->rows > TILE ? TILE : a->rows, bottom = a->rows > BLOCK ? TILE : a->rows - top;
        gemm_bf16_amx_configure_tiles(top, bottom);
        /* a work item: rc rows by group column pairs, over the whole depth, one thread's. Handed
         * out one at a time, per_take for a short product: libgomp's barrier wait was ~9% of a
         * 2-thread GRPO step's samples with static halves of the items */
#pragma omp for schedule(dynamic, per_take) collapse(2)
        for (int ic = 0; ic < row_chunks; ic++)
            for (int g = 0; g < col_groups; g++) {
                int i_begin = ic * rc, i_end = i_begin + rc < a->rows ? i_begin + rc : a->rows;
                int jb_begin = g * group,
                    jb_end = jb_begin + group < pairs ? jb_begin + group : pairs;
                int nrb = (i_end - i_begin + BLOCK - 1) / BLOCK, ng = jb_end - jb_begin;
                /* per depth chunk, a row block's A (32 x kc) stays in L1 while the group's
                 * panels pass (from L2) */
                for (int k0 = 0; k0 < kp; k0 += depth_step) {
                    int k1 = k0 + depth_step < kp ? k0 + depth_step : kp;
                    for (int t = 0; t < nrb * ng; t++) {
                        int rb = t / ng, jj = t % ng;
                        int i = i_begin + rb * BLOCK, jb = jb_begin + jj;
                        int j0 = jb * BLOCK, cols = b->cols - j0 < BLOCK ? b->cols - j0 : BLOCK;
                        float *sp = spill
                                        ? spill + ((size_t)rb * group + (size_t)jj) * BLOCK * BLOCK
                                        : NULL;
                        /* a last block of at most 16 rows skips its lower tiles (padding) */
                        block_32x32(c, ldc, st, a, gemm_bf16_panel(b, 2 * jb),
                                    gemm_bf16_panel(b, 2 * jb + 1), i, j0, cols,
                                    bottom > 0 && a->rows - i > TILE, k0, k1, sp, buf, &prev,
                                    fetch_c);
                    }
                }
            }
        store_rows(c, ldc, st, &prev, BLOCK); /* the last block's */
        gemm_bf16_amx_release_tiles();
        free(spill);
    }
}

#else

void gemm_bf16_run_amx(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                       const Bf16PackedB *b) {
    (void)c, (void)ldc, (void)st, (void)a, (void)b;
    abort(); /* gemm_bf16_supported said no: unreachable */
}

#endif
