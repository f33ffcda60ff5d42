// LoRA's inverted dropout on the device: element i of the branch's input is kept with scale
// 1/(1-p) or dropped, by the same stateless function of (key, i) as kernels/cpu/lora.c
// (SplitMix64's mix of key + i * golden gamma, common/rng.h, compiled for the device), so a step on
// the CUDA backend drops exactly the elements the CPU drops and the backward regenerates the same
// mask.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#include "common/rng.h"

#define DROPOUT_THREADS 256
#define DROPOUT_BLOCKS  1024

// kernels/cpu/lora.c's dropout_scale, the same expression.
__device__ __forceinline__ float dropout_scale(uint64_t key, size_t i, float p) {
    double u = rng_unit_double(rng_mix64(key + (uint64_t)i * RNG_GOLDEN_GAMMA));
    return u < p ? 0.0f : 1.0f / (1.0f - p);
}

__global__ void __launch_bounds__(DROPOUT_THREADS)
    dropout_kernel(float *out, const float *in, size_t n, float p, uint64_t key, int accumulate) {
    for (size_t i = (size_t)blockIdx.x * DROPOUT_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * DROPOUT_THREADS) {
        float y = in[i] * dropout_scale(key, i, p);
        out[i] = accumulate ? out[i] + y : y;
    }
}

extern "C" int cuda_lora_dropout(float *out, const float *in, size_t n, float p, uint64_t key,
                                 int accumulate, void *stream) {
    if (n == 0) return 0;
    size_t blocks = (n + DROPOUT_THREADS - 1) / DROPOUT_THREADS;
    int grid = blocks < DROPOUT_BLOCKS ? (int)blocks : DROPOUT_BLOCKS;
    return (int)CUDA_LAUNCH(dropout_kernel, grid, DROPOUT_THREADS, 0, (cudaStream_t)stream, out, in,
                            n, p, key, accumulate);
}
