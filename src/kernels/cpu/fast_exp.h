/* exp(x) for fp32 written so the compiler can vectorise loops over it (glibc's expf is a
 * scalar call unless -ffast-math): selects, a truncating conversion and bit operations only
 * (fminf and floorf would block vectorisation without -ffast-math; -fno-trapping-math is
 * needed for the selects).
 * Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r,
 * and 2^n put into the exponent bits. Relative error below 3e-7 on [-87.3, 88.7]; inputs are
 * clamped to that range, so exp of a very negative number is ~1e-38 rather than 0 and of a
 * very large one ~3e38 rather than inf — harmless where it is used (softmax sums, sigmoid).
 * NaN gives NaN, so a diverged step is still seen as one. */
#ifndef RLHF_KERNELS_CPU_FAST_EXP_H
#define RLHF_KERNELS_CPU_FAST_EXP_H

#include <stdint.h>
#include <string.h>

/* The range reduction's constants, shared with the vector exponential that computes the same
 * function (attention_softmax_avx512.c): log2(e), ln 2 in two parts (the first exact in 9 bits),
 * and the lower clamp. */
#define FAST_EXP_LOG2E  1.44269504088896341f
#define FAST_EXP_LN2_HI 0.693359375f
#define FAST_EXP_LN2_LO -2.12194440e-4f
#define FAST_EXP_MIN_X  -87.3f

static inline float fast_expf(float in) {
    const float log2e = FAST_EXP_LOG2E;
    const float ln2_hi = FAST_EXP_LN2_HI, ln2_lo = FAST_EXP_LN2_LO;
    /* written so that NaN clamps too (comparisons with NaN are false): converting NaN to an
     * integer below would be undefined; the NaN is given back at the end */
    float x = in > FAST_EXP_MIN_X ? in : FAST_EXP_MIN_X;
    x = x < 88.7f ? x : 88.7f;
    /* n = round(x log2e); x log2e + 128.5 > 0, so truncation is floor */
    int32_t ni = (int32_t)(x * log2e + 128.5f) - 128;
    float n = (float)ni;
    float r = x - n * ln2_hi;
    r = r - n * ln2_lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n for n in [-126, 128]: 2^128 is not a float, so positive n use 2^(n-1) * 2. */
    int32_t positive = ni > 0;
    int32_t bits = (ni - positive + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = p * scale * (float)(1 + positive);
    return in != in ? in : e;
}

#endif
