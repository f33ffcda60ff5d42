/* Conversions between fp32 and the 16-bit float formats found in checkpoints, with the
 * rounding PyTorch uses (round to nearest, ties to even; NaN stays NaN). */
#ifndef RLHF_COMMON_FLOAT16_H
#define RLHF_COMMON_FLOAT16_H

#include <stdint.h>

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif
