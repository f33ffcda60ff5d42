/* A bf16 GEMM for the autocast products of training (bf16: true, matmul_autocast.c): both
 * factors rounded to bf16 (nearest, ties to even) and packed into bf16 panels, each product of
 * two bf16 values exact in fp32, the sums fp32. C = A · B with A (rows x depth) and B
 * (depth x cols) packed once each (gemm_bf16.c says how), C fp32.
 *
 * Paths (cpuid says which this CPU has; the build targets any x86-64 and compiles the special
 * paths with target attributes): AMX-BF16 tiles, AVX512_BF16 dot products, AVX2/FMA widening the
 * bf16 values to fp32. By default AMX where present, else GEMM_BF16_NONE: the caller keeps its
 * sgemm path, which measured faster than the avx512 and avx2 paths (gemm_bf16.c, best_path).
 * RLHF_GEMM_BF16=amx|avx512|avx2|sgemm in the environment forces one (a path the CPU lacks is an
 * error at first use). */
#ifndef RLHF_KERNELS_CPU_GEMM_BF16_H
#define RLHF_KERNELS_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    GEMM_BF16_NONE, /* no bf16 GEMM here: the caller rounds into fp32 copies and runs sgemm */
    GEMM_BF16_AVX2,
    GEMM_BF16_AVX512,
    GEMM_BF16_AMX,
    GEMM_BF16_PATH_COUNT
} GemmBf16Path;

/* A packed left factor A (rows x depth): row-major bf16 (row_stride values apart), rows padded
 * with zero rows to a multiple of 32 and depth with zeros to a multiple of 32 (one AMX tile's
 * depth) and on to the row stride. */
typedef struct {
    uint16_t *data;
    int rows, depth, rows_padded, depth_padded;
    int row_stride; /* in values: depth_padded (the kernels read rows this far apart) */
    size_t bytes;   /* data's capacity (a pooled buffer may be larger than needed) */
} Bf16PackedA;

/* A packed right factor B (depth x cols): panels of 16 columns, each depth_padded / 2 pair steps
 * of 16 (B[2q][j], B[2q + 1][j]) pairs (the VNNI layout both vdpbf16ps and an AMX B tile read);
 * cols padded with zero columns to a multiple of 32, depth to a multiple of 32. Panels start
 * panel_stride values apart: 16 x depth_padded as packed, more in a view of a depth range
 * (bf16_packed_b_view). */
typedef struct {
    uint16_t *data;
    int depth, cols, depth_padded, cols_padded;
    size_t panel_stride;
    size_t bytes; /* data's capacity (a pooled buffer may be larger than needed) */
} Bf16PackedB;

/* Where a factor's values are read from: element (r, c) at f32[r * row_stride + c * col_stride]
 * (rounded to bf16) or, if f32 is NULL, bf16[...] (as it is). Strides express a transpose. */
typedef struct {
    const float *f32;
    const uint16_t *bf16;
    size_t row_stride, col_stride;
} Bf16Source;

/* The path gemm_bf16 runs: the one forced (gemm_bf16_force, else RLHF_GEMM_BF16), else AMX if
 * this CPU has it, else GEMM_BF16_NONE. An RLHF_GEMM_BF16 naming an unknown or absent path is
 * fatal, with a message naming the variable and what this CPU offers. */
GemmBf16Path gemm_bf16_path(void);

/* Whether this CPU (and its OS, for AMX's tile state) can run path p. GEMM_BF16_NONE: always. */
bool gemm_bf16_supported(GemmBf16Path p);

/* Run path p from now on (tests and benches); false, changing nothing, if unsupported. */
bool gemm_bf16_force(GemmBf16Path p);

/* "amx", "avx512", "avx2", "sgemm". */
const char *gemm_bf16_path_name(GemmBf16Path p);

/* a = src (rows x depth) rounded and packed; a->data is allocated here (bf16_packed_a_free). */
void bf16_pack_a(Bf16PackedA *a, Bf16Source src, int rows, int depth);
void bf16_packed_a_free(Bf16PackedA *a);

