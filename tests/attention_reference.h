/* Training attention and its products from their definitions, in double, for the tests of
 * attention.c's paths (test_attention_train: fp32 products; test_attention_amx: bf16 products on
 * AMX), and the preference-batch layout both run attention over. */
#ifndef RLHF_TESTS_ATTENTION_REFERENCE_H
#define RLHF_TESTS_ATTENTION_REFERENCE_H

#include "kernels/cpu/attention_train.h"
#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stdint.h>

/* Where the definition writes: out and dq (rows x nh x hd) written for the segment's rows, dk
 * and dv (rows x nkv x hd) added into (a shared prefix's rows receive from every segment). */
typedef struct {
    double *out, *dq, *dk, *dv;
} AttnReference;

/* One segment's attention on q, k, v (dout: the output's gradient) with scores as sc says,
 * keys outside `window` masked (0: none). round_bf16: the probabilities P rounded to bf16
 * before P·V and P^T·dO, and dS (before the scale) before dS·K and dS^T·Q, as the AMX path
 * rounds them (the softmax and its backward stay in double). */
void attention_reference(const AttnReference *r, const float *q, const float *k, const float *v,
                         const float *dout, const AttnSegment *s, const int32_t *seq_index, int nh,
                         int nkv, int hd, int window, AttnScores sc, bool round_bf16);

/* A preference pair's layout, twice over: chosen = prompt (40) + response (110) in one segment,
 * rejected = 90 rows continuing the same prompt (its seq_index skipping 5, a dropped padding
 * hole); then a lone sequence of `last` rows. segs gets 3 segments, seq_index 240 + last
 * values; returns the row count. */
int attention_reference_layout(AttnSegment segs[3], int32_t *seq_index, int last);

/* `product` (attention_product's contract, attention_products.h) against the double sums of its
 * operands (rounded to bf16 first where round_bf16: the AMX product's) at edge shapes: rows,
 * columns and depths around the register tiles, the AMX blocks and depth steps, an empty depth,
 * a transposed A, beta 0 over NaN, the causal shapes over diagonals through and around the
 * tiles, then operands with NaN, infinities, subnormals, -0 and rounding ties among them. Each
 * element within 1e-5 (relative and absolute), NaN where the definition is NaN, the same infinity
 * where it is infinite; ATTN_CAUSAL_OUTPUT's part exactly 0; the padding between C's rows
 * untouched. One CHECK per product, named by `name`. */
void attention_product_sweep(AttnProductFn product, const char *name, bool round_bf16);

#endif
