/* fp16/bf16 conversions: exhaustive round trips and known values (IEEE 754 definitions). */
#include "common/float16.h"
#include "harness.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void) {
    /* Every 16-bit pattern converts to fp32 exactly, so the way back is the identity. */
    int f16_bad = 0, bf16_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f16_to_f32((uint16_t)h);
        if (!isnan(f) && f32_to_f16(f) != h) f16_bad++;
        float b = bf16_to_f32((uint16_t)h);
        if (!isnan(b) && f32_to_bf16(b) != h) bf16_bad++;
        if (isnan(f) != (((h & 0x7c00) == 0x7c00) && (h & 0x3ff))) f16_bad++;
    }
    CHECK(f16_bad == 0, "%d fp16 patterns do not round-trip", f16_bad);
    CHECK(bf16_bad == 0, "%d bf16 patterns do not round-trip", bf16_bad);

    CHECK(f16_to_f32(0x3c00) == 1.0f, "1.0");
    CHECK(f16_to_f32(0xc000) == -2.0f, "-2.0");
    CHECK(f16_to_f32(0x7bff) == 65504.0f, "max half");
    CHECK(f16_to_f32(0x0001) == ldexpf(1.0f, -24), "smallest subnormal");
    CHECK(f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(f32_to_f16(ldexpf(1.0f, -25)) == 0x0000, "2^-25 ties to even (zero)");
    CHECK(f32_to_f16(ldexpf(3.0f, -26)) == 0x0001,
          "1.5 * 2^-25 rounds up to the smallest subnormal");
    CHECK(f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00, "1 + half ulp ties to even (down)");
    CHECK(f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3c02, "1 + 1.5 ulp ties to even (up)");
    CHECK(isnan(f16_to_f32(f32_to_f16(NAN))), "NaN stays NaN");

    CHECK(f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
    CHECK(f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81, "bf16 above half rounds up");
    CHECK(f32_to_bf16(from_bits(0xffa00000u)) == 0x7fc0,
          "bf16 NaN becomes the quiet NaN torch writes");
    return harness_finish("test_float16");
}
