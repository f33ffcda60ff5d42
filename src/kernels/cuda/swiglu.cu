// SwiGLU and its backward, elementwise over a grid-stride loop; the same formulas as the CPU's
// (kernels/cpu/swiglu.c) with the device's expf.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define SWIGLU_THREADS 256
#define SWIGLU_BLOCKS  1024 // at most; a grid-stride loop covers the rest

__global__ void __launch_bounds__(SWIGLU_THREADS)
    swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * SWIGLU_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * SWIGLU_THREADS) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// silu'(g) = σ(g) (1 + g (1 - σ(g))); each element reads its inputs before writing, so dgate
// may alias dout.
__global__ void __launch_bounds__(SWIGLU_THREADS)
    swiglu_backward_kernel(float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * SWIGLU_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * SWIGLU_THREADS) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g)), d = dout[i];
        dup[i] = d * g * s;
        dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

static int grid_for(size_t n) {
    size_t blocks = (n + SWIGLU_THREADS - 1) / SWIGLU_THREADS;
    return blocks < SWIGLU_BLOCKS ? (int)blocks : SWIGLU_BLOCKS;
}

extern "C" int cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n,
                                   void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(swiglu_forward_kernel, grid_for(n), SWIGLU_THREADS, 0,
                            (cudaStream_t)stream, out, gate, up, n);
}

extern "C" int cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                                    const float *up, size_t n, void *stream) {
    if (n == 0) return 0;
    return (int)CUDA_LAUNCH(swiglu_backward_kernel, grid_for(n), SWIGLU_THREADS, 0,
                            (cudaStream_t)stream, dgate, dup, dout, gate, up, n);
}
