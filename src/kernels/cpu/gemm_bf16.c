/* gemm_bf16's packing and its choice of path (gemm_bf16.h); the paths are gemm_bf16_amx.c,
 * gemm_bf16_avx512.c and gemm_bf16_avx2.c.
 *
 * Layouts (invariants every path relies on):
 *  1. A packed A is row-major bf16, row_stride (= depth_padded) values apart: the pair
 *     (A[i][2q], A[i][2q + 1]) is one 32-bit word, what vdpbf16ps broadcasts and an AMX A
 *     tile's row holds 16 of.
 *  2. A packed B is cols_padded / 16 panels; panel p's pair step q holds, for its columns
 *     j = 0..15, B[2q][16p + j] then B[2q + 1][16p + j]: one 64-byte row of an AMX B tile, one
 *     zmm for vdpbf16ps, two ymm for the AVX2 path.
 *  3. Padding (rows, columns and depth up to the multiples of gemm_bf16_kernels.h) is zero, so
 *     the paths run whole blocks and whole depth steps; only the stores look at the true sizes.
 *  4. Values are rounded to bf16 to nearest, ties to even, as torch rounds a tensor to bf16
 *     (matmul_autocast.c's round_bf16 does the same to fp32 copies). */
#include "common/error.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/narrow_bf16.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/cpu/transpose16_avx512.h"
#endif

/* ---- the path ---- */

/* A message and exit(2): a bad RLHF_GEMM_BF16 (the kernels have no error return, and
 * running on a path other than the one asked for would make a timing or a comparison mean
 * something else), or abort() for a caller's bug. */
RLHF_PRINTF(2, 3) static void die(bool bug, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rlhf: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (bug) abort();
    exit(2);
}

static const char *const path_names[GEMM_BF16_PATH_COUNT] = {"sgemm", "avx2", "avx512", "amx"};

const char *gemm_bf16_path_name(GemmBf16Path p) {
    return p >= 0 && p < GEMM_BF16_PATH_COUNT ? path_names[p] : "?";
}

bool gemm_bf16_supported(GemmBf16Path p) {
    switch (p) {
    case GEMM_BF16_NONE:
        return true;
    case GEMM_BF16_AVX2:
        return gemm_bf16_cpu_has_avx2();
    case GEMM_BF16_AVX512:
        return gemm_bf16_cpu_has_avx512();
    case GEMM_BF16_AMX:
        return gemm_bf16_cpu_has_amx();
    default:
        return false;
    }
}

/* The path taken unless one is forced: AMX where the CPU has it, else the sgemm path. Chosen by
 * measurement (bench_autocast, CPU time of one thread on an AMX Xeon, bench/README.md): the
 * autocast products on AMX took 0.27-0.48x the sgemm path's time; on avx512 0.85-1.59x and on
 * avx2 1.07-1.99x of it (vdpbf16ps there does the fp32 FMA's work per cycle, not twice it). So
 * avx512 and avx2 run only when forced (tests, benches, a CPU where they measure faster). */
static GemmBf16Path best_path(void) {
    return gemm_bf16_supported(GEMM_BF16_AMX) ? GEMM_BF16_AMX : GEMM_BF16_NONE;
}

static _Atomic int chosen_path = -1; /* -1: not chosen yet */
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

/* The environment's choice, else the best. */
static void choose_path(void) {
    const char *env = getenv("RLHF_GEMM_BF16");
    if (!env || !*env) {
        int unset = -1;
        atomic_compare_exchange_strong(&chosen_path, &unset, (int)best_path());
        return;
    }
    for (int p = 0; p < GEMM_BF16_PATH_COUNT; p++)
        if (strcmp(env, path_names[p]) == 0) {
            if (!gemm_bf16_supported((GemmBf16Path)p))
                die(false, "RLHF_GEMM_BF16=%s: this CPU (or its OS) has no %s; its default is %s",
                    env, path_names[p], path_names[best_path()]);
            int unset = -1;
            atomic_compare_exchange_strong(&chosen_path, &unset, p);
            return;
        }
    die(false, "RLHF_GEMM_BF16=%s: expected one of amx, avx512, avx2, sgemm", env);
}

GemmBf16Path gemm_bf16_path(void) {
    pthread_once(&path_once, choose_path);
    return (GemmBf16Path)atomic_load(&chosen_path);
}

