// Tiled causal attention over segments for heads of up to TILED_HD dims (attention_tiled.h),
// flash-attention's plan on CUDA cores (no tensor cores yet): a block holds a tile of queries and
// a tile of keys (and values) in shared memory, so every q, k, v element read from device memory
// serves a whole tile, where attention.cu's one-row kernels re-read each key row for every query.
//
// Three kernels:
//  - forward: a block per (segment, FQ-query tile, head) walks the key tiles with an online
//    softmax. It also serves the backward's statistics: with `lse` it writes each row's
//    log-sum-exp, and with `dout` each row's D = Σ_d dO·O (FlashAttention-2's identity for
//    Σ_j P dP), from the output it holds in registers, so the output itself need not be stored.
//  - dq: a block per (segment, BQ-query tile, head) recomputes P from lse, dP, dS = P (dP - D),
//    and sums dq = scale Σ_j dS K.
//  - dk, dv: a block per (BK-key-row tile, kv head) walks every segment that sees those rows,
//    the group's heads and the segment's query tiles in order: dv = Σ P dO, dk = scale Σ dS Q.
// No atomics: every sum runs in an order fixed by the shapes, so two runs give the same bits.
// A query row's TPR threads are consecutive lanes of one warp; its softmax statistics are reduced
// over them with xor shuffles (a fixed tree) and held alike by each.
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/attention_view.cuh"
#include "kernels/cuda/cuda_device.h"

#define TILE_THREADS 128
#define ROW          (TILED_HD + 1) // a row in shared memory, padded: rows start in other banks
#define FULL_MASK    0xffffffffu

// forward: 32 queries x 32 keys, 4 threads per query row (8 scores, 32 output dims each)
#define FQ    32
#define FK    32
#define F_TPR (TILE_THREADS / FQ)
// dq: 16 queries x 16 keys, 8 threads per row (2 scores, 16 dims each)
#define BQ    16
#define BK    16
#define B_TPR (TILE_THREADS / BQ)
// dk, dv: 16 keys x 16 queries, 8 threads per key row (2 queries, 16 dims of dk and of dv each)
#define KV_TPK (TILE_THREADS / BK)

static_assert(FK % F_TPR == 0 && BK % B_TPR == 0 && BQ % KV_TPK == 0, "whole columns per thread");

// Sum and max over the `tpr` consecutive lanes that hold one row (tpr a power of two <= 32).
template <int TPR> __device__ __forceinline__ float row_sum(float v) {
    for (int off = 1; off < TPR; off <<= 1)
        v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}
