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
#include <stdint.h>

/* A product of attention_product's contract (attention_products.h), invariant 2 included.
 * Called from attention's own OpenMP tasks, one thread per call. */
typedef void (*AttnProductFn)(bool trans_a, int m, int n, int k, float alpha, const float *a,
                              int lda, const float *b, int ldb, float beta, float *c, int ldc,
                              AttnShape shape, int diag);

/* attention_forward_scored (kernels.h) with its products run by `product`. normalise_first:
 * each probability row is normalised before P·V (so a product that rounds P to bf16 rounds
 * softmax's probabilities, as torch does) rather than the output row scaled by 1 / sum after
 * it (fp32 training: hd multiplies a row instead of up to n_keys). */
void attention_forward_with(AttnProductFn product, bool normalise_first, float *out, const float *q,
                            const float *k, const float *v, const AttnSegment *segs, int n_segs,
                            const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                            int window, AttnScores sc);

/* attention_backward_scored (kernels.h) with its products run by `product`: dV += P^T dO,
 * dP = dO V^T, dQ = scale dS K, dK += scale dS^T Q (P and dS fp32 as attention.c makes them;
 * the product may round them). */
void attention_backward_with(AttnProductFn product, float *dq, float *dk, float *dv,
                             const float *dout, const float *q, const float *k, const float *v,
                             const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                             int n_rows, int n_heads, int n_kv_heads, int hd, int window,
                             AttnScores sc);

#endif
