// One torch AdamW step in fp32, elementwise over a grid-stride loop, the CPU's formulas
// (kernels/cpu/adamw.c) in the same order, so the update rounds as the CPU's does.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ADAMW_THREADS 256
#define ADAMW_BLOCKS  1024

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(float *p, float *m, float *v, const float *g, size_t numel, AdamWStepCoefs c,
                 float step_size, float inv_bc2_sqrt) {
    for (size_t i = (size_t)blockIdx.x * ADAMW_THREADS + threadIdx.x; i < numel;
         i += (size_t)gridDim.x * ADAMW_THREADS) {
        // the clip's scaling, rounded on its own (__fmul_rn is never fused into an FMA) as the
        // CPU's separate product is
        float gi = __fmul_rn(g[i], c.grad_scale), mi = m[i], vi = v[i];
        float pi = p[i] * c.shrink;
        mi += (1.0f - c.beta1) * (gi - mi);
        vi = c.beta2 * vi + (1.0f - c.beta2) * gi * gi;
        p[i] = pi - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + c.eps);
        m[i] = mi;
        v[i] = vi;
    }
}

extern "C" int cuda_adamw(float *p, float *m, float *v, const float *g, size_t numel,
                          const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt,
                          void *stream) {
    if (numel == 0) return 0;
    size_t blocks = (numel + ADAMW_THREADS - 1) / ADAMW_THREADS;
    return (int)CUDA_LAUNCH(adamw_kernel, blocks < ADAMW_BLOCKS ? (int)blocks : ADAMW_BLOCKS,
                            ADAMW_THREADS, 0, (cudaStream_t)stream, p, m, v, g, numel, *c,
                            step_size, inv_bc2_sqrt);
}
