/* attention_product_amx (attention_amx.h): both operands packed as gemm_bf16 packs them (rounded
 * to bf16, zero-padded to whole 32 x 32 blocks and 32-value depth steps, gemm_bf16.c's invariants
 * 1-3), then 32 x 32 blocks of C as gemm_bf16_amx.c runs them: 4 tiles of sums (tmm0-3), 2 of A
 * (tmm4-5), 2 of B (tmm6-7), with attention's masked parts skipped block by block.
 *
 * Packing: the key panels once per call by bf16_pack_b (pack_panel); P and dS for the panel
 * products by attention.c itself as it makes them (packed_product); everything a block packs
 * per product (its q / dO rows; dO^T and Q^T, transposed 16 x 16 words in registers, with P and
 * dS as B for the backward's transposed key-side products, attention_train.h's keys_transposed)
 * by this file's AVX-512 packers into stack buffers: no allocation or pool lock per product. The
 * bits are bf16_pack_a's / bf16_pack_b's (test_attention_amx's product sweep checks them against
 * the double sums of the rounded operands).
 *
 * Invariants:
 *  1. A block's depth range is whole 32-value steps: where ATTN_CAUSAL_DEPTH cuts it inside a
 *     step, that step is run whole and reads the cut part's zeros (never a NaN: the contract).
 *  2. The tiles are configured on entry and released on exit of every call, on the calling
 *     thread: attention calls this from its own OpenMP tasks, and nothing is left configured
 *     between calls (a thread's next AMX user configures its own). */
#include "kernels/cpu/attention_amx.h"

#include "kernels/cpu/attention_softmax_avx512.h"
#include "kernels/cpu/attention_train.h"
#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/narrow_bf16.h"

#include <stdlib.h>
#include <string.h>

bool attention_amx_usable(void) {
    return gemm_bf16_path() == GEMM_BF16_AMX;
}

static void *pack_panel(const float *b, int depth, int cols, size_t row_stride, size_t col_stride);
static void free_panel(void *packed);
static void panel_product(int m, int n, int k, float alpha, const float *a, int lda,
                          const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                          int diag);
static void packed_product(int m, int n, int k, float alpha, const uint16_t *a, int a_stride,
                           const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                           int diag);

/* ATTN_PACK_STEP's layout is a packed A's (invariants 1 and 3 of gemm_bf16.c) */
_Static_assert(ATTN_PACK_STEP == GEMM_BF16_DEPTH_PAD && ATTN_PACK_STEP == GEMM_BF16_ROW_PAD,
               "attention.c's packed P and dS are gemm_bf16's packed A");

/* The key panels packed once per call (a block's first key a multiple of 32, where a packing's
 * view may start): the keys and values each block and head reads are not packed again. */
static const AttnKernel kernel_amx = {.product = attention_product_amx,
                                      .normalise_first = true,
                                      .key_align = 32,
                                      .pack_panel = pack_panel,
                                      .free_panel = free_panel,
                                      .panel_product = panel_product,
                                      .packed_product = packed_product,
                                      .keys_transposed = true,
                                      .softmax = attention_softmax_avx512};

void attention_forward_amx(float *out, const float *q, const float *k, const float *v,
                           const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                           int n_heads, int n_kv_heads, int hd, int window, AttnScores sc) {
    attention_forward_with(&kernel_amx, out, q, k, v, segs, n_segs, seq_index, n_heads, n_kv_heads,
                           hd, window, sc);
}

void attention_backward_amx(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const AttnSegment *segs, int n_segs,
                            const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads,
                            int hd, int window, AttnScores sc) {
    attention_backward_with(&kernel_amx, dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows,
                            n_heads, n_kv_heads, hd, window, sc);
}

static void *pack_panel(const float *b, int depth, int cols, size_t row_stride, size_t col_stride) {
    Bf16PackedB *pb = xmalloc(sizeof *pb);
    bf16_pack_b(pb, (Bf16Source){b, NULL, row_stride, col_stride}, depth, cols);
    return pb;
}

static void free_panel(void *packed) {
    bf16_packed_b_free(packed);
    free(packed);
}

#if defined(__x86_64__)
#include <immintrin.h>
#include "kernels/cpu/transpose16_avx512.h"

#define TARGET __attribute__((target("amx-tile,amx-bf16")))
#define BLOCK  32 /* rows and columns of a block; the depth of one step */
#define TILE   16

