// rotate_half RoPE in place, one thread per rotated pair (row, head, j < rot/2) over a
// grid-stride loop; the CPU's formulas (kernels/cpu/rope.c). The backward rotates by -θ. Only a
// head's first rot dims turn (partial rotary: Phi-4-mini); the tables are rot/2 wide.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ROPE_THREADS 256
#define ROPE_BLOCKS  1024

// Pair j of the head at u turned by the angle whose cosine and sine are c and s (backward: by
// minus it). Both kernels rotate through it, so the fused one has the single one's bits.
template <bool BACKWARD>
__device__ __forceinline__ void rotate_pair(float *u, int j, int half, float c, float s) {
    float a = u[j], b = u[j + half];
    if (BACKWARD) {
        u[j] = a * c + b * s;
        u[j + half] = b * c - a * s;
    } else {
        u[j] = a * c - b * s;
        u[j + half] = b * c + a * s;
    }
}

template <bool BACKWARD>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(float *x, const int *positions, const float *cos_table, const float *sin_table,
                int n, int heads, int hd, int rot) {
    int half = rot / 2;
    size_t pairs = (size_t)n * heads * half;
    for (size_t i = (size_t)blockIdx.x * ROPE_THREADS + threadIdx.x; i < pairs;
         i += (size_t)gridDim.x * ROPE_THREADS) {
        int j = (int)(i % half);
        size_t row_head = i / half;
        int r = (int)(row_head / heads);
        size_t t = (size_t)(positions ? positions[r] : r) * half + j;
        rotate_pair<BACKWARD>(x + row_head * hd, j, half, cos_table[t], sin_table[t]);
    }
}

static int rope_launch(bool backward, float *x, const int *positions, const float *cos_table,
                       const float *sin_table, int n, int heads, int hd, int rot, void *stream) {
    size_t pairs = (size_t)n * heads * (rot / 2);
    if (pairs == 0) return 0;
    size_t blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    int grid = blocks < ROPE_BLOCKS ? (int)blocks : ROPE_BLOCKS;
    cudaStream_t s = (cudaStream_t)stream;
    if (backward)
        return (int)CUDA_LAUNCH(rope_kernel<true>, grid, ROPE_THREADS, 0, s, x, positions,
                                cos_table, sin_table, n, heads, hd, rot);
    return (int)CUDA_LAUNCH(rope_kernel<false>, grid, ROPE_THREADS, 0, s, x, positions, cos_table,
                            sin_table, n, heads, hd, rot);
}

extern "C" int cuda_rope_forward(float *x, const int *positions, const float *cos_table,
                                 const float *sin_table, int n, int heads, int hd, int rot,
                                 void *stream) {
    return rope_launch(false, x, positions, cos_table, sin_table, n, heads, hd, rot, stream);
}

extern "C" int cuda_rope_backward(float *dx, const int *positions, const float *cos_table,
                                  const float *sin_table, int n, int heads, int hd, int rot,
                                  void *stream) {
    return rope_launch(true, dx, positions, cos_table, sin_table, n, heads, hd, rot, stream);
}

// ---- q and k in one launch ----

// Pair i of the (row, head, j) space of both tensors: a row's q heads, then its k heads, so that
// the threads of a row read the same cos/sin entries.
template <bool BACKWARD>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_qk_kernel(float *q, float *k, const int *positions, const float *cos_table,
                   const float *sin_table, int n, int q_heads, int k_heads, int hd, int rot) {
    int half = rot / 2, heads = q_heads + k_heads;
    size_t pairs = (size_t)n * heads * half;
    for (size_t i = (size_t)blockIdx.x * ROPE_THREADS + threadIdx.x; i < pairs;
         i += (size_t)gridDim.x * ROPE_THREADS) {
        int j = (int)(i % half);
        size_t row_head = i / half;
        int r = (int)(row_head / heads), h = (int)(row_head % heads);
        size_t t = (size_t)(positions ? positions[r] : r) * half + j;
        float *u = h < q_heads ? q + ((size_t)r * q_heads + h) * hd
                               : k + ((size_t)r * k_heads + (h - q_heads)) * hd;
        rotate_pair<BACKWARD>(u, j, half, cos_table[t], sin_table[t]);
    }
}

extern "C" int cuda_rope_qk(float *q, float *k, const int *positions, const float *cos_table,
                            const float *sin_table, int n, int q_heads, int k_heads, int hd,
                            int rot, int backward, void *stream) {
    size_t pairs = (size_t)n * (q_heads + k_heads) * (rot / 2);
    if (pairs == 0) return 0;
    size_t blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    int grid = blocks < ROPE_BLOCKS ? (int)blocks : ROPE_BLOCKS;
    cudaStream_t s = (cudaStream_t)stream;
    if (backward)
        return (int)CUDA_LAUNCH(rope_qk_kernel<true>, grid, ROPE_THREADS, 0, s, q, k, positions,
                                cos_table, sin_table, n, q_heads, k_heads, hd, rot);
    return (int)CUDA_LAUNCH(rope_qk_kernel<false>, grid, ROPE_THREADS, 0, s, q, k, positions,
                            cos_table, sin_table, n, q_heads, k_heads, hd, rot);
}
