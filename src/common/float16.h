/* Conversions between fp32 and the 16-bit float formats found in checkpoints, with the
 * rounding PyTorch uses (round to nearest, ties to even; NaN stays NaN). */
#ifndef RLHF_COMMON_FLOAT16_H
#define RLHF_COMMON_FLOAT16_H

#include <stdint.h>
#include <string.h>

float bf16_to_f32(uint16_t h);

/* Inline: the bf16 packed product rounds every input row with it. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u; /* the quiet NaN torch writes */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif
