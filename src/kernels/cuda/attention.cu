// Causal self-attention forward over segments (backend.h's attention: the shared-prefix layout,
// GQA, sliding window) and decoding over a KV cache (attention_cached), a first version without
// tensor cores: one block of ATTN_THREADS per (query row, head), both through attend_row. Keys
// go by in tiles of ATTN_THREADS, one key per thread for the score; an online softmax (running
// maximum m and sum l, flash-attention's rescaling) keeps fp32 statistics, and each thread
// accumulates output dims d = t, t + ATTN_THREADS over the tile's keys in key order. Every sum has
// a fixed order: bitwise reproducible, no atomics.
#include "kernels/cuda/attention_tiled.h"
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

// The scaled score q · key c, or -inf for a key past n_keys or hidden from this query; the dot
// product sums over d in order, so the forward and both backward passes score a key alike.
template <class Keys>
__device__ __forceinline__ float key_score(const float *q_row, const Keys &keys, int c, int n_keys,
                                           int hd, float scale) {
    if (c >= n_keys || !keys.visible(c)) return -INFINITY;
    const float *kk = keys.key(c);
    float dot = 0.0f;
    for (int d = 0; d < hd; d++)
        dot += q_row[d] * kk[d];
    return dot * scale;
}

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
        float score = key_score(q_row, keys, c, n_keys, hd, scale);
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

// ---- backward: two kernels of one warp per block, sums in fixed orders, no atomics ----
// Rows' statistics, dq: softmax statistics are recomputed from q and k (lse, and
// D = Σ_j P_ij dP_ij); dk, dv: one warp per key row walks every query that sees it, in order.

// Per (segment, query row, head): lse and D into stats (stats[0][row*nh+h], stats[1][...]) and
// dq. A lane takes one key of each 32-key tile for the dot products; the sums over keys go by
// warp_sum (a fixed tree), and dq's sum over a tile's keys by each lane for its own dims.
__global__ void __launch_bounds__(32)
    attention_row_grad_kernel(float *dq, float *stats, const float *dout, const float *q,
                              const float *k, const float *v, const AttnSegment *segs,
                              const int *seq_index, int n_rows, int n_heads, int n_kv_heads, int hd,
                              int window, float scale) {
    __shared__ float q_row[CUDA_ATTENTION_MAX_HD], do_row[CUDA_ATTENTION_MAX_HD];
    __shared__ float ds[32];
    const AttnSegment s = segs[blockIdx.x];
    int i = blockIdx.y;
    if (i >= s.len) return;
    int lane = threadIdx.x, h = blockIdx.z, row = s.start + i;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    size_t qo = row * q_stride + (size_t)h * hd;
    for (int d = lane; d < hd; d += 32)
        q_row[d] = q[qo + d], do_row[d] = dout[qo + d];
    __syncwarp(); // the rows are in shared memory before any lane's dot products read them
    SegmentKeys keys = {k,         v,
                        s,         seq_index,
                        kv_stride, (size_t)(h / (n_heads / n_kv_heads)) * hd,
                        window,    window > 0 ? seq_index[row] - window : 0};
    int n_keys = s.prefix_len + i + 1;
    float m = -INFINITY, l = 0.0f;
    for (int tile = 0; tile < n_keys; tile += 32) { // pass 1: the softmax's max and sum
        int c = tile + lane;
        float score = key_score(q_row, keys, c, n_keys, hd, scale);
        float m_new = fmaxf(m, warp_max(score));
        if (m_new == -INFINITY) continue;
        float e = score == -INFINITY ? 0.0f : expf(score - m_new);
        l = l * expf(m - m_new) + warp_sum(e);
        m = m_new;
    }
    float lse = m + logf(l), big_d = 0.0f;
    for (int pass = 2; pass <= 3; pass++) { // 2: D = Σ P dP; 3: dq = scale Σ P (dP - D) k
        float acc[CUDA_ATTENTION_MAX_HD / 32];
        for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++)
            acc[u] = 0.0f;
        float d_sum = 0.0f;
        for (int tile = 0; tile < n_keys; tile += 32) {
            int c = tile + lane;
            float p = 0.0f, dp = 0.0f;
            if (c < n_keys && keys.visible(c)) {
                const float *vv = keys.value(c);
                p = expf(key_score(q_row, keys, c, n_keys, hd, scale) - lse);
                for (int d = 0; d < hd; d++)
                    dp += do_row[d] * vv[d];
            }
            if (pass == 2) {
                d_sum += warp_sum(p * dp);
                continue;
            }
            ds[lane] = p * (dp - big_d);
            __syncwarp(); // every lane's dS is written before the lanes read them all
            int here = min(32, n_keys - tile);
            for (int j = 0; j < here; j++) {
                if (ds[j] == 0.0f) continue;
                const float *kk = keys.key(tile + j);
#pragma unroll
                for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++)
                    if (lane + 32 * u < hd) acc[u] += ds[j] * kk[lane + 32 * u];
            }
            __syncwarp(); // ds[] is read in full before the next tile overwrites it
        }
        if (pass == 2) {
            big_d = d_sum;
            continue;
        }
#pragma unroll
        for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++)
            if (lane + 32 * u < hd) dq[qo + lane + 32 * u] = scale * acc[u];
    }
    if (lane == 0) {
        stats[(size_t)row * n_heads + h] = lse;
        stats[(size_t)(n_rows + row) * n_heads + h] = big_d;
    }
}