bool gemm_bf16_force(GemmBf16Path p) {
    if (p < 0 || p >= GEMM_BF16_PATH_COUNT || !gemm_bf16_supported(p)) return false;
    pthread_once(&path_once, choose_path);
    atomic_store(&chosen_path, (int)p);
    return true;
}

/* ---- packing ---- */

static int round_up(int x, int m) {
    return (x + m - 1) / m * m;
}

static inline uint16_t source_at(const Bf16Source *s, int r, int c) {
    size_t at = (size_t)r * s->row_stride + (size_t)c * s->col_stride;
    return s->f32 ? narrow_bf16(s->f32[at]) : s->bf16[at];
}

/* Packing buffers come from a pool of a few kept ones: an activation is packed on every product,
 * and memory fresh from the kernel costs a page fault per 4 KB (on our machines' hypervisor 9% of
 * a bf16 DPO step went to clearing pages). A released buffer is kept in a free slot, or in place
 * of a smaller kept one; at most POOL_SLOTS buffers, the largest released, are held (never
 * returned to the OS: a few activations' or weights' packings, the lm_head's two among them).
 * A request takes the smallest kept buffer that holds it and is no more than 4 times its size:
 * a small packing does not take the lm_head's, which its next packing would then fault in anew. */
#define POOL_SLOTS 8

static struct {
    uint16_t *p;
    size_t bytes;
} pool[POOL_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* A 64-byte aligned buffer of at least count bf16 values (count > 0); *bytes gets its size. */
static uint16_t *alloc_bf16(size_t count, size_t *bytes) {
    size_t want = (count * sizeof(uint16_t) + 63) / 64 * 64;
    int best = -1;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pool[i].p && pool[i].bytes >= want && pool[i].bytes / 4 <= want &&
            (best < 0 || pool[i].bytes < pool[best].bytes))
            best = i;
    if (best >= 0) {
        uint16_t *p = pool[best].p;
        *bytes = pool[best].bytes;
        pool[best].p = NULL;
        pthread_mutex_unlock(&pool_lock);
        return p;
    }
    pthread_mutex_unlock(&pool_lock);
    uint16_t *p = aligned_alloc(64, want);
    if (!p) die(true, "out of memory packing a bf16 factor (%zu bytes)", want);
    *bytes = want;
    return p;
}

static void release_bf16(uint16_t *p, size_t bytes) {
    if (!p) return;
    int slot = -1;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS && slot < 0; i++)
        if (!pool[i].p) slot = i; /* an empty slot */
    if (slot < 0) {               /* else the smallest kept buffer, if smaller than this one */
        int smallest = 0;
        for (int i = 1; i < POOL_SLOTS; i++)
            if (pool[i].bytes < pool[smallest].bytes) smallest = i;
        if (pool[smallest].bytes < bytes) slot = smallest;
    }
    uint16_t *evicted = p;
    if (slot >= 0) {
        evicted = pool[slot].p;
        pool[slot].p = p, pool[slot].bytes = bytes;
    }
    pthread_mutex_unlock(&pool_lock);
    free(evicted);
}

#define PACK_ROWS 32 /* rows a transposed source is read for at once: a cache line of fp32 */

/* ---- 16 x 16 transposes of 32-bit words (a packed pair is one word, invariant 1) ---- */

/* The 64 bytes at src to dst, a whole cache line; if stream (dst 64-byte aligned), by
 * non-temporal stores, which write the line without reading it first (a plain store of a line
 * not in the cache reads it from memory, RFO) and leave the cache to the data in use. For an
 * optimizer step's repacking (bf16_repack_b_rows), whose lines nothing reads before the next
 * forward, after the step's other passes have evicted them anyway. A thread that streamed
 * fences (stream_fence) before another may read the lines. */
static inline void store_line(void *dst, const void *src, bool stream) {
#if defined(__x86_64__) || defined(_M_X64)
    if (stream) { /* SSE2's, in every x86-64: the four write-combine into one line */
        for (int i = 0; i < 4; i++)
            _mm_stream_si128((__m128i *)dst + i, _mm_loadu_si128((const __m128i *)src + i));
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, 64);
}

/* Orders a thread's streamed stores (store_line) before what it does next: non-temporal
 * stores are weakly ordered, even against the locked operations of an OpenMP barrier. */
static inline void stream_fence(void) {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_sfence();
#endif
}

/* Row r < rows of dst (dst_stride words apart) gets the 16 words of column r of src (16 rows,
 * src_stride words apart): always 16 words a row, zeros included (the callers' padding);
 * stream: as store_line says (dst's rows 64-byte aligned). */
static void transpose_words16_scalar(uint32_t *dst, size_t dst_stride, int rows,
                                     const uint32_t *src, size_t src_stride, bool stream) {
    for (int r = 0; r < rows; r++) {
        uint32_t col[16];
        for (int c = 0; c < 16; c++)
            col[c] = src[(size_t)c * src_stride + r];
        store_line(dst + (size_t)r * dst_stride, col, stream);
    }
}

#if defined(__x86_64__) || defined(_M_X64)
/* The same in zmm registers (transpose16_avx512.h): one 64-byte store a row where the scalar
 * loop makes 16 strided reads. */
__attribute__((target("avx512f"))) static void
transpose_words16_avx512(uint32_t *dst, size_t dst_stride, int rows, const uint32_t *src,
                         size_t src_stride, bool stream) {
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512((const void *)(src + (size_t)i * src_stride));
    transpose16_lanes32(r);
    if (stream)
        for (int i = 0; i < rows; i++)
            _mm512_stream_si512((void *)(dst + (size_t)i * dst_stride), r[i]);
    else
        for (int i = 0; i < rows; i++)
            _mm512_storeu_si512((void *)(dst + (size_t)i * dst_stride), r[i]);
}
#endif

/* In zmm registers where the path multiplies with AVX-512 (amx and avx512 need AVX512F; so a
 * forced avx2 or sgemm path, the tests' way to reach the scalar loop, transposes without it). */
static void transpose_words16(uint32_t *dst, size_t dst_stride, int rows, const uint32_t *src,
                              size_t src_stride, bool stream) {
#if defined(__x86_64__) || defined(_M_X64)
    GemmBf16Path path = gemm_bf16_path();
    if (path == GEMM_BF16_AMX || path == GEMM_BF16_AVX512) {
        transpose_words16_avx512(dst, dst_stride, rows, src, src_stride, stream);
        return;
    }
#endif
    transpose_words16_scalar(dst, dst_stride, rows, src, src_stride, stream);
}

/* Row i of a packed A: the source row rounded, then zeros to depth_padded. Read along the
 * source row (col_stride 1 for a row-major A); an fp32 row-major source has its own loop, which
 * vectorises. */
static void pack_a_row(uint16_t *dst, const Bf16Source *src, int i, int depth, int kp) {
    if (src->f32 && src->col_stride == 1) {
        narrow_bf16_run(dst, src->f32 + (size_t)i * src->row_stride, depth);
    } else {
        for (int k = 0; k < depth; k++)
            dst[k] = source_at(src, i, k);
    }
    memset(dst + depth, 0, (size_t)(kp - depth) * sizeof *dst);
}

/* The bf16 pair (x[0], x[step]) of an fp32 or (if f32 is NULL) bf16 source as one 32-bit word,
 * lo half first (invariant 1); hi_too false: an odd depth's last index, its pair's other half
 * padding. */
static inline uint32_t source_pair(const float *f32, const uint16_t *bf16, size_t at, size_t step,
                                   bool hi_too) {
    if (f32)
        return narrow_bf16(f32[at]) | (hi_too ? (uint32_t)narrow_bf16(f32[at + step]) << 16 : 0u);
    return bf16[at] | (hi_too ? (uint32_t)bf16[at + step] << 16 : 0u);
}

/* Depth values k0 .. k0 + PACK_ROWS of every row of a packed A from a source stored along its
 * columns (row_stride 1: a transposed matrix, dW's dout^T, fp32 or the bf16 of dout's own packed
 * A): PACK_ROWS source rows read along their length, through tiles of PACK_ROWS / 2 depth pairs
 * x PACK_ROWS packed rows. Two source rows (depth indices 2q, 2q + 1) make one 32-bit pair per
 * packed row in a vectorised loop (rounded from fp32, or two bf16 halves joined), then each
 * packed row's 16 pairs are written out from L1 by a 16 x 16 transpose of words (invariant 1: a
 * pair is one word): one 64-byte store, a whole cache line, per row. The tile's pair rows past
 * the depth are zero, so each chunk writes its 32 values whole and the last one ends at kp.
 * (Row blocks outermost instead, each reading a 128-byte strip of every source row, with the
 * pairs written a word at a time, was 4.6% of a bf16 DPO step.) */