static int clamp(int x, int lo, int hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

static int round_up(int x, int m) {
    return (x + m - 1) / m * m;
}

/* The 32 x 32 sums of block (i0, j0) over depth steps k0 .. k1 (multiples of 32) into buf. */
TARGET static void block_sums(float buf[BLOCK * BLOCK], const Bf16PackedA *a, const Bf16PackedB *b,
                              int i0, int j0, int k0, int k1) {
    size_t ld = (size_t)a->row_stride;
    const uint16_t *a0 = a->data + (size_t)i0 * ld, *a1 = a0 + TILE * ld;
    const uint16_t *b0 = b->data + (size_t)(j0 / TILE) * b->panel_stride,
                   *b1 = b0 + b->panel_stride;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int k = k0; k < k1; k += BLOCK) {
        _tile_loadd(4, a0 + k, ld * sizeof(uint16_t));
        _tile_loadd(5, a1 + k, ld * sizeof(uint16_t));
        _tile_loadd(6, b0 + (size_t)k * TILE, 64); /* pair steps k / 2 .., 64 bytes apart */
        _tile_loadd(7, b1 + (size_t)k * TILE, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, buf, BLOCK * sizeof(float));
    _tile_stored(1, buf + TILE, BLOCK * sizeof(float));
    _tile_stored(2, buf + TILE * BLOCK, BLOCK * sizeof(float));
    _tile_stored(3, buf + TILE * BLOCK + TILE, BLOCK * sizeof(float));
}

/* C's rows i0.. i0 + rows, columns j0.. j0 + cols from the block's sums (NULL: all 0): alpha
 * times, added to C when beta is 1; ATTN_CAUSAL_OUTPUT's part 0. */
static void store_block(float *c, int ldc, const float *buf, float alpha, float beta, int i0,
                        int j0, int rows, int cols, bool causal_output, int diag) {
    for (int i = 0; i < rows; i++) {
        float *ci = c + (size_t)(i0 + i) * ldc + j0;
        const float *bi = buf ? buf + (size_t)i * BLOCK : NULL;
        /* columns j < seen are computed; from seen on, ATTN_CAUSAL_OUTPUT's zeros */
        int seen = causal_output ? clamp(i0 + i + diag + 1 - j0, 0, cols) : cols;
        if (!bi)
            seen = 0;
        else if (beta != 0.0f)
#pragma omp simd
            for (int j = 0; j < seen; j++)
                ci[j] += alpha * bi[j];
        else
#pragma omp simd
            for (int j = 0; j < seen; j++)
                ci[j] = alpha * bi[j];
        if (seen < cols && (causal_output || beta == 0.0f))
            memset(ci + seen, 0, (size_t)(cols - seen) * sizeof *ci);
    }
}

/* C (pa->rows x n) = alpha op(A) B + beta C from the packings (pb at least n columns and
 * pa->depth_padded deep), as attention_product_amx's contract says. */
static void run_blocks(bool trans_a, const Bf16PackedA *pa, const Bf16PackedB *pb, int n,
                       float alpha, float beta, float *c, int ldc, AttnShape shape, int diag) {
    int m = pa->rows, k = pa->depth;
    bool causal_output = shape == ATTN_CAUSAL_OUTPUT;
    float buf[BLOCK * BLOCK] __attribute__((aligned(64)));
    gemm_bf16_amx_configure_tiles(TILE, TILE); /* gemm_bf16_amx.c's tile layout */
    /* column blocks outer: B's two panels stay in L1 across the row blocks */
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        int cols = n - j0 < BLOCK ? n - j0 : BLOCK;
        for (int i0 = 0; i0 < m; i0 += BLOCK) {
            int rows = m - i0 < BLOCK ? m - i0 : BLOCK;
            if (causal_output && j0 > i0 + rows - 1 + diag) { /* no row sees these columns */
                store_block(c, ldc, NULL, alpha, beta, i0, j0, rows, cols, true, diag);
                continue;
            }
            int k0 = 0, k1 = pa->depth_padded; /* invariant 1: whole steps */
            if (shape == ATTN_CAUSAL_DEPTH && !trans_a)
                k1 = (clamp(i0 + rows + diag, 0, k) + BLOCK - 1) / BLOCK * BLOCK;
            if (shape == ATTN_CAUSAL_DEPTH && trans_a) k0 = clamp(i0 - diag, 0, k) / BLOCK * BLOCK;
            block_sums(buf, pa, pb, i0, j0, k0, k1);
            store_block(c, ldc, buf, alpha, beta, i0, j0, rows, cols, causal_output, diag);
        }
    }
    gemm_bf16_amx_release_tiles();
}

#define AVX512 __attribute__((target("avx512f")))

AVX512 static void pack_a_rows(uint16_t *d, const float *a, int lda, int m, int k, int stride);

