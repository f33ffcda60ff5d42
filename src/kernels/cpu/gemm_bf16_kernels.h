/* The paths of gemm_bf16 (gemm_bf16.h), one file each, and what they share. Private to
 * gemm_bf16*.c. Each runs the whole product over OpenMP's threads; every output block is
 * computed by one thread over the full depth, so the result does not depend on the thread count. */
#ifndef RLHF_KERNELS_CPU_GEMM_BF16_KERNELS_H
#define RLHF_KERNELS_CPU_GEMM_BF16_KERNELS_H

#include "kernels/cpu/gemm_bf16.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GEMM_BF16_PANEL 16 /* columns per B panel: one AMX tile's, one zmm of fp32 sums */
/* rows and columns are padded to this: the AMX kernel's 2 x 2 tiles of 16 x 16 */
#define GEMM_BF16_ROW_PAD   32
#define GEMM_BF16_DEPTH_PAD 32 /* one AMX tile's depth in bf16 values */

/* How a path stores a finished block of C (gemm_bf16 and gemm_bf16_rounded): written, added to
 * C, or rounded to bf16 (after bias, if any, is added) while the block is still in L1. */
typedef struct {
    bool accumulate;   /* C += the sums (round false) */
    bool round;        /* C = bf16(the sums + bias[j]) */
    const float *bias; /* round only: b->cols values added to column j's sums, or NULL */
} GemmBf16Store;

/* f rounded to the nearest bf16 (ties to even), as an fp32; a NaN becomes the quiet NaN
 * 0x7fc00000: the bits of matmul_autocast.c's round_bf16. Branch-free, so loops vectorise. */
static inline float gemm_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    r = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : r;
    memcpy(&f, &r, sizeof f);
    return f;
}

/* c's block at (i0, j0), rows x cols of it, from buf (row stride buf_ld) as st says. */
static inline void gemm_bf16_store_block(float *c, size_t ldc, const GemmBf16Store *st,
                                         const float *buf, int buf_ld, int i0, int j0, int rows,
                                         int cols) {
    const float *bias = st->bias ? st->bias + j0 : NULL;
    for (int i = 0; i < rows; i++) {
        float *dst = c + (size_t)(i0 + i) * ldc + j0;
        const float *src = buf + (size_t)i * buf_ld;
        /* one loop each, marked simd: dst and buf never overlap, and without the mark GCC left
         * them scalar (a third of block_32x32's samples in a bf16 DPO step were its stores) */
        if (st->round && bias)
#pragma omp simd
            for (int j = 0; j < cols; j++)
                dst[j] = gemm_bf16_round(src[j] + bias[j]);
        else if (st->round)
#pragma omp simd
            for (int j = 0; j < cols; j++)
                dst[j] = gemm_bf16_round(src[j]);
        else if (st->accumulate)
#pragma omp simd
            for (int j = 0; j < cols; j++)
                dst[j] += src[j];
        else
            memcpy(dst, src, (size_t)cols * sizeof *dst);
    }
}

/* The bf16 pair (A[i][2q], A[i][2q + 1]) as one 32-bit word (the packed row holds them so). */
static inline uint32_t gemm_bf16_pair(const uint16_t *row, int q) {
    return (uint32_t)row[2 * q] | (uint32_t)row[2 * q + 1] << 16;
}

/* Panel p of b: its depth_padded / 2 pair steps of GEMM_BF16_PANEL pairs. */
static inline const uint16_t *gemm_bf16_panel(const Bf16PackedB *b, int p) {
    return b->data + (size_t)p * b->panel_stride;
}

bool gemm_bf16_cpu_has_avx2(void);
bool gemm_bf16_cpu_has_avx512(void);
bool gemm_bf16_cpu_has_amx(void); /* asks the kernel for the tile state on first call */

/* The calling thread's AMX tiles configured for 32 x 32 blocks whose two row halves have top and
 * bottom rows (bottom 0: its tiles left unconfigured), gemm_bf16_amx.c's layout (tmm0-3 sums,
 * tmm4-5 A, tmm6-7 B); released by gemm_bf16_amx_release_tiles. x86-64 with AMX only (after
 * gemm_bf16_cpu_has_amx). Shared so that the configuration and its GCC 12 workaround are
 * written once. */
void gemm_bf16_amx_configure_tiles(int top, int bottom);
void gemm_bf16_amx_release_tiles(void);

/* How the AMX path walks a product (the result is the same bits for every choice: each
 * element's sum runs over the depth in the same order). Work items of row_chunk rows by col_group
 * pairs of 16-column panels, each one thread's; in an item the depth in the fewest equal chunks of
 * at most depth_chunk values (0: one), and per chunk the row blocks in order, each over the item's
 * pairs (its A chunk stays in L1 while they pass); between chunks a block's fp32 sums wait in a
 * per-thread buffer. A product of at most short_rows rows runs each block's whole depth at once,
 * the row blocks inner (a pair's panels stay in L1): main's order, faster for the rollout's.
 * no_spill_buffer (tests only): walk as when a thread's buffer cannot be allocated, each block's
 * whole depth at once. */
typedef struct {
    int depth_chunk, row_chunk, col_group, short_rows;
    bool no_spill_buffer;
} GemmBf16AmxBlocking;
#define GEMM_BF16_AMX_DEPTH_CHUNK 1024
#define GEMM_BF16_AMX_ROW_CHUNK   256
#define GEMM_BF16_AMX_COL_GROUP   8
#define GEMM_BF16_AMX_SHORT_ROWS  64

/* The blocking of every later gemm_bf16_run_amx, or the defaults above if b is NULL. For tests
 * and bench drivers: not to be called while a product runs. */
void gemm_bf16_amx_set_blocking(const GemmBf16AmxBlocking *b);

void gemm_bf16_run_avx2(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                        const Bf16PackedB *b);
void gemm_bf16_run_avx512(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                          const Bf16PackedB *b);
void gemm_bf16_run_amx(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                       const Bf16PackedB *b);

#endif