static void pack_a_depth_chunk(uint16_t *d, const Bf16Source *src, int k0, int rows, int depth,
                               int kp) {
    uint32_t tile[PACK_ROWS / 2][PACK_ROWS];
    int pairs = ((depth - k0 < PACK_ROWS ? depth - k0 : PACK_ROWS) + 1) / 2;
    size_t cs = src->col_stride;
    for (int q = pairs; q < PACK_ROWS / 2; q++)
        memset(tile[q], 0, sizeof tile[q]);
    for (int i0 = 0; i0 < rows; i0 += PACK_ROWS) {
        int count = rows - i0 < PACK_ROWS ? rows - i0 : PACK_ROWS;
        for (int q = 0; q < pairs; q++) {
            int k = k0 + 2 * q;
            size_t at = (size_t)k * cs + (size_t)i0;
            bool hi_too = k + 1 < depth; /* else an odd depth's last index: padding beside it */
            if (src->f32 && hi_too) {
                narrow_bf16_pairs(tile[q], src->f32 + at, src->f32 + at + cs, count);
            } else if (hi_too) {
                const uint16_t *lo = src->bf16 + at, *hi = lo + cs;
#pragma omp simd
                for (int i = 0; i < count; i++)
                    tile[q][i] = lo[i] | (uint32_t)hi[i] << 16;
            } else {
                for (int i = 0; i < count; i++)
                    tile[q][i] = source_pair(src->f32, src->bf16, at + (size_t)i, cs, false);
            }
        }
        for (int ib = 0; ib < count; ib += 16)
            transpose_words16((uint32_t *)(d + (size_t)(i0 + ib) * kp + k0), (size_t)kp / 2,
                              count - ib < 16 ? count - ib : 16, &tile[0][ib], PACK_ROWS, false);
    }
}

void bf16_pack_a(Bf16PackedA *a, Bf16Source src, int rows, int depth) {
    a->rows = rows, a->depth = depth;
    a->rows_padded = round_up(rows > 0 ? rows : 1, GEMM_BF16_ROW_PAD);
    a->depth_padded = round_up(depth > 0 ? depth : 1, GEMM_BF16_DEPTH_PAD);
    int kp = a->row_stride = a->depth_padded;
    uint16_t *d = a->data = alloc_bf16((size_t)a->rows_padded * kp, &a->bytes);
    memset(d + (size_t)rows * kp, 0, (size_t)(a->rows_padded - rows) * kp * sizeof *d);
    if (src.row_stride == 1 && src.col_stride > 1) { /* by depth chunks: distinct cache lines a
                                                      * thread (else value by value below) */
#pragma omp parallel for schedule(static) if ((size_t)rows * depth > 65536)
        for (int k0 = 0; k0 < depth; k0 += PACK_ROWS)
            pack_a_depth_chunk(d, &src, k0, rows, depth, kp);
        if (depth == 0) /* no chunk: the row's padding */
            for (int i = 0; i < rows; i++)
                memset(d + (size_t)i * kp, 0, (size_t)kp * sizeof *d);
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)rows * depth > 65536)
    for (int i = 0; i < rows; i++)
        pack_a_row(d + (size_t)i * kp, &src, i, depth, kp);
}

void bf16_pack_a_transposed(Bf16PackedA *at, const Bf16PackedA *a) {
    bf16_pack_a(at, (Bf16Source){.bf16 = a->data, .row_stride = 1, .col_stride = a->row_stride},
                a->depth, a->rows);
}

void bf16_packed_a_free(Bf16PackedA *a) {
    release_bf16(a->data, a->bytes);
    a->data = NULL;
}

/* Panel p of a packed B (invariant 2): the source's values, a depth pair (one 32-bit word) at a
 * time, read along the source's contiguous direction: down the depth for a transposed W
 * (row_stride 1: a column's pairs are adjacent), along the columns for a row-major source
 * (col_stride 1: two source rows give a pair step's 16 words), else value by value; zeros
 * elsewhere (invariant 3). */
