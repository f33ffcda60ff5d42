/* Training attention's products on AMX-BF16 tiles, for bf16 autocast (backend_autocast.c rule 3):
 * each product's two operands rounded to bf16 (nearest, ties to even) and packed as gemm_bf16
 * packs them (gemm_bf16.h), the sums fp32 in the tile unit. The operands q, k, v and dout are
 * bf16 values already (autocast rounded them), so rounding them is exact; the products round the
 * probabilities P (before P·V and P^T·dO) and dS (before dS·K and dS^T·Q), where torch's CPU
 * autocast has bf16 tensors: P is the bf16 input of its p·v matmul, dS the gradient of its bf16
 * q·k^T output. Softmax, its statistics, dP and the softmax backward stay fp32 (attention.c). */
#ifndef RLHF_KERNELS_CPU_ATTENTION_AMX_H
#define RLHF_KERNELS_CPU_ATTENTION_AMX_H

#include "kernels/cpu/attention_products.h"
#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether the AMX attention runs here: gemm_bf16's path is AMX (the CPU and OS have it and the
 * kernel granted the tile state, gemm_bf16_cpu.c; RLHF_GEMM_BF16 / gemm_bf16_force did not pick
 * another path). backend_autocast.c runs it unless autocast_attention_exact asks for exact P. */
bool attention_amx_usable(void);

/* attention_product's contract (attention_products.h) with op(A) and B rounded to bf16 and the
 * sums fp32 in 32 x 32 blocks of AMX tiles; ATTN_CAUSAL_OUTPUT's and ATTN_CAUSAL_DEPTH's parts
 * are skipped 32 rows or columns at a time (what is read of ATTN_CAUSAL_DEPTH's part must be 0,
 * as that contract says it is). Each element is one sum over the depth in order, 32 values at a
 * time (within those, the tile unit's order), then scaled by alpha: invariant 1 there holds.
 * Configures the calling thread's tiles and releases them before returning. Only where
 * attention_amx_usable(); never fails. */
void attention_product_amx(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                           int diag);

/* attention_forward_scored (kernels.h) on attention_product_amx: the probabilities normalised,
 * then rounded to bf16 for P·V. q, k, v fp32 (read rounded). Only where attention_amx_usable(). */
void attention_forward_amx(float *out, const float *q, const float *k, const float *v,
                           const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                           int n_heads, int n_kv_heads, int hd, int window, AttnScores sc);

/* attention_backward_scored (kernels.h) on attention_product_amx: P rounded for dV = P^T dO,
 * dS for dQ and dK; dout, q, k, v read rounded. Only where attention_amx_usable(). */
void attention_backward_amx(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const AttnSegment *segs, int n_segs,
                            const int32_t *seq_index, int n_rows, int n_heads, int n_kv_heads,
                            int hd, int window, AttnScores sc);

#endif
