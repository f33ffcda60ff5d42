// bf16 bits widened to fp32 on the device (exact: bf16 is fp32's top half). The CUDA backend
// widens a frozen bf16 weight (a linear's W, a chunk of the lm_head) into scratch before an fp32
// product, because cuBLASLt has no mixed fp32 x bf16 GEMM (gemm.h rule 3); the values are the
// ones the CPU's bf16 products widen to.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define WIDEN_THREADS 256
#define WIDEN_BLOCKS  1024

__global__ void __launch_bounds__(WIDEN_THREADS)
    widen_kernel(float *out, const uint16_t *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * WIDEN_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * WIDEN_THREADS)
        out[i] = __uint_as_float((unsigned)in[i] << 16);
}

extern "C" int cuda_bf16_widen(float *out, const uint16_t *in, size_t n, void *stream) {
    if (n == 0) return 0;
    size_t blocks = (n + WIDEN_THREADS - 1) / WIDEN_THREADS;
    int grid = blocks < WIDEN_BLOCKS ? (int)blocks : WIDEN_BLOCKS;
    return (int)CUDA_LAUNCH(widen_kernel, grid, WIDEN_THREADS, 0, (cudaStream_t)stream, out, in, n);
}