static void pack_b_panel(uint16_t *panel, const Bf16Source *src, int p, int depth, int cols, int kp,
                         bool stream) {
    int j0 = p * GEMM_BF16_PANEL;
    int width = cols - j0 < GEMM_BF16_PANEL ? cols - j0 : GEMM_BF16_PANEL, pairs = (depth + 1) / 2;
    const float *f32 = src->f32;
    const uint16_t *bf16 = src->bf16;
    size_t rs = src->row_stride, cs = src->col_stride;
    if (rs == 1) {
        /* PANEL pair steps at a time through an L1 tile: each column's pairs rounded in a
         * vectorised loop along its source row, then the tile written out as 16 whole steps
         * (a 16 x 16 transpose of words), zeros past the columns and the depth included: the
         * steps up to kp / 2 (a multiple of 16) cover the panel, which needs no memset first */
        uint32_t tile[GEMM_BF16_PANEL][GEMM_BF16_PANEL];
        for (int q0 = 0; q0 < kp / 2; q0 += GEMM_BF16_PANEL) {
            uint16_t *steps = panel + (size_t)q0 * 2 * GEMM_BF16_PANEL;
            if (q0 >= pairs) { /* depth padding only */
                memset(steps, 0, (size_t)GEMM_BF16_PANEL * 2 * GEMM_BF16_PANEL * sizeof *steps);
                continue;
            }
            int count = pairs - q0 < GEMM_BF16_PANEL ? pairs - q0 : GEMM_BF16_PANEL;
            bool whole = 2 * (q0 + count) <= depth; /* no odd last index in this chunk */
            if (count < GEMM_BF16_PANEL || width < GEMM_BF16_PANEL) memset(tile, 0, sizeof tile);
            for (int jj = 0; jj < width; jj++) {
                size_t at = (size_t)(j0 + jj) * cs + 2 * (size_t)q0;
                uint32_t *t = tile[jj];
                if (f32 && whole) {
                    narrow_bf16_neighbours(t, f32 + at, count);
                } else if (whole) {
                    memcpy(t, bf16 + at, (size_t)count * sizeof *t);
                } else {
                    for (int q = 0; q < count; q++)
                        t[q] =
                            source_pair(f32, bf16, at + 2 * (size_t)q, 1, 2 * (q0 + q) + 1 < depth);
                }
            }
            transpose_words16((uint32_t *)steps, GEMM_BF16_PANEL, GEMM_BF16_PANEL, &tile[0][0],
                              GEMM_BF16_PANEL, stream);
        }
        return;
    }
    memset(panel, 0, (size_t)GEMM_BF16_PANEL * kp * sizeof *panel);
    if (cs == 1) {
        for (int q = 0; q < pairs; q++) {
            size_t row = 2 * (size_t)q * rs + (size_t)j0;
            bool hi_too = 2 * q + 1 < depth;
            uint16_t *step = panel + (size_t)q * 2 * GEMM_BF16_PANEL;
            for (int jj = 0; jj < width; jj++) {
                uint32_t word = source_pair(f32, bf16, row + (size_t)jj, rs, hi_too);
                memcpy(step + 2 * jj, &word, sizeof word);
            }
        }
    } else {
        for (int k = 0; k < depth; k++)
            for (int jj = 0; jj < width; jj++)
                panel[(size_t)(k / 2) * 2 * GEMM_BF16_PANEL + jj * 2 + k % 2] =
                    source_at(src, k, j0 + jj);
    }
}

#define STEP_BLOCK 8 /* pair steps of a row-major B source packed per visit of a panel */

/* Pair steps q0 .. q1 (at most STEP_BLOCK) of every panel of a packed B from a row-major source
 * (col_stride 1): source rows 2q and 2q + 1 (zero past the depth), each panel's 16 words, zero
 * past the columns (invariants 2 and 3), panel by panel: a panel's steps are one contiguous
 * 64 * (q1 - q0) byte run (one step over all panels at a time wrote 64 bytes to each of a
 * down projection's 304 panels, 28 KB apart: 6 GB/s, half the rate of the other weights). */