// Per (key row j, kv head g): dk, dv of that row = Σ over the queries that see it (every
// segment that holds j as a prefix or own key, queries in order, the group's heads in order).
// A lane takes one query of each 32-query tile for the dot products; the lanes then add the
// tile's terms for their own dims, queries in order.
__global__ void __launch_bounds__(32)
    attention_kv_grad_kernel(float *dk, float *dv, const float *stats, const float *dout,
                             const float *q, const float *k, const float *v,
                             const AttnSegment *segs, int n_segs, const int *seq_index, int n_rows,
                             int n_heads, int n_kv_heads, int hd, int window, float scale) {
    __shared__ float p_of[32], ds_of[32];
    __shared__ int row_of[32];
    int lane = threadIdx.x, j = blockIdx.x, g = blockIdx.y, group = n_heads / n_kv_heads;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    const float *kk = k + j * kv_stride + (size_t)g * hd, *vv = v + j * kv_stride + (size_t)g * hd;
    float dk_acc[CUDA_ATTENTION_MAX_HD / 32], dv_acc[CUDA_ATTENTION_MAX_HD / 32];
    for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++)
        dk_acc[u] = dv_acc[u] = 0.0f;
    for (int si = 0; si < n_segs; si++) {
        const AttnSegment s = segs[si];
        int first; // the first own query of s that sees key row j
        if (j >= s.prefix_start && j < s.prefix_start + s.prefix_len)
            first = 0;
        else if (j >= s.start && j < s.start + s.len)
            first = j - s.start;
        else
            continue;
        for (int e = 0; e < group; e++) {
            int h = g * group + e;
            for (int tile = first; tile < s.len; tile += 32) {
                int i = tile + lane, row = s.start + i;
                float p = 0.0f, ds = 0.0f;
                if (i < s.len && (window <= 0 || seq_index[j] > seq_index[row] - window)) {
                    const float *qq = q + row * q_stride + (size_t)h * hd;
                    const float *oo = dout + row * q_stride + (size_t)h * hd;
                    float dot = 0.0f, dp = 0.0f;
                    for (int d = 0; d < hd; d++)
                        dot += qq[d] * kk[d];
                    for (int d = 0; d < hd; d++)
                        dp += oo[d] * vv[d];
                    p = expf(dot * scale - stats[(size_t)row * n_heads + h]);
                    ds = p * (dp - stats[(size_t)(n_rows + row) * n_heads + h]);
                }
                p_of[lane] = p, ds_of[lane] = ds, row_of[lane] = row;
                __syncwarp(); // every lane's terms are written before the lanes read them all
                int here = min(32, s.len - tile);
                for (int x = 0; x < here; x++) {
                    if (p_of[x] == 0.0f && ds_of[x] == 0.0f) continue;
                    size_t off = row_of[x] * q_stride + (size_t)h * hd;
#pragma unroll
                    for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++) {
                        int d = lane + 32 * u;
                        if (d < hd) {
                            dk_acc[u] += ds_of[x] * q[off + d];
                            dv_acc[u] += p_of[x] * dout[off + d];
                        }
                    }
                }
                __syncwarp(); // the tile's terms are read in full before the next overwrites them
            }
        }
    }
#pragma unroll
    for (int u = 0; u < CUDA_ATTENTION_MAX_HD / 32; u++) {
        int d = lane + 32 * u;
        if (d < hd) {
            dk[j * kv_stride + (size_t)g * hd + d] = scale * dk_acc[u];
            dv[j * kv_stride + (size_t)g * hd + d] = dv_acc[u];
        }
    }
}

extern "C" int cuda_attention_forward(float *out, const float *q, const float *k, const float *v,
                                      const AttnSegment *segs, int n_segs, int max_len,
                                      const int *seq_index, int n_heads, int n_kv_heads, int hd,
                                      int window, void *stream) {
    if (hd <= 0 || hd > CUDA_ATTENTION_MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return (int)cudaErrorInvalidValue;
    if (hd <= TILED_HD)
        return cuda_attention_tiled_forward(out, q, k, v, segs, n_segs, max_len, seq_index, n_heads,
                                            n_kv_heads, hd, window, stream);
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

extern "C" int cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const AttnSegment *segs, int n_segs, int max_len,
                                       const int *seq_index, int n_rows, int n_heads,
                                       int n_kv_heads, int hd, int window, float *stats_scratch,
                                       void *stream) {
    if (hd <= 0 || hd > CUDA_ATTENTION_MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return (int)cudaErrorInvalidValue;
    if (hd <= TILED_HD)
        return cuda_attention_tiled_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, max_len,
                                             seq_index, n_rows, n_heads, n_kv_heads, hd, window,
                                             stats_scratch, stream);
    if (n_rows <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    float scale = 1.0f / sqrtf((float)hd);
    int err = 0;
    if (n_segs > 0 && max_len > 0)
        err = (int)CUDA_LAUNCH(attention_row_grad_kernel, dim3(n_segs, max_len, n_heads), 32, 0, st,
                               dq, stats_scratch, dout, q, k, v, segs, seq_index, n_rows, n_heads,
                               n_kv_heads, hd, window, scale);
    if (!err)
        err = (int)CUDA_LAUNCH(attention_kv_grad_kernel, dim3(n_rows, n_kv_heads), 32, 0, st, dk,
                               dv, stats_scratch, dout, q, k, v, segs, n_segs, seq_index, n_rows,
                               n_heads, n_kv_heads, hd, window, scale);
    return err;
}