/* The depth pair (row r, row r + 1) of 16 columns j0.. of a row-major fp32 source (rows of ld
 * values; `rows` of them, `cols` columns: what lies beyond is 0) as 16 words, row r's bf16 in the
 * low half (gemm_bf16.c invariants 1 and 2: one 32-bit word per pair). */
AVX512 static inline __m512i pair_words(const float *src, size_t ld, int r, int rows, int j0,
                                        int cols) {
    __mmask16 m = cols - j0 >= 16 ? 0xFFFF : cols <= j0 ? 0 : (__mmask16)((1u << (cols - j0)) - 1);
    __m512 lo =
        r < rows ? _mm512_maskz_loadu_ps(m, src + (size_t)r * ld + j0) : _mm512_setzero_ps();
    __m512 hi = r + 1 < rows ? _mm512_maskz_loadu_ps(m, src + (size_t)(r + 1) * ld + j0)
                             : _mm512_setzero_ps();
    return _mm512_or_si512(narrow_bf16_lanes32(lo), _mm512_slli_epi32(narrow_bf16_lanes32(hi), 16));
}

/* bf16_pack_a's packing of op(A) (m x k) into pa->data (capacity checked by the caller), A^T
 * stored k x m row-major (rows of lda): a 16 x 16 block of depth pairs x columns at a time,
 * rounded in vectors along the stored rows and transposed in registers, into the caller's
 * stack buffer (bf16_pack_a, whose transposed packing works the same way since, takes a buffer
 * from gemm_bf16's pool under its lock per call; before either, the word-by-word stores were 11%
 * of the AMX attention's time, perf). */
AVX512 static void pack_a_transposed(Bf16PackedA *pa, const float *a, int lda, int m, int k) {
    int ds = pa->row_stride / 2; /* words a packed row */
    uint32_t *d = (uint32_t *)pa->data;
    for (int i0 = 0; i0 < pa->rows_padded; i0 += 16)
        for (int q0 = 0; q0 < ds; q0 += 16) {
            __m512i x[16];
            for (int q = 0; q < 16; q++)
                x[q] = pair_words(a, (size_t)lda, 2 * (q0 + q), k, i0, m);
            transpose16_lanes32(x);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512(d + (size_t)(i0 + i) * ds + q0, x[i]);
        }
}

/* bf16_pack_b's packing of B (k x n, row-major, rows of ldb) into pb->data: each panel's pair
 * steps are 16 words of two source rows, rounded and interleaved in one vector. */
AVX512 static void pack_b_rows(Bf16PackedB *pb, const float *b, int ldb, int k, int n) {
    uint32_t *d = (uint32_t *)pb->data;
    int pairs = pb->depth_padded / 2;
    for (int p = 0; p < pb->cols_padded / 16; p++)
        for (int q = 0; q < pairs; q++)
            _mm512_storeu_si512(d + (size_t)p * (pb->panel_stride / 2) + (size_t)q * 16,
                                pair_words(b, (size_t)ldb, 2 * q, k, 16 * p, n));
}

/* A's and B's packings on the stack up to this many values each (64 query rows and 512 keys, or
 * head dim 256: the 135M and 0.5B benches' blocks), else bf16_pack_a / bf16_pack_b's. */
#define STACK_PACK (64 * 512)

static int round_up_nonzero(int x) {
    return round_up(x > 0 ? x : 1, BLOCK);
}

void attention_product_amx(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                           int diag) {
    if (m <= 0 || n <= 0) return;
    int mp = round_up(m, BLOCK), np = round_up(n, BLOCK), kp = round_up_nonzero(k);
    if ((size_t)mp * kp > STACK_PACK || (size_t)np * kp > STACK_PACK) {
        /* op(A)(i, l) is a[i * lda + l], or a[l * lda + i] transposed (Bf16Source's strides) */
        Bf16Source as = {a, NULL, trans_a ? 1 : (size_t)lda, trans_a ? (size_t)lda : 1};
        Bf16PackedA pa;
        Bf16PackedB pb;
        bf16_pack_a(&pa, as, m, k);
        bf16_pack_b(&pb, (Bf16Source){b, NULL, (size_t)ldb, 1}, k, n);
        run_blocks(trans_a, &pa, &pb, n, alpha, beta, c, ldc, shape, diag);
        bf16_packed_a_free(&pa);
        bf16_packed_b_free(&pb);
        return;
    }
    uint16_t a_data[STACK_PACK] __attribute__((aligned(64)));
    uint16_t b_data[STACK_PACK] __attribute__((aligned(64)));
    Bf16PackedA pa = {a_data, m, k, mp, kp, kp, sizeof a_data};
    Bf16PackedB pb = {b_data, k, n, kp, np, (size_t)16 * kp, sizeof b_data};
    if (trans_a)
        pack_a_transposed(&pa, a, lda, m, k);
    else
        pack_a_rows(a_data, a, lda, m, k, kp);
    pack_b_rows(&pb, b, ldb, k, n);
    run_blocks(trans_a, &pa, &pb, n, alpha, beta, c, ldc, shape, diag);
}