template <int TPR> __device__ __forceinline__ float row_max(float v) {
    for (int off = 1; off < TPR; off <<= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

// rows [0, n) of a tile: row x = src row row_of(x) (hd floats at column offset `col`, rows
// `stride` apart), zeros for x in [n, tile_rows) so that padding never carries NaN into a sum.
template <class RowOf>
__device__ __forceinline__ void load_tile(float *dst, int tile_rows, int n, const float *src,
                                          size_t stride, size_t col, int hd, RowOf row_of) {
    for (int x = threadIdx.x; x < tile_rows * hd; x += TILE_THREADS) {
        int r = x / hd, d = x - r * hd;
        dst[r * ROW + d] = r < n ? src[(size_t)row_of(r) * stride + col + d] : 0.0f;
    }
}

// a · b over hd dims of two shared rows, d in order.
__device__ __forceinline__ float row_dot(const float *a, const float *b, int hd) {
    float dot = 0.0f;
    for (int d = 0; d < hd; d++)
        dot += a[d] * b[d];
    return dot;
}

__global__ void __launch_bounds__(TILE_THREADS)
    attention_tiled_forward_kernel(float *out, float *lse, float *big_d, const float *dout,
                                   const float *q, const float *k, const float *v,
                                   const AttnSegment *segs, const int *seq_index, int n_heads,
                                   int n_kv_heads, int hd, int window, float scale) {
    __shared__ float qs[FQ * ROW], kvs[FK * ROW], ps[FQ * (FK + 1)];
    const SegmentView seg = {segs[blockIdx.x]};
    const AttnSegment &s = seg.s;
    int q0 = blockIdx.y * FQ;
    if (q0 >= s.len) return; // the whole block: no barrier is divergent
    int t = threadIdx.x, h = blockIdx.z, g = h / (n_heads / n_kv_heads);
    int r = t / F_TPR, lane = t % F_TPR; // this thread's query row of the tile, its share of it
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    int rows_here = min(FQ, s.len - q0);
    const QueryRow qr(s, q0, r, rows_here, window, seq_index);
    int row = qr.row;
    bool real = qr.real;
    int block_keys = s.prefix_len + q0 + rows_here;
    load_tile(qs, FQ, rows_here, q, q_stride, (size_t)h * hd, hd,
              [&](int x) { return s.start + q0 + x; });

    float m = -INFINITY, l = 0.0f, acc[TILED_HD / F_TPR];
#pragma unroll
    for (int u = 0; u < TILED_HD / F_TPR; u++)
        acc[u] = 0.0f;
    for (int c0 = 0; c0 < block_keys; c0 += FK) {
        int keys_here = min(FK, block_keys - c0);
        __syncthreads(); // the last tile's values and probabilities are read (and the Q tile is in)
        load_tile(kvs, FK, keys_here, k, kv_stride, (size_t)g * hd, hd,
                  [&](int x) { return seg.key_row(c0 + x); });
        __syncthreads(); // the key tile is in before any score reads it
        float score[FK / F_TPR], tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < FK / F_TPR; j++) {
            int cc = lane + F_TPR * j, c = c0 + cc;
            bool seen = qr.sees(seg, c, window, seq_index);
            score[j] = seen ? row_dot(qs + r * ROW, kvs + cc * ROW, hd) * scale : -INFINITY;
            tile_max = fmaxf(tile_max, score[j]);
        }
        float m_new = fmaxf(m, row_max<F_TPR>(tile_max));
        // a row that has seen no key yet keeps m = -inf: its probabilities are 0, its sums stay 0
        float rescale = m_new == -INFINITY ? 1.0f : expf(m - m_new), tile_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < FK / F_TPR; j++) {
            float p = score[j] == -INFINITY ? 0.0f : expf(score[j] - m_new);
            ps[r * (FK + 1) + lane + F_TPR * j] = p;
            tile_sum += p;
        }
        l = l * rescale + row_sum<F_TPR>(tile_sum);
        m = m_new;
        __syncthreads(); // every score has read the key tile, every probability is written
        load_tile(kvs, FK, keys_here, v, kv_stride, (size_t)g * hd, hd,
                  [&](int x) { return seg.key_row(c0 + x); });
        __syncthreads(); // the value tile is in
#pragma unroll
        for (int u = 0; u < TILED_HD / F_TPR; u++) {
            int d = lane + F_TPR * u;
            if (d >= hd) break;
            float a = 0.0f;
            for (int j = 0; j < keys_here; j++)
                a += ps[r * (FK + 1) + j] * kvs[j * ROW + d];
            acc[u] = acc[u] * rescale + a;
        }
    }
    float inv_l = real ? 1.0f / l : 0.0f, d_part = 0.0f;
    size_t o = (size_t)row * q_stride + (size_t)h * hd;
#pragma unroll
    for (int u = 0; u < TILED_HD / F_TPR; u++) {
        int d = lane + F_TPR * u;
        if (d >= hd || !real) break;
        if (out) out[o + d] = acc[u] * inv_l;
        if (dout) d_part += dout[o + d] * (acc[u] * inv_l);
    }
    if (big_d) d_part = row_sum<F_TPR>(d_part); // every lane of the warp takes part
    if (real && lane == 0) {
        if (lse) lse[(size_t)row * n_heads + h] = m + logf(l);
        if (big_d) big_d[(size_t)row * n_heads + h] = d_part;
    }
}

