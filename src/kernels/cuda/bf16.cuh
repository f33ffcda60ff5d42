// bf16 on the device: fp32 rounded to bf16 bits and back. narrow.cu's conversions and the
// tensor-core operands of mma.cuh round with this one rule.
#ifndef RLHF_KERNELS_CUDA_BF16_CUH
#define RLHF_KERNELS_CUDA_BF16_CUH

#include "kernels/cuda/cuda_device.h"

// The bits of f rounded to the nearest bf16 (ties to even) in the low 16 bits; a NaN becomes the
// quiet NaN 0x7fc0 (torch's .to(torch.bfloat16), kernels/cpu/matmul_autocast.c's rule). Adding
// 0x7fff plus the kept half's lowest bit carries into the kept half exactly when the dropped half
// is above the midpoint, or at it with the kept half odd.
__device__ __forceinline__ unsigned bf16_round_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// Two values as one bf16x2 register: lo in the low half (the lower-numbered element).
__device__ __forceinline__ unsigned bf16x2_rounded(float lo, float hi) {
    return bf16_round_bits(lo) | bf16_round_bits(hi) << 16;
}
__device__ __forceinline__ float bf16_value(unsigned bits16) {
    return __uint_as_float(bits16 << 16);
}

#endif
