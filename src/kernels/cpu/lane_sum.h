/* fp32 sums whose order is written out, so that every build adds the same values in the same
 * order: the Release build (-O2 -march=native) and the sanitizer build (-O0, no -march=native)
 * get the same bits, and so do two compilers.
 *
 * Why: `#pragma omp simd reduction(+ : s)` lets the compiler choose the order. GCC at -O2 keeps
 * one partial sum per vector lane and adds the lanes at the end, and its lane count follows
 * -march (8 or 16); at -O0 it adds in index order. A log-sum-exp summed two ways differs in its
 * last bit now and then, and under bf16 autocast a last-bit difference before a rounding to bf16
 * can land on the neighbouring bf16 value, a flip that the rest of the backward carries on and
 * multiplies (issue 29: one flipped value of the lm_head's dhidden put a QLoRA step's grad_norm
 * 6.8e-4 off between the two builds, every op otherwise bit for bit the same).
 *
 * The order (invariants):
 *  1. Value j goes into lane j % LANE_SUM_WIDTH; each lane adds its values in index order.
 *  2. The lanes are then added as a fixed halving tree (lane_sum_total).
 * The per-lane loop is independent across lanes, so it vectorises without reassociation. */
#ifndef RLHF_KERNELS_CPU_LANE_SUM_H
#define RLHF_KERNELS_CPU_LANE_SUM_H

#define LANE_SUM_WIDTH 16 /* one zmm of fp32, or two ymm */

/* lane[0..LANE_SUM_WIDTH) added as a halving tree (invariant 2): lane l + w onto lane l for
 * w = 8, 4, 2, 1. Overwrites lane; returns the total. */
static inline float lane_sum_total(float lane[LANE_SUM_WIDTH]) {
    for (int w = LANE_SUM_WIDTH / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

#endif
