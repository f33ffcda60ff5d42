// rotate_half RoPE in place, one thread per rotated pair (row, head, j < rot/2) over a
// grid-stride loop; the CPU's formulas (kernels/cpu/rope.c). The backward rotates by -θ. Only a
// head's first rot dims turn (partial rotary: Phi-4-mini); the tables are rot/2 wide.
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ROPE_THREADS 256
#define ROPE_BLOCKS  1024

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
        float c = cos_table[t], s = sin_table[t];
        float *u = x + row_head * hd;
        float a = u[j], b = u[j + half];
        if (BACKWARD) {
            u[j] = a * c + b * s;
            u[j + half] = b * c - a * s;
        } else {
            u[j] = a * c - b * s;
            u[j + half] = b * c + a * s;
        }
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