__global__ void __launch_bounds__(TILE_THREADS)
    attention_tiled_dq_kernel(float *dq, const float *lse, const float *big_d, const float *dout,
                              const float *q, const float *k, const float *v,
                              const AttnSegment *segs, const int *seq_index, int n_heads,
                              int n_kv_heads, int hd, int window, float scale) {
    __shared__ float qs[BQ * ROW], dos[BQ * ROW], ks[BK * ROW], vs[BK * ROW], dss[BQ * (BK + 1)];
    const SegmentView seg = {segs[blockIdx.x]};
    const AttnSegment &s = seg.s;
    int q0 = blockIdx.y * BQ;
    if (q0 >= s.len) return;
    int t = threadIdx.x, h = blockIdx.z, g = h / (n_heads / n_kv_heads);
    int r = t / B_TPR, lane = t % B_TPR;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    int rows_here = min(BQ, s.len - q0);
    const QueryRow qr(s, q0, r, rows_here, window, seq_index);
    int row = qr.row;
    bool real = qr.real;
    float row_lse = real ? lse[(size_t)row * n_heads + h] : 0.0f;
    float row_d = real ? big_d[(size_t)row * n_heads + h] : 0.0f;
    int block_keys = s.prefix_len + q0 + rows_here;
    auto own_row = [&](int x) { return s.start + q0 + x; };
    load_tile(qs, BQ, rows_here, q, q_stride, (size_t)h * hd, hd, own_row);
    load_tile(dos, BQ, rows_here, dout, q_stride, (size_t)h * hd, hd, own_row);

    float acc[TILED_HD / B_TPR];
#pragma unroll
    for (int u = 0; u < TILED_HD / B_TPR; u++)
        acc[u] = 0.0f;
    for (int c0 = 0; c0 < block_keys; c0 += BK) {
        int keys_here = min(BK, block_keys - c0);
        auto key_row = [&](int x) { return seg.key_row(c0 + x); };
        __syncthreads(); // the last tile's keys and dS are read (and the query tiles are in)
        load_tile(ks, BK, keys_here, k, kv_stride, (size_t)g * hd, hd, key_row);
        load_tile(vs, BK, keys_here, v, kv_stride, (size_t)g * hd, hd, key_row);
        __syncthreads(); // the key and value tiles are in
#pragma unroll
        for (int j = 0; j < BK / B_TPR; j++) {
            int cc = lane + B_TPR * j, c = c0 + cc;
            bool seen = qr.sees(seg, c, window, seq_index);
            float ds = 0.0f;
            if (seen) {
                float p = expf(row_dot(qs + r * ROW, ks + cc * ROW, hd) * scale - row_lse);
                ds = p * (row_dot(dos + r * ROW, vs + cc * ROW, hd) - row_d);
            }
            dss[r * (BK + 1) + cc] = ds;
        }
        __syncthreads(); // every dS of the tile is written
#pragma unroll
        for (int u = 0; u < TILED_HD / B_TPR; u++) {
            int d = lane + B_TPR * u;
            if (d >= hd) break;
            float a = 0.0f;
            for (int j = 0; j < keys_here; j++)
                a += dss[r * (BK + 1) + j] * ks[j * ROW + d];
            acc[u] += a;
        }
    }
    size_t o = (size_t)row * q_stride + (size_t)h * hd;
#pragma unroll
    for (int u = 0; u < TILED_HD / B_TPR; u++) {
        int d = lane + B_TPR * u;
        if (d >= hd || !real) break;
        dq[o + d] = scale * acc[u];
    }
}

__global__ void __launch_bounds__(TILE_THREADS)
    attention_tiled_dkv_kernel(float *dk, float *dv, const float *lse, const float *big_d,
                               const float *dout, const float *q, const float *k, const float *v,
                               const AttnSegment *segs, int n_segs, const int *seq_index,
                               int n_rows, int n_heads, int n_kv_heads, int hd, int window,
                               float scale) {
    __shared__ float ks[BK * ROW], vs[BK * ROW], qs[BQ * ROW], dos[BQ * ROW];
    __shared__ float pt[BK * (BQ + 1)], dst[BK * (BQ + 1)]; // P and dS, transposed: [key][query]
    int t = threadIdx.x, g = blockIdx.y, group = n_heads / n_kv_heads;
    int c = t / KV_TPK, lane = t % KV_TPK; // this thread's key row of the tile, its share of it
    int j0 = blockIdx.x * BK, keys_here = min(BK, n_rows - j0), j = j0 + c;
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    auto key_row = [&](int x) { return j0 + x; };
    load_tile(ks, BK, keys_here, k, kv_stride, (size_t)g * hd, hd, key_row);
    load_tile(vs, BK, keys_here, v, kv_stride, (size_t)g * hd, hd, key_row);

    float dk_acc[TILED_HD / KV_TPK], dv_acc[TILED_HD / KV_TPK];
#pragma unroll
    for (int u = 0; u < TILED_HD / KV_TPK; u++)
        dk_acc[u] = dv_acc[u] = 0.0f;
    for (int si = 0; si < n_segs; si++) {
        const AttnSegment s = segs[si];
        // the first own query of s that sees any of the tile's rows (block-uniform)
        int first = s.len;
        if (j0 < s.prefix_start + s.prefix_len && j0 + keys_here > s.prefix_start) first = 0;
        if (j0 < s.start + s.len && j0 + keys_here > s.start)
            first = min(first, max(0, j0 - s.start));
        if (first >= s.len) continue;
        bool in_prefix = j >= s.prefix_start && j < s.prefix_start + s.prefix_len;
        bool own = j >= s.start && j < s.start + s.len;
        for (int e = 0; e < group; e++) {
            int h = g * group + e;
            for (int i0 = first; i0 < s.len; i0 += BQ) {
                int queries_here = min(BQ, s.len - i0);
                auto own_row = [&](int x) { return s.start + i0 + x; };
                __syncthreads(); // the last tile's P, dS and queries are read (K, V are in)
                load_tile(qs, BQ, queries_here, q, q_stride, (size_t)h * hd, hd, own_row);
                load_tile(dos, BQ, queries_here, dout, q_stride, (size_t)h * hd, hd, own_row);
                __syncthreads(); // the query tiles are in
#pragma unroll
                for (int x = 0; x < BQ / KV_TPK; x++) {
                    int qi = lane + KV_TPK * x, i = i0 + qi, row = s.start + i;
                    bool seen = c < keys_here && i < s.len &&
                                (in_prefix || (own && j - s.start <= i)) &&
                                (window <= 0 || seq_index[j] > seq_index[row] - window);
                    float p = 0.0f, ds = 0.0f;
                    if (seen) {
                        size_t st = (size_t)row * n_heads + h;
                        p = expf(row_dot(qs + qi * ROW, ks + c * ROW, hd) * scale - lse[st]);
                        ds = p * (row_dot(dos + qi * ROW, vs + c * ROW, hd) - big_d[st]);
                    }
                    pt[c * (BQ + 1) + qi] = p;
                    dst[c * (BQ + 1) + qi] = ds;
                }
                __syncthreads(); // every P and dS of the tile is written
#pragma unroll
                for (int u = 0; u < TILED_HD / KV_TPK; u++) {
                    int d = lane + KV_TPK * u;
                    if (d >= hd) break;
                    float a = 0.0f, b = 0.0f;
                    for (int x = 0; x < queries_here; x++) {
                        a += pt[c * (BQ + 1) + x] * dos[x * ROW + d];
                        b += dst[c * (BQ + 1) + x] * qs[x * ROW + d];
                    }
                    dv_acc[u] += a;
                    dk_acc[u] += b;
                }
            }
        }
    }
    if (c >= keys_here) return; // after the last barrier
#pragma unroll
    for (int u = 0; u < TILED_HD / KV_TPK; u++) {
        int d = lane + KV_TPK * u;
        if (d >= hd) break;
        size_t o = (size_t)j * kv_stride + (size_t)g * hd + d;
        dk[o] = scale * dk_acc[u];
        dv[o] = dv_acc[u];
    }
}