/* at = a's transpose (a->depth rows, depth a->rows) packed from a's bf16 values, with the bits
 * bf16_pack_a gives from the transposed source of a (rounding is per value, and a transpose
 * only moves values): an operand needed in both layouts (a backward's dout, as A for dX and
 * transposed as A for dW) is rounded once and read as bf16, half the bytes of fp32, the second
 * time. at->data is allocated here (bf16_packed_a_free); a may be a view (bf16_packed_a_rows). */
void bf16_pack_a_transposed(Bf16PackedA *at, const Bf16PackedA *a);

/* b = src (depth x cols) rounded and packed; b->data is allocated here (bf16_packed_b_free). */
void bf16_pack_b(Bf16PackedB *b, Bf16Source src, int depth, int cols);
void bf16_packed_b_free(Bf16PackedB *b);

/* b (packed by bf16_pack_b, not a view) packed again from src, a source of b's depth and cols,
 * into b's own buffer: no allocation, so no page faults (gemm_bf16_cache.c repacks a weight that
 * an optimizer step updated so). */
void bf16_repack_b(Bf16PackedB *b, Bf16Source src);

/* Rows r0.. r1 of the fp32 W (out_dim x in_dim, row-major at w, in_dim >= 2) packed again into
 * b, a whole packing of W of its own (bf16_pack_b's from W, not a view): the forward's layout if
 * transposed (B = W^T, depth in_dim: the rows are b's columns; r0 a multiple of 16, r1 one or
 * out_dim), else dX's (B = W, depth out_dim: the rows are b's depth; r0 even, r1 even or
 * out_dim). The bits bf16_repack_b writes there, and nothing else of b is written, so threads
 * may pack disjoint row ranges at once. On the calling thread (no parallel region): an optimizer
 * thread packs the rows it has just updated while they are in its cache
 * (adamw_f32_update_repacking). The packed lines are written by non-temporal stores, fenced
 * before the return: not read from memory first nor kept in the cache, as nothing reads them
 * before the next forward. */
void bf16_repack_b_rows(Bf16PackedB *b, const float *w, int in_dim, bool transposed, int r0,
                        int r1);

/* The block of a packed B at depth k0.. k0 + depth and columns j0.. j0 + cols, as a Bf16PackedB
 * that shares b's data (not to be freed): k0 and j0 multiples of 32, the block inside b. Its
 * padding is b's: zero where b's is, b's own values where the block ends before b does, so a
 * block ending inside b must end at a multiple of 32 (a tile of the lm_head: fused_logprob.c). */
Bf16PackedB bf16_packed_b_view(const Bf16PackedB *b, int k0, int depth, int j0, int cols);

/* The rows r0.. r0 + rows of a packed A, sharing a's data: r0 a multiple of 32, and the block
 * ending at a's last row or at a multiple of 32. */
Bf16PackedA bf16_packed_a_rows(const Bf16PackedA *a, int r0, int rows);

/* C (a->rows x b->cols, row stride ldc) = A · B, or += A · B if accumulate; a->depth must equal
 * b->depth. The path must not be GEMM_BF16_NONE. Each element's sum runs over the depth in one
 * order fixed by the path alone: the same for any number of threads. */
void gemm_bf16(float *c, size_t ldc, bool accumulate, const Bf16PackedA *a, const Bf16PackedB *b);

/* C (a->rows x b->cols, row stride ldc) = bf16(A · B + bias): gemm_bf16's fp32 sums, bias[j]
 * (b->cols values, or NULL) added to column j's, each result rounded to the nearest bf16 (ties
 * to even; a NaN to the quiet NaN) as its block is stored. The bits of gemm_bf16 followed by
 * c = round(c + bias) over C, without that second pass over C: an autocast linear's output and
 * dX are bf16 tensors in torch (matmul_autocast.c). */
void gemm_bf16_rounded(float *c, size_t ldc, const Bf16PackedA *a, const Bf16PackedB *b,
                       const float *bias);