/* bf16_pack_a's packing of a row-major A (m x k, rows of lda) into d (stride values a row, a
 * multiple of 32 at least k; m rounded up to 32 rows, the rows past m zero): 16 values at a time,
 * the loads past k masked, so the padding's zeros come out of the same stores. */
AVX512 static void pack_a_rows(uint16_t *d, const float *a, int lda, int m, int k, int stride) {
    for (int i = 0; i < m; i++) {
        const float *row = a + (size_t)i * lda;
        uint16_t *dst = d + (size_t)i * stride;
        for (int l = 0; l < stride; l += 16) {
            __mmask16 in = k - l >= 16 ? 0xFFFF : k <= l ? 0 : (__mmask16)((1u << (k - l)) - 1);
            __m512i r = narrow_bf16_lanes32(_mm512_maskz_loadu_ps(in, row + l));
            _mm256_storeu_si256((__m256i *)(dst + l), _mm512_cvtepi32_epi16(r));
        }
    }
    memset(d + (size_t)m * stride, 0, (size_t)(round_up(m, BLOCK) - m) * stride * sizeof *d);
}

/* The view of the panel from (k0, j0) on holds k x n and runs on to a multiple of 32 (or the
 * packing's end): its depth beyond k meets A's zero padding, its columns beyond n are not stored
 * (invariant 3 of gemm_bf16.c holds for the packing, not for the view's tail). A: packed
 * (ATTN_PACK_STEP's layout, attention_train.h). */
static void packed_product(int m, int n, int k, float alpha, const uint16_t *a, int a_stride,
                           const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                           int diag) {
    if (m <= 0 || n <= 0) return;
    const Bf16PackedB *pb = panel;
    int depth = k0 + round_up(k, BLOCK) < pb->depth ? round_up(k, BLOCK) : pb->depth - k0;
    int cols = j0 + round_up(n, BLOCK) < pb->cols ? round_up(n, BLOCK) : pb->cols - j0;
    Bf16PackedB view = bf16_packed_b_view(pb, k0, depth, j0, cols);
    Bf16PackedA pa = {(uint16_t *)a, m, k, round_up(m, BLOCK), round_up(k, BLOCK), a_stride, 0};
    run_blocks(false, &pa, &view, n, alpha, 0.0f, c, ldc, shape, diag);
}

/* packed_product on A (m x k fp32, row stride lda) rounded and packed (ATTN_PACK_STEP's layout):
 * on the stack when it fits, not through gemm_bf16's pool (a lock and a buffer per call). */
static void panel_product(int m, int n, int k, float alpha, const float *a, int lda,
                          const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                          int diag) {
    if (m <= 0 || n <= 0) return;
    int stride = round_up(k > 0 ? k : 1, BLOCK);
    if ((size_t)round_up(m, BLOCK) * stride > STACK_PACK) {
        Bf16PackedA pa;
        bf16_pack_a(&pa, (Bf16Source){a, NULL, (size_t)lda, 1}, m, k);
        packed_product(m, n, k, alpha, pa.data, pa.row_stride, panel, k0, j0, c, ldc, shape, diag);
        bf16_packed_a_free(&pa);
        return;
    }
    uint16_t packed[STACK_PACK] __attribute__((aligned(64)));
    pack_a_rows(packed, a, lda, m, k, stride);
    packed_product(m, n, k, alpha, packed, stride, panel, k0, j0, c, ldc, shape, diag);
}

#else

void attention_product_amx(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                           int diag) {
    (void)trans_a, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc, (void)shape, (void)diag;
    abort(); /* attention_amx_usable said no: unreachable */
}

static void panel_product(int m, int n, int k, float alpha, const float *a, int lda,
                          const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                          int diag) {
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)panel, (void)k0, (void)j0;
    (void)c, (void)ldc, (void)shape, (void)diag;
    abort(); /* as attention_product_amx */
}

static void packed_product(int m, int n, int k, float alpha, const uint16_t *a, int a_stride,
                           const void *panel, int k0, int j0, float *c, int ldc, AttnShape shape,
                           int diag) {
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)a_stride, (void)panel, (void)k0;
    (void)j0, (void)c, (void)ldc, (void)shape, (void)diag;
    abort(); /* as attention_product_amx */
}

#endif
