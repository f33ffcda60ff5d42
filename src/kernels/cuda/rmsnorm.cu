// RMSNorm on the device: one block of RMSNORM_THREADS threads per row. Each thread sums the
// squares of a strided slice of the row, then warps reduce with shuffles and the first warp
// reduces the warps' sums: a tree fixed by the block size, so a row always gives the same bits.
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#define RMSNORM_THREADS 256
#define WARPS           (RMSNORM_THREADS / 32)

__global__ void __launch_bounds__(RMSNORM_THREADS)
    rmsnorm_forward_kernel(float *out, const float *in, const float *w, int c, float eps) {
    __shared__ float warp_sums[WARPS];
    const float *x = in + (size_t)blockIdx.x * c;
    float *y = out + (size_t)blockIdx.x * c;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < c; j += RMSNORM_THREADS)
        ss += x[j] * x[j];
    for (int off = 16; off > 0; off >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads(); // every warp's sum is written before the first warp reads them
    if (warp == 0) {
        ss = lane < WARPS ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, off);
        if (lane == 0) warp_sums[0] = ss;
    }
    __syncthreads(); // the row's sum is in warp_sums[0] before anyone scales by it
    float rstd = rsqrtf(warp_sums[0] / (float)c + eps);
    for (int j = threadIdx.x; j < c; j += RMSNORM_THREADS)
        y[j] = w[j] * (x[j] * rstd);
}

extern "C" int cuda_rmsnorm_forward(float *out, const float *in, const float *w, int n, int c,
                                    float eps, void *stream) {
    if (n <= 0) return 0;
    rmsnorm_forward_kernel<<<n, RMSNORM_THREADS, 0, (cudaStream_t)stream>>>(out, in, w, c, eps);
    return (int)cudaGetLastError();
}
