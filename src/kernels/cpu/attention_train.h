/* Training attention (attention.c) with the products it runs passed in: fp32 training runs
 * attention_products.h's attention_product (attention_forward_scored, attention_backward_scored);
 * bf16 autocast on a CPU with AMX runs attention_amx.h's, whose operands are rounded to bf16.
 * Everything else (the blocks, the keys each block meets, masking and the window, the fp32
 * softmax and its backward, soft-capping, GQA, prefixes) is attention.c's, shared. */
#ifndef RLHF_KERNELS_CPU_ATTENTION_TRAIN_H
#define RLHF_KERNELS_CPU_ATTENTION_TRAIN_H

#include "kernels/cpu/attention_products.h"
#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The layout of an A operand that attention.c packs itself (AttnPackedProductFn): bf16 values
 * (nearest, ties to even) row-major, a_stride = round_up(k, ATTN_PACK_STEP) values a row, zero
 * from column k to a_stride, and round_up(m, ATTN_PACK_STEP) rows readable (rows past m may
 * hold any finite values: no product stores them). gemm_bf16.c's invariants 1 and 3 for a packed
 * A, so the AMX kernel reads it as bf16_pack_a's packing without packing it again. */
#define ATTN_PACK_STEP 32

/* A product of attention_product's contract (attention_products.h), invariant 2 included.
 * Called from attention's own OpenMP tasks, one thread per call. */
typedef void (*AttnProductFn)(bool trans_a, int m, int n, int k, float alpha, const float *a,
                              int lda, const float *b, int ldb, float beta, float *c, int ldc,
                              AttnShape shape, int diag);

/* A product X · B whose B is a key panel packed once per call by AttnKernel.pack_panel: B's
 * values from depth k0 and column j0 of the packing on (multiples of key_align: the block's
 * first key, as a depth for P · V, as a column for X · R^T), op(A) = A not transposed, beta 0;
 * otherwise AttnProductFn's contract. */
typedef void (*AttnPanelProductFn)(int m, int n, int k, float alpha, const float *a, int lda,
                                   const void *panel, int k0, int j0, float *c, int ldc,
                                   AttnShape shape, int diag);

/* AttnPanelProductFn with A already packed by attention.c (ATTN_PACK_STEP's layout, a_stride
 * values a row): the probabilities P of the forward's P · V and dS of dQ = scale dS K, written
 * so by the passes that make them (softmax's normalising pass, the softmax backward's dS pass)
 * instead of an fp32 block packed again by the product. */
typedef void (*AttnPackedProductFn)(int m, int n, int k, float alpha, const uint16_t *a,
                                    int a_stride, const void *panel, int k0, int j0, float *c,
                                    int ldc, AttnShape shape, int diag);

/* What attention runs its products on. */
typedef struct {
    AttnProductFn product; /* every product whose B is not a prepacked key panel */
    /* each probability row normalised before P·V (so a product that rounds P to bf16 rounds
     * softmax's probabilities, as torch does), rather than the output row scaled by 1 / sum
     * after it (fp32: hd multiplies a row instead of up to n_keys) */
    bool normalise_first;
    int key_align; /* a block's first key is rounded down to a multiple of this (>= 1) */
    /* NULL, or: each key panel (depth x cols fp32, element (r, c) at b[r * row_stride +
     * c * col_stride]) packed once per call, the packing freed by free_panel, and the products
     * with a key panel as B run on it (a transposed panel is packed from the keys' rows, with
     * row_stride 1: attention.c then keeps no fp32 transposed copy) */
    void *(*pack_panel)(const float *b, int depth, int cols, size_t row_stride, size_t col_stride);
    void (*free_panel)(void *packed);
    AttnPanelProductFn panel_product;
    /* NULL, or (with pack_panel and normalise_first): P · V and dS · K run on P and dS as
     * attention.c packs them (the forward keeps no fp32 P) */
    AttnPackedProductFn packed_product;
    /* dV and dK accumulated transposed per segment and kv head: dV^T += dO^T P and dK^T +=
     * scale Q^T dS by `product` (trans_a, ATTN_DENSE: P's and dS's masked zeros multiplied, as
     * torch's matmul multiplies them), added to dV's and dK's rows once per segment; instead of
     * dV += P^T dO and dK += scale dS^T Q, whose P^T and dS^T the AMX products packed by 16 x 16
     * transposes per block and head, added to dV's and dK's rows block by block. Each element is
     * the same sum over the block's query rows in order either way (+0 for the skipped zeros). */
    bool keys_transposed;
    /* NULL, or (with normalise_first) the softmax of each probability row in place of
     * attention.c's portable softmax_columns, under its contract with normalise true
     * (attention_softmax_avx512.h's): the AMX kernel's, in AVX-512 intrinsics */
    float (*softmax)(float *row, int lo, int hi, uint16_t *packed, int stride);
} AttnKernel;

/* fp32 training's: attention_product on the fp32 panels (attention.c). */
extern const AttnKernel attention_kernel_fp32;

/* bf16 autocast's where the CPU has no AMX (attention_rounded.c): attention_product on op(A)
 * rounded to bf16, P normalised first; q, k, v and dout must come rounded already. */
extern const AttnKernel attention_kernel_fp32_rounding_a;

/* attention_forward_scored (kernels.h) on kern's products. */
void attention_forward_with(const AttnKernel *kern, float *out, const float *q, const float *k,
                            const float *v, const AttnSegment *segs, int n_segs,
                            const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                            int window, AttnScores sc);

/* attention_backward_scored (kernels.h) on kern's products: dV += P^T dO, dP = dO V^T,
 * dQ = scale dS K, dK += scale dS^T Q (P and dS fp32 as attention.c makes them; the products may
 * round them). */
void attention_backward_with(const AttnKernel *kern, float *dq, float *dk, float *dv,
                             const float *dout, const float *q, const float *k, const float *v,
                             const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                             int n_rows, int n_heads, int n_kv_heads, int hd, int window,
                             AttnScores sc);

#endif