/* W (out_dim, in_dim), fp32 w32 or else bf16 w16, packed as the forward's B (W^T, depth in_dim)
 * if transposed, else as dX's (W, depth out_dim): from the cache of gemm_bf16_cache.c, packed on
 * first use and kept until gemm_bf16_weights_changed drops it (or the weights are found
 * changed). The packing is the cache's: valid until the next drop; the caller does not free it. */
const Bf16PackedB *bf16_weight_packed(const float *w32, const uint16_t *w16, int out_dim,
                                      int in_dim, bool transposed);

/* bf16_weight_packed for a caller that has looked W up with bf16_weight_packed since it last
 * wrote W or let anyone write it (the rollout: once at the start of a generate() call, then at
 * every product of its decode steps): a hit skips the fingerprint of invariant 3 in
 * gemm_bf16_cache.c, 512 scattered reads of W that cost a decode step of the 135M shape ~3% of
 * its CPU time (perf, 16 rows). A dropped entry is packed again as bf16_weight_packed packs it. */
const Bf16PackedB *bf16_weight_packed_unchanged(const float *w32, const uint16_t *w16, int out_dim,
                                                int in_dim, bool transposed);

/* Declares the weights at [begin, begin + bytes) frozen for as long as they live (a DPO run's
 * frozen reference kept in bf16): a product with a W stored in bf16 inside such a range reads
 * its packing from the cache, packed on first use and kept, as for an fp32 W, instead of packing
 * it on every call (gemm_bf16_weight_kept). The packing is the forward's layout only, unless a
 * product asks for dX's too: 2 bytes a parameter more while the weights live. Not for a LoRA base
 * (a 7B base's packing would not fit beside it). gemm_bf16_weights_changed over any part of the
 * range (model_free) ends it. */
void gemm_bf16_keep_packed(const void *begin, size_t bytes);

/* Whether w16 lies in a range gemm_bf16_keep_packed declared (and no drop has ended). */
bool gemm_bf16_weight_kept(const uint16_t *w16);

/* Whoever writes weights that autocast products may have read (an optimizer step, a merge,
 * freeing them) calls this over the bytes written: cached packings of them are dropped. Cheap
 * when nothing is cached. */
void gemm_bf16_weights_changed(const void *begin, size_t bytes);

/* Whoever writes new values into weights that stay where they are (an optimizer step) may call
 * this over the bytes written instead of gemm_bf16_weights_changed: cached packings of them are
 * packed again, into their own buffers, at their next use (gemm_bf16_cache.c, invariant 6).
 * Not for weights freed or moved: those need gemm_bf16_weights_changed. */
void gemm_bf16_weights_updated(const void *begin, size_t bytes);

/* The cached packings of one fp32 W that an optimizer packs again itself as it updates W's rows
 * (gemm_bf16_cache.c, invariant 7). */
typedef struct {
    const float *w;
    int out_dim, in_dim;
    int count; /* packings (0, 1 or 2: the forward's and dX's layouts) */
    Bf16PackedB packed[2];
    bool transposed[2];
} Bf16WeightRepack;

/* The packings cached of the fp32 W whose values are exactly [w, w + numel) (a matrix with
 * in_dim >= 2), into r: returns r->count, 0 where none is (then update W as usual). Between this
 * and bf16_weight_repack_done no product, lookup or drop may run (an optimizer step's update). */
int bf16_weight_repack_begin(Bf16WeightRepack *r, const float *w, size_t numel);

/* W's rows r0.. r1, already updated, packed into each of r's packings (bf16_repack_b_rows: r0 a
 * multiple of 16, r1 one or out_dim). Disjoint row ranges may be packed by several threads at
 * once; no parallel region of its own. */
void bf16_weight_repack_rows(const Bf16WeightRepack *r, int r0, int r1);

/* Every row of W updated and packed: r's packings are fresh (a lookup returns them as they are)
 * until W changes again. Not after an update that skipped rows: those would stay packed from
 * their old values. */
void bf16_weight_repack_done(const Bf16WeightRepack *r);

/* Drops every cached packing (tests, benches). */
void gemm_bf16_cache_clear(void);

/* The bytes the cache holds now. */
size_t gemm_bf16_cache_bytes(void);

#endif
