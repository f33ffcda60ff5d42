// The KV cache's append for one decoding forward (backend.h kv_cache_write): every new row's K and
// V of one layer written at its (slot, position) in one launch, where the first version issued two
// cudaMemcpy per row and layer (64 rows x 24 layers: 3072 copies a step, bench/GPU.md run 6). One
// element of K and the same of V per thread; the index arrays are read on the device, so nothing
// crosses to the host.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define KV_WRITE_THREADS 256
#define KV_WRITE_BLOCKS  1024

__global__ void __launch_bounds__(KV_WRITE_THREADS)
    kv_cache_write_kernel(float *k_cache, float *v_cache, const float *k, const float *v,
                          const int *slot, const int *pos, int n, int max_len, int kvd) {
    size_t total = (size_t)n * kvd;
    for (size_t i = (size_t)blockIdx.x * KV_WRITE_THREADS + threadIdx.x; i < total;
         i += (size_t)gridDim.x * KV_WRITE_THREADS) {
        size_t r = i / kvd, c = i % kvd;
        size_t at = ((size_t)slot[r] * max_len + pos[r]) * kvd + c;
        k_cache[at] = k[i];
        v_cache[at] = v[i];
    }
}

extern "C" int cuda_kv_cache_write(float *k_cache, float *v_cache, const float *k, const float *v,
                                   const int *slot, const int *pos, int n, int max_len, int kvd,
                                   void *stream) {
    size_t total = (size_t)n * kvd;
    if (total == 0) return 0;
    size_t blocks = (total + KV_WRITE_THREADS - 1) / KV_WRITE_THREADS;
    return (int)CUDA_LAUNCH(kv_cache_write_kernel,
                            blocks < KV_WRITE_BLOCKS ? (int)blocks : KV_WRITE_BLOCKS,
                            KV_WRITE_THREADS, 0, (cudaStream_t)stream, k_cache, v_cache, k, v, slot,
                            pos, n, max_len, kvd);
}
