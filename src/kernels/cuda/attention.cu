// Causal self-attention forward over segments (backend.h's attention: the shared-prefix layout,
// GQA, sliding window) and decoding over a KV cache (attention_cached), a first version without
// tensor cores: one block of ATTN_THREADS per (query row, head), both through attend_row. Keys
// go by in tiles of ATTN_THREADS, one key per thread for the score; an online softmax (running
// maximum m and sum l, flash-attention's rescaling) keeps fp32 statistics, and each thread
// accumulates output dims d = t, t + ATTN_THREADS over the tile's keys in key order. Every sum has
// a fixed order: bitwise reproducible, no atomics.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#define ATTN_THREADS 128

// The keys one query row of attention_forward_kernel sees: segment s's, the prefix rows first,
// then its own, under the sliding window.
struct SegmentKeys {
    const float *k, *v;
    AttnSegment s;
    const int *seq_index;
    size_t stride, head; // a key row's floats, the kv head's offset in it
    int window, oldest;  // window > 0: only keys whose seq_index is > oldest
    __device__ __forceinline__ int row(int c) const {
        return c < s.prefix_len ? s.prefix_start + c : s.start + (c - s.prefix_len);
    }
    __device__ __forceinline__ bool visible(int c) const {
        return window <= 0 || seq_index[row(c)] > oldest;
    }
    __device__ __forceinline__ const float *key(int c) const {
        return k + row(c) * stride + head;
    }
    __device__ __forceinline__ const float *value(int c) const {
        return v + row(c) * stride + head;
    }
};

// The keys a decoding row sees in its KV cache slot: positions first.. of the slot's rows.
struct CacheKeys {
    const float *k, *v;
    size_t slot_row, stride, head; // the slot's first row, a row's floats, the kv head's offset
    int first;
    __device__ __forceinline__ bool visible(int c) const {
        return c >= first;
    }
    __device__ __forceinline__ const float *key(int c) const {
        return k + (slot_row + c) * stride + head;
    }
    __device__ __forceinline__ const float *value(int c) const {
        return v + (slot_row + c) * stride + head;
    }
};

// o[0..hd) = softmax(q · keys / sqrt(hd)) · values over keys first..n_keys-1 that are visible,
// for the whole block (every thread calls it; it holds barriers). q_row: the query in shared
// memory (hd floats, written before a barrier); probs: ATTN_THREADS floats and scratch:
// ATTN_THREADS / 32 + 1 floats of shared memory. Online softmax over ATTN_THREADS-key tiles.
template <class Keys>
__device__ __forceinline__ void attend_row(float *o, const float *q_row, const Keys &keys,
                                           int first, int n_keys, int hd, float scale, float *probs,
                                           float *scratch) {
    int t = threadIdx.x;
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int tile = first; tile < n_keys; tile += ATTN_THREADS) {
        int c = tile + t;
        float score = -INFINITY;
        if (c < n_keys && keys.visible(c)) {
            const float *kk = keys.key(c);
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += q_row[d] * kk[d];
            score = dot * scale;
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
                if (probs[j] != 0.0f) a += probs[j] * keys.value(tile + j)[d];
            if (half == 0)
                acc0 = acc0 * rescale + a;
            else
                acc1 = acc1 * rescale + a;
        }
        m = m_new;
        // No barrier here: the next tile writes probs[] only after block_max's barriers, which
        // every thread reaches only when it has read this tile's probs[] in full.
    }
    if (t < hd) o[t] = acc0 / l;
    if (t + ATTN_THREADS < hd) o[t + ATTN_THREADS] = acc1 / l;
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
    int h = blockIdx.z, row = s.start + i;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    for (int d = threadIdx.x; d < hd; d += ATTN_THREADS)
        q_row[d] = q[row * q_stride + (size_t)h * hd + d];
    __syncthreads(); // the query row is in shared memory before any score reads it
    SegmentKeys keys = {k,         v,
                        s,         seq_index,
                        kv_stride, (size_t)(h / (n_heads / n_kv_heads)) * hd,
                        window,    window > 0 ? seq_index[row] - window : 0};
    // causal: up to its own key
    attend_row(out + row * q_stride + (size_t)h * hd, q_row, keys, 0, s.prefix_len + i + 1, hd,
               scale, probs, scratch);
}

__global__ void __launch_bounds__(ATTN_THREADS)
    attention_cached_kernel(float *out, const float *q, const float *k_cache, const float *v_cache,
                            const int *slot, const int *pos, int max_len, int n_heads,
                            int n_kv_heads, int hd, int window, float scale) {
    __shared__ float q_row[CUDA_ATTENTION_MAX_HD];
    __shared__ float probs[ATTN_THREADS];
    __shared__ float scratch[ATTN_THREADS / 32 + 1];
    int r = blockIdx.x, h = blockIdx.y;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    for (int d = threadIdx.x; d < hd; d += ATTN_THREADS)
        q_row[d] = q[r * q_stride + (size_t)h * hd + d];
    __syncthreads(); // the query row is in shared memory before any score reads it
    int p = pos[r], first = window > 0 ? max(0, p - window + 1) : 0;
    CacheKeys keys = {k_cache,
                      v_cache,
                      (size_t)slot[r] * max_len,
                      kv_stride,
                      (size_t)(h / (n_heads / n_kv_heads)) * hd,
                      first};
    attend_row(out + r * q_stride + (size_t)h * hd, q_row, keys, first, p + 1, hd, scale, probs,
               scratch);
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

extern "C" int cuda_attention_cached(float *out, const float *q, const float *k_cache,
                                     const float *v_cache, const int *slot, const int *pos, int n,
                                     int max_len, int n_heads, int n_kv_heads, int hd, int window,
                                     void *stream) {
    if (hd <= 0 || hd > CUDA_ATTENTION_MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return (int)cudaErrorInvalidValue;
    if (n <= 0) return 0;
    return (int)CUDA_LAUNCH(attention_cached_kernel, dim3(n, n_heads), ATTN_THREADS, 0,
                            (cudaStream_t)stream, out, q, k_cache, v_cache, slot, pos, max_len,
                            n_heads, n_kv_heads, hd, window, 1.0f / sqrtf((float)hd));
}
