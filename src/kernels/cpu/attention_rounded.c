/* Training attention under bf16 autocast on a CPU without AMX (backend_autocast.c rule 3): the
 * same values rounded to bf16 as on AMX (attention_amx.h), with fp32 products.
 *
 * Every A operand of attention's products is q, dout (bf16 already: the autocast backend hands
 * the kernel rounded copies), the probabilities P or the scores' gradient dS; every B operand is
 * a rounded copy of q, k, v or dout. So rounding op(A) before attention_product rounds exactly P
 * (normalised first, as on AMX) and dS, and nothing else: the two CPU paths differ in the order
 * of each element's fp32 sum and in the softmax's exponentials (AMX runs
 * attention_softmax_avx512.h's; this path attention.c's portable one), last bits only, not in
 * which values are rounded. */
#include "common/error.h"
#include "kernels/cpu/attention_train.h"
#include "kernels/cpu/autocast.h"

#include <stdlib.h>

/* The rounded copy on the stack up to this many floats (128 KiB: a 64-row query block's P or dS
 * over 512 keys, the 135M bench's longest), else on the heap: no allocation per product at
 * those shapes (the products are called per block and head). */
#define STACK_COPY (64 * 512)

/* attention_product on ra, a compact bf16-rounded copy of A's m x k (trans_a: k x m) values
 * made here. Their ATTN_CAUSAL_DEPTH part is 0 (the contract), and stays 0 rounded. */
static void product_on_copy(float *ra, bool trans_a, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c,
                            int ldc, AttnShape shape, int diag) {
    int rows = trans_a ? k : m, cols = trans_a ? m : k;
    for (int r = 0; r < rows; r++) /* cols < bf16_round_copy's threshold: no nested region */
        bf16_round_copy(ra + (size_t)r * cols, a + (size_t)r * lda, (size_t)cols);
    attention_product(trans_a, m, n, k, alpha, ra, cols, b, ldb, beta, c, ldc, shape, diag);
}

static void product_rounding_a(bool trans_a, int m, int n, int k, float alpha, const float *a,
                               int lda, const float *b, int ldb, float beta, float *c, int ldc,
                               AttnShape shape, int diag) {
    size_t count = (size_t)m * k;
    if (count <= STACK_COPY) {
        float ra[STACK_COPY];
        product_on_copy(ra, trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape, diag);
    } else {
        float *ra = xmalloc(count * sizeof *ra);
        product_on_copy(ra, trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape, diag);
        free(ra);
    }
}

const AttnKernel attention_kernel_fp32_rounding_a = {
    product_rounding_a, true, 1, NULL, NULL, NULL, NULL, false, NULL};