extern "C" int cuda_attention_tiled_forward(float *out, const float *q, const float *k,
                                            const float *v, const AttnSegment *segs, int n_segs,
                                            int max_len, const int *seq_index, int n_heads,
                                            int n_kv_heads, int hd, int window, void *stream) {
    if (n_segs <= 0 || max_len <= 0) return 0;
    dim3 grid(n_segs, (max_len + FQ - 1) / FQ, n_heads);
    return (int)CUDA_LAUNCH(attention_tiled_forward_kernel, grid, TILE_THREADS, 0,
                            (cudaStream_t)stream, out, (float *)NULL, (float *)NULL,
                            (const float *)NULL, q, k, v, segs, seq_index, n_heads, n_kv_heads, hd,
                            window, 1.0f / sqrtf((float)hd));
}

extern "C" int cuda_attention_tiled_backward(float *dq, float *dk, float *dv, const float *dout,
                                             const float *q, const float *k, const float *v,
                                             const AttnSegment *segs, int n_segs, int max_len,
                                             const int *seq_index, int n_rows, int n_heads,
                                             int n_kv_heads, int hd, int window,
                                             float *stats_scratch, void *stream) {
    if (n_rows <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    float scale = 1.0f / sqrtf((float)hd);
    float *lse = stats_scratch, *big_d = stats_scratch + (size_t)n_rows * n_heads;
    int err = 0;
    if (n_segs > 0 && max_len > 0) {
        err = (int)CUDA_LAUNCH(attention_tiled_forward_kernel,
                               dim3(n_segs, (max_len + FQ - 1) / FQ, n_heads), TILE_THREADS, 0, st,
                               (float *)NULL, lse, big_d, dout, q, k, v, segs, seq_index, n_heads,
                               n_kv_heads, hd, window, scale);
        if (!err)
            err = (int)CUDA_LAUNCH(attention_tiled_dq_kernel,
                                   dim3(n_segs, (max_len + BQ - 1) / BQ, n_heads), TILE_THREADS, 0,
                                   st, dq, (const float *)lse, (const float *)big_d, dout, q, k, v,
                                   segs, seq_index, n_heads, n_kv_heads, hd, window, scale);
    }
    if (!err)
        err = (int)CUDA_LAUNCH(attention_tiled_dkv_kernel, dim3((n_rows + BK - 1) / BK, n_kv_heads),
                               TILE_THREADS, 0, st, dk, dv, (const float *)lse,
                               (const float *)big_d, dout, q, k, v, segs, n_segs, seq_index, n_rows,
                               n_heads, n_kv_heads, hd, window, scale);
    return err;
}
