/* bitsandbytes' 8-bit AdamW (what Trainer builds for optim "adamw_bnb_8bit", "adamw_8bit" and
 * "paged_adamw_8bit"): the two moments of a large tensor are kept as one byte per value, in blocks
 * of 256 values that share a scale, the block's largest magnitude (absmax). A step widens each
 * block to fp32, does the AdamW update there, and rounds the new moments back to the nearest of
 * the 256 values of bitsandbytes' dynamic map (signed for m, unsigned for v) times the block's new
 * absmax. A quarter of the memory of fp32 moments. */
#ifndef RLHF_KERNELS_CPU_ADAMW8BIT_H
#define RLHF_KERNELS_CPU_ADAMW8BIT_H

#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define Q8_BLOCK 256
/* bitsandbytes' min_8bit_size: tensors with fewer values keep fp32 moments. */
#define Q8_MIN_NUMEL 4096

/* Where q8_map_code starts looking: magnitudes are cut into buckets by their float exponent
 * (2^-31 .. 1, smaller ones share bucket 0) and the top Q8_SUB_BITS bits of the mantissa; few
 * bounds fall inside one bucket. */
#define Q8_SUB_BITS 7
#define Q8_BUCKETS  (33 << Q8_SUB_BITS)

/* A quantisation map: 256 sorted values in [-1, 1] (signed) or [0, 1]. */
typedef struct Q8Map {
    float value[256];
    float bound[256]; /* midpoints: x in (bound[i-1], bound[i]] rounds to value[i]; then +inf */
    /* per bucket of |x|: how many bounds lie below every positive x in it ([0]), and how many
     * below every negative one ([1]) */
    int32_t below[2][Q8_BUCKETS]; /* 32-bit: the AVX2 path gathers them */
} Q8Map;

/* bitsandbytes' create_dynamic_map(signed): 7 decades of values, 10^-6 .. 1, with more
 * fraction steps in the larger decades, plus 0 and 1. */
void q8_map_dynamic(Q8Map *map, bool is_signed);

/* The nearest value's index (the lower one on a tie), for x in [-1, 1]: how many bounds lie
 * below x. */
uint8_t q8_map_code(const Q8Map *map, float x);

/* code[i] = q8_map_code(map, x[i] * scale) for n values (eight at a time with AVX2). x[i] * scale
 * may round a little past +-1: it gets the code of +-1. */
void q8_map_codes(const Q8Map *map, const float *x, float scale, size_t n, uint8_t *code);

/* The 8-bit moments of one tensor, zero at start (every absmax 0). */
typedef struct Q8Moments {
    size_t numel;
    uint8_t *code_m, *code_v;
    float *absmax_m, *absmax_v; /* q8_blocks(numel) each */
} Q8Moments;

size_t q8_blocks(size_t numel);
/* Returns 0, or -1 when they do not fit in memory. */
int q8_moments_init(Q8Moments *q, size_t numel);
void q8_moments_free(Q8Moments *q);

/* p (numel values) takes one AdamW step with gradient g: m = b1 m + (1-b1) g, v = b2 v + (1-b2)
 * g², p = p * shrink + neg_step * m / (sqrt(v) / bc2_sqrt + eps); then m and v are quantised
 * again. The maps are those of m (signed) and v (unsigned). */
void adamw8bit_update(Q8Moments *q, const Q8Map *m_map, const Q8Map *v_map, float *p,
                      const float *g, const AdamWStepCoefs *c);

#endif