static void pack_b_steps(uint16_t *d, const Bf16Source *src, int q0, int q1, int depth, int cols,
                         int panels, int kp, bool stream) {
    size_t rs = src->row_stride;
    for (int p = 0; p < panels; p++) {
        int j0 = p * GEMM_BF16_PANEL;
        int width = cols - j0 < GEMM_BF16_PANEL ? cols - j0 : GEMM_BF16_PANEL;
        for (int q = q0; q < q1; q++) {
            uint32_t step[GEMM_BF16_PANEL];
            int k = 2 * q, w = k >= depth ? 0 : width;
            bool hi_too = k + 1 < depth;
            size_t at = (size_t)k * rs + (size_t)j0;
            if (w == GEMM_BF16_PANEL && hi_too && src->f32) {
                narrow_bf16_pairs(step, src->f32 + at, src->f32 + at + rs, GEMM_BF16_PANEL);
            } else if (w == GEMM_BF16_PANEL && hi_too) {
                const uint16_t *lo = src->bf16 + at, *hi = lo + rs;
#pragma omp simd
                for (int jj = 0; jj < GEMM_BF16_PANEL; jj++)
                    step[jj] = lo[jj] | (uint32_t)hi[jj] << 16;
            } else {
                for (int jj = 0; jj < GEMM_BF16_PANEL; jj++)
                    step[jj] =
                        jj < w ? source_pair(src->f32, src->bf16, at + (size_t)jj, rs, hi_too) : 0u;
            }
            store_line(d + (size_t)p * GEMM_BF16_PANEL * kp + (size_t)q * 2 * GEMM_BF16_PANEL, step,
                       stream);
        }
    }
}

/* b's values from src into b->data, laid out as b's sizes say (invariants 2 and 3). */
static void pack_b_values(Bf16PackedB *b, Bf16Source src) {
    int depth = b->depth, cols = b->cols;
    int kp = b->depth_padded, panels = b->cols_padded / GEMM_BF16_PANEL;
    uint16_t *d = b->data;
    if (src.col_stride == 1 && src.row_stride > 1) {
        /* a row-major source: STEP_BLOCK pair steps at a time, 2 * STEP_BLOCK whole source rows
         * (panel by panel over the whole depth would read 64 bytes of every row per panel: over
         * a W larger than the cache, such as the lm_head's, that measured 20x slower) */
#pragma omp parallel for schedule(static) if ((size_t)depth * cols > 65536)
        for (int q0 = 0; q0 < kp / 2; q0 += STEP_BLOCK)
            pack_b_steps(d, &src, q0, q0 + STEP_BLOCK < kp / 2 ? q0 + STEP_BLOCK : kp / 2, depth,
                         cols, panels, kp, false);
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)depth * cols > 65536)
    for (int p = 0; p < panels; p++)
        pack_b_panel(d + (size_t)p * GEMM_BF16_PANEL * kp, &src, p, depth, cols, kp, false);
}

void bf16_pack_b(Bf16PackedB *b, Bf16Source src, int depth, int cols) {
    b->depth = depth, b->cols = cols;
    b->depth_padded = round_up(depth > 0 ? depth : 1, GEMM_BF16_DEPTH_PAD);
    b->cols_padded = round_up(cols > 0 ? cols : 1, GEMM_BF16_ROW_PAD);
    b->panel_stride = (size_t)GEMM_BF16_PANEL * b->depth_padded;
    b->data = alloc_bf16((size_t)b->depth_padded * b->cols_padded, &b->bytes);
    pack_b_values(b, src);
}

void bf16_repack_b(Bf16PackedB *b, Bf16Source src) {
    if (!b->data || b->panel_stride != (size_t)GEMM_BF16_PANEL * b->depth_padded)
        die(true, "bf16_repack_b: not a whole packing of its own (a caller's bug)");
    pack_b_values(b, src);
}

void bf16_repack_b_rows(Bf16PackedB *b, const float *w, int in_dim, bool transposed, int r0,
                        int r1) {
    int kp = b->depth_padded, panels = b->cols_padded / GEMM_BF16_PANEL;
    if (transposed) { /* W^T: W's rows are b's columns, panel r / 16 */
        Bf16Source src = {.f32 = w, .row_stride = 1, .col_stride = (size_t)in_dim};
        for (int p = r0 / GEMM_BF16_PANEL; p * GEMM_BF16_PANEL < r1; p++)
            pack_b_panel(b->data + (size_t)p * b->panel_stride, &src, p, b->depth, b->cols, kp,
                         true);
    } else { /* W: W's rows are b's depth, pair step r / 2 of every panel */
        Bf16Source src = {.f32 = w, .row_stride = (size_t)in_dim, .col_stride = 1};
        pack_b_steps(b->data, &src, r0 / 2, (r1 + 1) / 2, b->depth, b->cols, panels, kp, true);
    }
    stream_fence();
}

void bf16_packed_b_free(Bf16PackedB *b) {
    release_bf16(b->data, b->bytes);
    b->data = NULL;
}

