// Causal self-attention forward over segments (backend.h's attention: the shared-prefix layout,
// GQA, sliding window), a first version without tensor cores: one block of ATTN_THREADS per
// (segment, query row, head). Keys go by in tiles of ATTN_THREADS, one key per thread for the
// score; an online softmax (running maximum m and sum l, flash-attention's rescaling) keeps
// fp32 statistics, and each thread accumulates output dims d = t, t + ATTN_THREADS over the
// tile's keys in key order. Every sum has a fixed order: bitwise reproducible, no atomics.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ATTN_THREADS 128

// The row holding key c of segment s: the prefix rows first, then its own.
__device__ __forceinline__ int key_row(const AttnSegment &s, int c) {
    return c < s.prefix_len ? s.prefix_start + c : s.start + (c - s.prefix_len);
}

__global__ void __launch_bounds__(ATTN_THREADS)
    attention_forward_kernel(float *out, const float *q, const float *k, const float *v,
                             const AttnSegment *segs, const int *seq_index, int n_heads,
                             int n_kv_heads, int hd, int window, float scale) {
    __shared__ float q_row[CUDA_ATTENTION_MAX_HD];
    __shared__ float probs[ATTN_THREADS];
    __shared__ float scratch[ATTN_THREADS / 32 + 1];
    const AttnSegment s = segs[blockIdx.x];
    int i = blockIdx.y;
    if (i >= s.len) return; // the whole block: no barrier is divergent
    int t = threadIdx.x, h = blockIdx.z, kvh = h / (n_heads / n_kv_heads);
    int row = s.start + i;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    for (int d = t; d < hd; d += ATTN_THREADS)
        q_row[d] = q[row * q_stride + (size_t)h * hd + d];
    __syncthreads(); // the query row is in shared memory before any score reads it
    int n_keys = s.prefix_len + i + 1; // causal: up to its own key
    int oldest = window > 0 ? seq_index[row] - window : 0;
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int tile = 0; tile < n_keys; tile += ATTN_THREADS) {
        int c = tile + t;
        float score = -INFINITY;
        if (c < n_keys) {
            int kr = key_row(s, c);
            if (window <= 0 || seq_index[kr] > oldest) {
                const float *kk = k + kr * kv_stride + (size_t)kvh * hd;
                float dot = 0.0f;
                for (int d = 0; d < hd; d++)
                    dot += q_row[d] * kk[d];
                score = dot * scale;
            }
        }
        float m_new = fmaxf(m, block_max<ATTN_THREADS>(score, scratch));
        if (m_new == -INFINITY) continue; // a tile the window hides wholly (the same in all)
        float e = score == -INFINITY ? 0.0f : expf(score - m_new);
        float rescale = expf(m - m_new); // 0 while m is -inf
        probs[t] = e;
        // block_sum's barriers also publish every probs[] before the loop below reads them
        l = l * rescale + block_sum<ATTN_THREADS>(e, scratch);
        int keys_here = min(ATTN_THREADS, n_keys - tile);
        for (int half = 0; half < 2; half++) {
            int d = t + half * ATTN_THREADS;
            if (d >= hd) break;
            float a = 0.0f;
            for (int j = 0; j < keys_here; j++)
                if (probs[j] != 0.0f)
                    a += probs[j] * v[key_row(s, tile + j) * kv_stride + (size_t)kvh * hd + d];
            if (half == 0)
                acc0 = acc0 * rescale + a;
            else
                acc1 = acc1 * rescale + a;
        }
        m = m_new;
        // No barrier here: the next tile writes probs[] only after block_max's barriers, which
        // every thread reaches only when it has read this tile's probs[] in full.
    }
    float *o = out + row * q_stride + (size_t)h * hd;
    if (t < hd) o[t] = acc0 / l;
    if (t + ATTN_THREADS < hd) o[t + ATTN_THREADS] = acc1 / l;
}

extern "C" int cuda_attention_forward(float *out, const float *q, const float *k, const float *v,
                                      const AttnSegment *segs, int n_segs, int max_len,
                                      const int *seq_index, int n_heads, int n_kv_heads, int hd,
                                      int window, void *stream) {
    if (hd <= 0 || hd > CUDA_ATTENTION_MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return (int)cudaErrorInvalidValue;
    if (n_segs <= 0 || max_len <= 0) return 0;
    return (int)CUDA_LAUNCH(attention_forward_kernel, dim3(n_segs, max_len, n_heads), ATTN_THREADS,
                            0, (cudaStream_t)stream, out, q, k, v, segs, seq_index, n_heads,
                            n_kv_heads, hd, window, 1.0f / sqrtf((float)hd));
}
