// QLoRA's frozen NF4 base on the device (issue 29): bitsandbytes' 4-bit blocks (kernels/cpu/nf4.h,
// the layout the CPU quantises to) dequantised into a plain fp32 or bf16 matrix per product, which
// then goes to cuBLASLt (gemm_ops.h) as a weight stored that way would.
//
// Per value i: its block's absmax from the double quantisation, map[qabsmax[i / 64]] x
// absmax2[i / 16384] + offset, then nf4_values[code i] x absmax; each product and sum one fp32
// rounding (__fmul_rn, __fadd_rn: nvcc would otherwise contract them into one fma), which is what
// nf4.c computes on the host (C11 without fp contraction) and bitsandbytes' dequantize_blockwise
// and dequantize_4bit compute: the fp32 result is the CPU's bit for bit, and the bf16 one its
// rounding to nearest even (a QLoRA base under bf16 autocast, as matmul_autocast.c rounds it).
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define NF4_THREADS       256
#define NF4_GRID          1024 // at most; a grid-stride loop covers the rest
#define NF4_BLOCK_VALUES  64
#define NF4_ABSMAX_VALUES (64 * 256)

// bitsandbytes' NF4 code book (kernels/cpu/nf4.c's nf4_values): passed by value per launch, so no
// __constant__ table is needed on either compiler.
struct Nf4Codebook {
    float v[16];
};

__device__ __forceinline__ unsigned nf4_rounded_bits(float f) {
    unsigned u = __float_as_uint(f); // nearest even, as narrow.cu's rounded_bits
    unsigned r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : r;
}

__global__ void __launch_bounds__(NF4_THREADS)
    nf4_dequantize_kernel(float *out32, uint16_t *out16, const uint8_t *packed,
                          const uint8_t *qabsmax, const float *absmax2, float offset,
                          const float *map, Nf4Codebook book, size_t first, size_t count) {
    for (size_t k = (size_t)blockIdx.x * NF4_THREADS + threadIdx.x; k < count;
         k += (size_t)gridDim.x * NF4_THREADS) {
        size_t i = first + k;
        unsigned byte = packed[i / 2];
        unsigned code = i % 2 ? byte & 0x0fu : byte >> 4; // the first value in the high nibble
        float absmax = __fadd_rn(
            __fmul_rn(map[qabsmax[i / NF4_BLOCK_VALUES]], absmax2[i / NF4_ABSMAX_VALUES]), offset);
        float v = __fmul_rn(book.v[code], absmax);
        if (out32)
            out32[k] = v;
        else
            out16[k] = (uint16_t)(nf4_rounded_bits(v) >> 16);
    }
}

extern "C" int cuda_nf4_dequantize(float *out32, uint16_t *out16, const uint8_t *packed,
                                   const uint8_t *qabsmax, const float *absmax2, float offset,
                                   const float *map, const float *codebook, size_t first,
                                   size_t count, void *stream) {
    if (count == 0) return 0;
    Nf4Codebook book;
    for (int c = 0; c < 16; c++)
        book.v[c] = codebook[c];
    size_t blocks = (count + NF4_THREADS - 1) / NF4_THREADS;
    int grid = blocks < NF4_GRID ? (int)blocks : NF4_GRID;
    return (int)CUDA_LAUNCH(nf4_dequantize_kernel, grid, NF4_THREADS, 0, (cudaStream_t)stream,
                            out32, out16, packed, qabsmax, absmax2, offset, map, book, first,
                            count);
}