/* A caller's bug (a view outside its factor, or one whose padding would not be zero). */
static void check_view(bool ok, const char *what, int at, int count, int size) {
    if (!ok)
        die(true, "gemm_bf16: a view of %s %d.. %d of %d (not on a 32 boundary or outside it)",
            what, at, at + count, size);
}

Bf16PackedB bf16_packed_b_view(const Bf16PackedB *b, int k0, int depth, int j0, int cols) {
    int end_k = k0 + depth, end_j = j0 + cols;
    check_view(k0 % GEMM_BF16_DEPTH_PAD == 0 && depth >= 0 && end_k <= b->depth &&
                   (end_k == b->depth || end_k % GEMM_BF16_DEPTH_PAD == 0),
               "depth", k0, depth, b->depth);
    check_view(j0 % GEMM_BF16_ROW_PAD == 0 && cols >= 0 && end_j <= b->cols &&
                   (end_j == b->cols || end_j % GEMM_BF16_ROW_PAD == 0),
               "columns", j0, cols, b->cols);
    Bf16PackedB v = *b;
    /* panel j0 / 16, pair step k0 / 2 (invariant 2: a pair step is 2 x 16 values) */
    v.data =
        b->data + (size_t)(j0 / GEMM_BF16_PANEL) * b->panel_stride + (size_t)k0 * GEMM_BF16_PANEL;
    v.depth = depth, v.cols = cols;
    v.depth_padded = round_up(depth > 0 ? depth : 1, GEMM_BF16_DEPTH_PAD);
    v.cols_padded = round_up(cols > 0 ? cols : 1, GEMM_BF16_ROW_PAD);
    v.bytes = 0;
    return v;
}

Bf16PackedA bf16_packed_a_rows(const Bf16PackedA *a, int r0, int rows) {
    int end = r0 + rows;
    check_view(r0 % GEMM_BF16_ROW_PAD == 0 && rows >= 0 && end <= a->rows &&
                   (end == a->rows || end % GEMM_BF16_ROW_PAD == 0),
               "rows", r0, rows, a->rows);
    Bf16PackedA v = *a;
    v.data = a->data + (size_t)r0 * a->row_stride;
    v.rows = rows;
    v.rows_padded = round_up(rows > 0 ? rows : 1, GEMM_BF16_ROW_PAD);
    v.bytes = 0;
    return v;
}

/* ---- the product ---- */

/* The product, stored as st says. */
static void run(float *c, size_t ldc, const GemmBf16Store *st, const Bf16PackedA *a,
                const Bf16PackedB *b) {
    if (a->depth != b->depth)
        die(true, "gemm_bf16: A's depth %d is not B's %d (a caller's bug)", a->depth, b->depth);
    if (a->rows == 0 || b->cols == 0) return;
    if (a->depth == 0) { /* an empty sum */
        float zero[GEMM_BF16_ROW_PAD] = {0};
        if (st->round || !st->accumulate)
            for (int i = 0; i < a->rows; i++)
                for (int j0 = 0; j0 < b->cols; j0 += GEMM_BF16_ROW_PAD)
                    gemm_bf16_store_block(c, ldc, st, zero, 0, i, j0, 1,
                                          b->cols - j0 < GEMM_BF16_ROW_PAD ? b->cols - j0
                                                                           : GEMM_BF16_ROW_PAD);
        return;
    }
    switch (gemm_bf16_path()) {
    case GEMM_BF16_AMX:
        gemm_bf16_run_amx(c, ldc, st, a, b);
        break;
    case GEMM_BF16_AVX512:
        gemm_bf16_run_avx512(c, ldc, st, a, b);
        break;
    case GEMM_BF16_AVX2:
        gemm_bf16_run_avx2(c, ldc, st, a, b);
        break;
    default:
        die(true, "gemm_bf16 called with no bf16 GEMM path (a caller's bug: check gemm_bf16_path)");
    }
}

void gemm_bf16(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a, const Bf16PackedB *b) {
    run(c, ldc, &(GemmBf16Store){.accumulate = accumulate}, a, b);
}

void gemm_bf16_rounded(float *c, size_t ldc, const Bf16PackedA *a, const Bf16PackedB *b,
                       const float *bias) {
    run(c, ldc, &(GemmBf16Store){.round = true, .bias = bias}, a, b);
}
