// fp32 rounded to bf16 on the device, nearest with ties to even, as torch's .to(torch.bfloat16)
// and kernels/cpu/matmul_autocast.c's rounded_bits round (a NaN becomes the quiet NaN 0x7fc0):
// the CUDA backend under bf16 autocast (backend_cuda.h) rounds activations and weights with these
// before a bf16 cuBLASLt product, and rounds the outputs torch holds in bf16. widen.cu is the
// other direction.
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define NARROW_THREADS 256
#define NARROW_BLOCKS  1024

// The bits of f rounded to the nearest bf16 (bf16.cuh) in the upper half, the lower half zero.
__device__ __forceinline__ unsigned rounded_bits(float f) {
    return bf16_round_bits(f) << 16;
}

__global__ void __launch_bounds__(NARROW_THREADS)
    narrow_kernel(uint16_t *out, const float *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * NARROW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * NARROW_THREADS)
        out[i] = (uint16_t)(rounded_bits(in[i]) >> 16);
}

__global__ void __launch_bounds__(NARROW_THREADS)
    round_kernel(float *out, const float *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * NARROW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * NARROW_THREADS)
        out[i] = __uint_as_float(rounded_bits(in[i]));
}

// rest - its rounding is exact in fp32 (both share rest's exponent range and the difference
// has at most 16 significant bits), so the parts written so far plus rest are the input exactly.
__global__ void __launch_bounds__(NARROW_THREADS)
    split_kernel(uint16_t *part, float *rest, size_t n) {
    for (size_t i = (size_t)blockIdx.x * NARROW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * NARROW_THREADS) {
        unsigned r = rounded_bits(rest[i]);
        part[i] = (uint16_t)(r >> 16);
        rest[i] -= __uint_as_float(r);
    }
}

static int grid_for(size_t n) {
    size_t blocks = (n + NARROW_THREADS - 1) / NARROW_THREADS;
    return blocks < NARROW_BLOCKS ? (int)blocks : NARROW_BLOCKS;
}

extern "C" int cuda_bf16_narrow(uint16_t *out, const float *in, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(narrow_kernel, grid_for(n), NARROW_THREADS, 0, (cudaStream_t)stream,
                            out, in, n);
}

extern "C" int cuda_bf16_round(float *out, const float *in, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(round_kernel, grid_for(n), NARROW_THREADS, 0, (cudaStream_t)stream, out,
                            in, n);
}

extern "C" int cuda_bf16_split(uint16_t *part, float *rest, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(split_kernel, grid_for(n), NARROW_THREADS, 0, (cudaStream_t)stream,
                            part, rest, n);
}
