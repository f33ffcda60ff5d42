// Causal attention over segments on the tensor cores, for bf16 autocast (attention_mma.h):
// FlashAttention-2's plan with every product a bf16 mma.sync (mma.cuh), fp32 accumulation and
// fp32 softmax statistics.
//
// Three kernels of 4 warps; a warp owns 16 rows of a product (the mma's M) and every score,
// probability and gradient of its rows lives in its C fragments (lane: rows groupID, groupID + 8;
// columns tig * 2, + 1 of each 8-column block), so the softmax needs only the 4 lanes of a row:
//  - forward: a block per (segment, 64-query tile, head); per 32-key tile S = Q K^T, the online
//    softmax, O += P V. With `lse`/`big_d` it writes each row's log-sum-exp and
//    D = Σ dO·O (from the fp32 output) for the backward, the output itself not stored.
//  - dq: a block per (segment, 64-query tile, head); per 16-key tile S = Q K^T, dP = dO V^T,
//    P = exp(S scale - lse), dS = P (dP - D), dq += dS K.
//  - dk, dv: a block per (64-key tile, kv head); walks the segments that see its keys, the
//    group's heads and 16-query tiles in order: S^T = K Q^T, dP^T = V dO^T, dv += P^T dO,
//    dk += dS^T Q.
// Warps skip their products for the tiles none of their rows sees (causal), which changes no
// bit of a sum: those terms are exact zeros.
// Operands: q, k, v, dout are rounded to bf16 as they enter shared memory (the autocast hook
// passes values that are bf16 already, so that is exact); P and dS enter their products as
// P_PARTS bf16 parts (3: exactly their fp32 values, the CPU's exact-P rule); the softmax's max,
// sum, lse and D and every accumulator stay fp32. Heads are padded with zeros to HDP (16, 32, 64 or
// 128 dims: a template parameter, so the accumulators are registers). No atomics: every sum has an
// order fixed by the shapes, so two runs give the same bits.
#include "kernels/cuda/attention_mma.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/attention_view.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/mma.cuh"

#define MMA_THREADS 128
#define WARP_ROWS   16              // rows of a warp: the mma's M
#define TILE_ROWS   (4 * WARP_ROWS) // a block's queries (forward, dq) or keys (dk, dv)
#define HDS         (TILED_HD + 8)  // a bf16 row in shared memory, padded (other banks)
#define FWD_KEYS    32              // keys of a forward tile
#define DQ_KEYS     16              // keys of a dq tile
#define DKV_QUERIES 16              // queries of a dk, dv tile
#define FULL_MASK   0xffffffffu
// P and dS enter their products as this many bf16 parts (split_parts). 3: their fp32 values
// exactly, as the CPU's autocast does under autocast_attention_exact (the device tests' setting);
// by default the CPU rounds normalised P and dS once, torch's points (backend_autocast.c rule 3).
// 1 part here would round the unnormalised exponentials against the running maximum, another
// rule: matching the CPU's needs P normalised first (a lease to check it).
#define P_PARTS 3

// rows [0, n) of a bf16 tile: row x = src row row_of(x) (hd floats at column offset col, rows
// stride apart) rounded to bf16; zeros for rows [n, tile_rows) and columns [hd, hdp).
template <class RowOf>
__device__ __forceinline__ void load_tile_bf16(uint16_t *dst, int tile_rows, int n,
                                               const float *src, size_t stride, size_t col, int hd,
                                               int hdp, RowOf row_of) {
    for (int x = threadIdx.x; x < tile_rows * hdp; x += MMA_THREADS) {
        int r = x / hdp, d = x - r * hdp;
        float f = r < n && d < hd ? src[(size_t)row_of(r) * stride + col + d] : 0.0f;
        dst[r * HDS + d] = (uint16_t)bf16_round_bits(f);
    }
}

// Sum and max over the 4 lanes of a row (lanes differing in the low two bits).
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(FULL_MASK, v, 1);
    return v + __shfl_xor_sync(FULL_MASK, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 2));
}

// acc[n] (16 x 8 each, NT of them) = A (rows r0.. of a, HDP wide) times B (rows n0.. of b as
// columns): the 16 x 8 NT block of a b^T over HDP dims.
template <int HDP, int NT>
__device__ __forceinline__ void product_abt(float acc[NT][4], const uint16_t *a, int r0,
                                            const uint16_t *b, int lane) {
#pragma unroll
    for (int n = 0; n < NT; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HDP / 16; kk++) {
        unsigned af[4];
        mma_load_a(af, a, HDS, r0, kk * 16, lane);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            unsigned bf[2];
            mma_load_b_rows(bf, b, HDS, n * 8, kk * 16, lane);
            mma_bf16_16816(acc[n], af, bf, acc[n]);
        }
    }
}

// P (or dS) as P_PARTS A fragments of bf16 parts whose sum is the fp32 value: lo and hi are two
// C fragments side by side (mma_a_from_c), each part the rounding of what the parts before it
// left (exact in fp32, as cuda_bf16_split's), so three parts carry all 24 bits (short of values
// under 2^-133, which bf16 cannot hold). The parts are consumed in place: lo and hi end as the
// remainder.
__device__ __forceinline__ void split_parts(unsigned pa[P_PARTS][4], float lo[4], float hi[4]) {
#pragma unroll
    for (int part = 0; part < P_PARTS; part++) {
        mma_a_from_c(pa[part], lo, hi);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] -= bf16_value(bf16_round_bits(lo[i]));
            hi[i] -= bf16_value(bf16_round_bits(hi[i]));
        }
    }
}

// acc[n] += P (16 x 16, its parts pa) times rows k0.. of tile (16 x HDP): PV-like products, each
// part a product of its own into the fp32 accumulator, largest part first.
template <int HDP>
__device__ __forceinline__ void product_pv(float acc[HDP / 8][4], const unsigned pa[P_PARTS][4],
                                           const uint16_t *tile, int k0, int lane) {
#pragma unroll
    for (int n = 0; n < HDP / 8; n++) {
        unsigned bf[2];
        mma_load_b_cols(bf, tile, HDS, k0, n * 8, lane);
#pragma unroll
        for (int part = 0; part < P_PARTS; part++)
            mma_bf16_16816(acc[n], pa[part], bf, acc[n]);
    }
}

template <int HDP>
__global__ void __launch_bounds__(MMA_THREADS)
    attention_mma_forward_kernel(float *out, float *lse, float *big_d, const float *dout,
                                 const float *q, const float *k, const float *v,
                                 const AttnSegment *segs, const int *seq_index, int n_heads,
                                 int n_kv_heads, int hd, int window, float scale) {
    __shared__ uint16_t qs[TILE_ROWS * HDS], ks[FWD_KEYS * HDS], vs[FWD_KEYS * HDS];
    const SegmentView seg = {segs[blockIdx.x]};
    const AttnSegment &s = seg.s;
    int q0 = blockIdx.y * TILE_ROWS;
    if (q0 >= s.len) return; // the whole block: no barrier is divergent
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * WARP_ROWS, h = blockIdx.z;
    int g = h / (n_heads / n_kv_heads);
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    int rows_here = min(TILE_ROWS, s.len - q0), block_keys = s.prefix_len + q0 + rows_here;
    // the keys any row of this warp sees (causal: up to its last real row's own key), 0 if none:
    // the warp skips its products for later key tiles (warp-uniform; the barriers stay shared)
    int warp_keys = r0 < rows_here ? s.prefix_len + q0 + min(r0 + WARP_ROWS, rows_here) : 0;
    // this lane's two rows of the warp's 16 (C fragment elements 0-1 and 2-3)
    const QueryRow qr0(s, q0, r0 + mma_c_coord(lane, 0).row, rows_here, window, seq_index);
    const QueryRow qr1(s, q0, r0 + mma_c_coord(lane, 2).row, rows_here, window, seq_index);
    load_tile_bf16(qs, TILE_ROWS, rows_here, q, q_stride, (size_t)h * hd, hd, HDP,
                   [&](int x) { return s.start + q0 + x; });

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, acc[HDP / 8][4];
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int c0 = 0; c0 < block_keys; c0 += FWD_KEYS) {
        int keys_here = min(FWD_KEYS, block_keys - c0);
        auto key_row = [&](int x) { return seg.key_row(c0 + x); };
        __syncthreads(); // the last tile's keys and values are read (and the Q tile is in)
        load_tile_bf16(ks, FWD_KEYS, keys_here, k, kv_stride, (size_t)g * hd, hd, HDP, key_row);
        load_tile_bf16(vs, FWD_KEYS, keys_here, v, kv_stride, (size_t)g * hd, hd, HDP, key_row);
        __syncthreads();               // the key and value tiles are in
        if (c0 >= warp_keys) continue; // no row of this warp sees them: p = 0, nothing changes
        float sc[FWD_KEYS / 8][4];
        product_abt<HDP, FWD_KEYS / 8>(sc, qs, r0, ks, lane);
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < FWD_KEYS / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int c = c0 + n * 8 + mma_c_coord(lane, i).col;
                bool seen = (i < 2 ? qr0 : qr1).sees(seg, c, window, seq_index);
                sc[n][i] = seen ? sc[n][i] * scale : -INFINITY;
                tile_max[i >> 1] = fmaxf(tile_max[i >> 1], sc[n][i]);
            }
        float rescale[2];
#pragma unroll
        for (int x = 0; x < 2; x++) {
            float m_new = fmaxf(m[x], quad_max(tile_max[x]));
            // a row that has seen no key yet keeps m = -inf: its p are 0, its sums stay 0
            rescale[x] = m_new == -INFINITY ? 1.0f : expf(m[x] - m_new);
            m[x] = m_new;
            l[x] *= rescale[x]; // this lane's part of the row sum, reduced at the end
        }
#pragma unroll
        for (int n = 0; n < FWD_KEYS / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float p = sc[n][i] == -INFINITY ? 0.0f : expf(sc[n][i] - m[i >> 1]);
                sc[n][i] = p;
                l[i >> 1] += p;
            }
#pragma unroll
        for (int n = 0; n < HDP / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[n][i] *= rescale[i >> 1];
#pragma unroll
        for (int kk = 0; kk < FWD_KEYS / 16; kk++) {
            unsigned pa[P_PARTS][4];
            split_parts(pa, sc[2 * kk], sc[2 * kk + 1]);
            product_pv<HDP>(acc, pa, vs, kk * 16, lane);
        }
    }
    float d_part[2] = {0.0f, 0.0f};
#pragma unroll
    for (int x = 0; x < 2; x++)
        l[x] = quad_sum(l[x]);
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const QueryRow &qr = i < 2 ? qr0 : qr1;
            int d = n * 8 + mma_c_coord(lane, i).col;
            if (!qr.real || d >= hd) continue;
            size_t o = (size_t)qr.row * q_stride + (size_t)h * hd + d;
            float val = acc[n][i] / l[i >> 1];
            if (out) out[o] = val;
            if (dout) d_part[i >> 1] += dout[o] * val;
        }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const QueryRow &qr = x ? qr1 : qr0;
        float big = big_d ? quad_sum(d_part[x]) : 0.0f; // every lane of the warp takes part
        if (!qr.real || (lane & 3)) continue;
        if (lse) lse[(size_t)qr.row * n_heads + h] = m[x] + logf(l[x]);
        if (big_d) big_d[(size_t)qr.row * n_heads + h] = big;
    }
}

template <int HDP>
__global__ void __launch_bounds__(MMA_THREADS)
    attention_mma_dq_kernel(float *dq, const float *lse, const float *big_d, const float *dout,
                            const float *q, const float *k, const float *v, const AttnSegment *segs,
                            const int *seq_index, int n_heads, int n_kv_heads, int hd, int window,
                            float scale) {
    __shared__ uint16_t qs[TILE_ROWS * HDS], dos[TILE_ROWS * HDS], ks[DQ_KEYS * HDS],
        vs[DQ_KEYS * HDS];
    const SegmentView seg = {segs[blockIdx.x]};
    const AttnSegment &s = seg.s;
    int q0 = blockIdx.y * TILE_ROWS;
    if (q0 >= s.len) return;
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * WARP_ROWS, h = blockIdx.z;
    int g = h / (n_heads / n_kv_heads);
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    int rows_here = min(TILE_ROWS, s.len - q0), block_keys = s.prefix_len + q0 + rows_here;
    // the keys any row of this warp sees (causal: up to its last real row's own key), 0 if none:
    // the warp skips its products for later key tiles (warp-uniform; the barriers stay shared)
    int warp_keys = r0 < rows_here ? s.prefix_len + q0 + min(r0 + WARP_ROWS, rows_here) : 0;
    const QueryRow qr0(s, q0, r0 + mma_c_coord(lane, 0).row, rows_here, window, seq_index);
    const QueryRow qr1(s, q0, r0 + mma_c_coord(lane, 2).row, rows_here, window, seq_index);
    float row_lse[2], row_d[2];
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const QueryRow &qr = x ? qr1 : qr0;
        row_lse[x] = qr.real ? lse[(size_t)qr.row * n_heads + h] : 0.0f;
        row_d[x] = qr.real ? big_d[(size_t)qr.row * n_heads + h] : 0.0f;
    }
    auto own_row = [&](int x) { return s.start + q0 + x; };
    load_tile_bf16(qs, TILE_ROWS, rows_here, q, q_stride, (size_t)h * hd, hd, HDP, own_row);
    load_tile_bf16(dos, TILE_ROWS, rows_here, dout, q_stride, (size_t)h * hd, hd, HDP, own_row);

    float acc[HDP / 8][4];
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int c0 = 0; c0 < block_keys; c0 += DQ_KEYS) {
        int keys_here = min(DQ_KEYS, block_keys - c0);
        auto key_row = [&](int x) { return seg.key_row(c0 + x); };
        __syncthreads(); // the last tile's keys and values are read (and the query tiles are in)
        load_tile_bf16(ks, DQ_KEYS, keys_here, k, kv_stride, (size_t)g * hd, hd, HDP, key_row);
        load_tile_bf16(vs, DQ_KEYS, keys_here, v, kv_stride, (size_t)g * hd, hd, HDP, key_row);
        __syncthreads();               // the key and value tiles are in
        if (c0 >= warp_keys) continue; // no row of this warp sees them: dS = 0
        float sc[DQ_KEYS / 8][4], dp[DQ_KEYS / 8][4];
        product_abt<HDP, DQ_KEYS / 8>(sc, qs, r0, ks, lane);
        product_abt<HDP, DQ_KEYS / 8>(dp, dos, r0, vs, lane);
#pragma unroll
        for (int n = 0; n < DQ_KEYS / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int c = c0 + n * 8 + mma_c_coord(lane, i).col, x = i >> 1;
                bool seen = (x ? qr1 : qr0).sees(seg, c, window, seq_index);
                float p = seen ? expf(sc[n][i] * scale - row_lse[x]) : 0.0f;
                sc[n][i] = seen ? p * (dp[n][i] - row_d[x]) : 0.0f; // dS
            }
        unsigned dsa[P_PARTS][4];
        split_parts(dsa, sc[0], sc[1]);
        product_pv<HDP>(acc, dsa, ks, 0, lane);
    }
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const QueryRow &qr = i < 2 ? qr0 : qr1;
            int d = n * 8 + mma_c_coord(lane, i).col;
            if (qr.real && d < hd)
                dq[(size_t)qr.row * q_stride + (size_t)h * hd + d] = scale * acc[n][i];
        }
}

template <int HDP>
__global__ void __launch_bounds__(MMA_THREADS)
    attention_mma_dkv_kernel(float *dk, float *dv, const float *lse, const float *big_d,
                             const float *dout, const float *q, const float *k, const float *v,
                             const AttnSegment *segs, int n_segs, const int *seq_index, int n_rows,
                             int n_heads, int n_kv_heads, int hd, int window, float scale) {
    __shared__ uint16_t ks[TILE_ROWS * HDS], vs[TILE_ROWS * HDS], qs[DKV_QUERIES * HDS],
        dos[DKV_QUERIES * HDS];
    __shared__ float lse_s[DKV_QUERIES], d_s[DKV_QUERIES];
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * WARP_ROWS, g = blockIdx.y;
    int group = n_heads / n_kv_heads;
    int j0 = blockIdx.x * TILE_ROWS, keys_here = min(TILE_ROWS, n_rows - j0);
    size_t q_stride = (size_t)n_heads * hd, kv_stride = (size_t)n_kv_heads * hd;
    auto key_row = [&](int x) { return j0 + x; };
    load_tile_bf16(ks, TILE_ROWS, keys_here, k, kv_stride, (size_t)g * hd, hd, HDP, key_row);
    load_tile_bf16(vs, TILE_ROWS, keys_here, v, kv_stride, (size_t)g * hd, hd, HDP, key_row);
    // this lane's two key rows (C fragment rows of S^T) and whether they exist
    int j[2] = {j0 + r0 + mma_c_coord(lane, 0).row, j0 + r0 + mma_c_coord(lane, 2).row};
    bool key_real[2] = {j[0] < j0 + keys_here, j[1] < j0 + keys_here};

    float dk_acc[HDP / 8][4], dv_acc[HDP / 8][4];
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            dk_acc[n][i] = dv_acc[n][i] = 0.0f;
    for (int si = 0; si < n_segs; si++) {
        const AttnSegment s = segs[si];
        // the first own query of s that sees any of the tile's rows (block-uniform)
        int first = s.len;
        if (j0 < s.prefix_start + s.prefix_len && j0 + keys_here > s.prefix_start) first = 0;
        if (j0 < s.start + s.len && j0 + keys_here > s.start)
            first = min(first, max(0, j0 - s.start));
        if (first >= s.len) continue;
        bool in_prefix[2], own[2];
#pragma unroll
        for (int x = 0; x < 2; x++) {
            in_prefix[x] = j[x] >= s.prefix_start && j[x] < s.prefix_start + s.prefix_len;
            own[x] = j[x] >= s.start && j[x] < s.start + s.len;
        }
        for (int e = 0; e < group; e++) {
            int h = g * group + e;
            for (int i0 = first; i0 < s.len; i0 += DKV_QUERIES) {
                int queries_here = min(DKV_QUERIES, s.len - i0);
                auto own_row = [&](int x) { return s.start + i0 + x; };
                __syncthreads(); // the last tile's queries and statistics are read (K, V are in)
                load_tile_bf16(qs, DKV_QUERIES, queries_here, q, q_stride, (size_t)h * hd, hd, HDP,
                               own_row);
                load_tile_bf16(dos, DKV_QUERIES, queries_here, dout, q_stride, (size_t)h * hd, hd,
                               HDP, own_row);
                if (threadIdx.x < DKV_QUERIES) {
                    int x = threadIdx.x;
                    size_t st = (size_t)(s.start + i0 + x) * n_heads + h;
                    lse_s[x] = x < queries_here ? lse[st] : 0.0f;
                    d_s[x] = x < queries_here ? big_d[st] : 0.0f;
                }
                __syncthreads(); // the query tiles and their statistics are in
                // whether a query of the tile sees a key of this warp: a prefix key, or an own
                // key no later than the tile's last query (warp-uniform; else P = dS = 0)
                int wj0 = j0 + r0, wj1 = min(j0 + r0 + WARP_ROWS, j0 + keys_here);
                bool sees_prefix = wj0 < s.prefix_start + s.prefix_len && wj1 > s.prefix_start;
                bool sees_own = wj0 < s.start + s.len && wj1 > s.start &&
                                max(wj0, s.start) - s.start <= i0 + queries_here - 1;
                if (!sees_prefix && !sees_own) continue;
                float st[DKV_QUERIES / 8][4], dpt[DKV_QUERIES / 8][4];
                product_abt<HDP, DKV_QUERIES / 8>(st, ks, r0, qs, lane);
                product_abt<HDP, DKV_QUERIES / 8>(dpt, vs, r0, dos, lane);
#pragma unroll
                for (int n = 0; n < DKV_QUERIES / 8; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int x = i >> 1, qi = n * 8 + mma_c_coord(lane, i).col, iq = i0 + qi;
                        int row = s.start + iq;
                        bool seen = key_real[x] && iq < s.len &&
                                    (in_prefix[x] || (own[x] && j[x] - s.start <= iq)) &&
                                    (window <= 0 || seq_index[j[x]] > seq_index[row] - window);
                        float p = seen ? expf(st[n][i] * scale - lse_s[qi]) : 0.0f;
                        st[n][i] = p;
                        dpt[n][i] = seen ? p * (dpt[n][i] - d_s[qi]) : 0.0f; // dS^T
                    }
                unsigned parts[P_PARTS][4]; // P's, then dS's: one set live at a time
                split_parts(parts, st[0], st[1]);
                product_pv<HDP>(dv_acc, parts, dos, 0, lane);
                split_parts(parts, dpt[0], dpt[1]);
                product_pv<HDP>(dk_acc, parts, qs, 0, lane);
            }
        }
    }
#pragma unroll
    for (int n = 0; n < HDP / 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int x = i >> 1, d = n * 8 + mma_c_coord(lane, i).col;
            if (!key_real[x] || d >= hd) continue;
            size_t o = (size_t)j[x] * kv_stride + (size_t)g * hd + d;
            dk[o] = scale * dk_acc[n][i];
            dv[o] = dv_acc[n][i];
        }
}

// The head width padded to a multiple of 16 that a kernel instance exists for (hd <= TILED_HD).
static int padded_hd(int hd) {
    return hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : 128;
}

template <int HDP>
static int forward_launch(float *out, float *lse, float *big_d, const float *dout, const float *q,
                          const float *k, const float *v, const AttnSegment *segs, int n_segs,
                          int max_len, const int *seq_index, int n_heads, int n_kv_heads, int hd,
                          int window, cudaStream_t st) {
    dim3 grid(n_segs, (max_len + TILE_ROWS - 1) / TILE_ROWS, n_heads);
    return (int)CUDA_LAUNCH(attention_mma_forward_kernel<HDP>, grid, MMA_THREADS, 0, st, out, lse,
                            big_d, dout, q, k, v, segs, seq_index, n_heads, n_kv_heads, hd, window,
                            1.0f / sqrtf((float)hd));
}

template <int HDP>
static int backward_launch(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const AttnSegment *segs, int n_segs,
                           int max_len, const int *seq_index, int n_rows, int n_heads,
                           int n_kv_heads, int hd, int window, float *stats, cudaStream_t st) {
    float scale = 1.0f / sqrtf((float)hd);
    float *lse = stats, *big_d = stats + (size_t)n_rows * n_heads;
    int err = 0;
    if (n_segs > 0 && max_len > 0) {
        err = forward_launch<HDP>(NULL, lse, big_d, dout, q, k, v, segs, n_segs, max_len, seq_index,
                                  n_heads, n_kv_heads, hd, window, st);
        if (!err)
            err = (int)CUDA_LAUNCH(attention_mma_dq_kernel<HDP>,
                                   dim3(n_segs, (max_len + TILE_ROWS - 1) / TILE_ROWS, n_heads),
                                   MMA_THREADS, 0, st, dq, (const float *)lse, (const float *)big_d,
                                   dout, q, k, v, segs, seq_index, n_heads, n_kv_heads, hd, window,
                                   scale);
    }
    if (!err)
        err = (int)CUDA_LAUNCH(
            attention_mma_dkv_kernel<HDP>, dim3((n_rows + TILE_ROWS - 1) / TILE_ROWS, n_kv_heads),
            MMA_THREADS, 0, st, dk, dv, (const float *)lse, (const float *)big_d, dout, q, k, v,
            segs, n_segs, seq_index, n_rows, n_heads, n_kv_heads, hd, window, scale);
    return err;
}

extern "C" int cuda_attention_mma_forward(float *out, const float *q, const float *k,
                                          const float *v, const AttnSegment *segs, int n_segs,
                                          int max_len, const int *seq_index, int n_heads,
                                          int n_kv_heads, int hd, int window, void *stream) {
    if (hd <= 0 || hd > TILED_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return cuda_attention_forward(out, q, k, v, segs, n_segs, max_len, seq_index, n_heads,
                                      n_kv_heads, hd, window, stream);
    if (n_segs <= 0 || max_len <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
#define FORWARD(HDP)                                                                               \
    forward_launch<HDP>(out, NULL, NULL, NULL, q, k, v, segs, n_segs, max_len, seq_index, n_heads, \
                        n_kv_heads, hd, window, st)
    switch (padded_hd(hd)) {
    case 16:
        return FORWARD(16);
    case 32:
        return FORWARD(32);
    case 64:
        return FORWARD(64);
    default:
        return FORWARD(128);
    }
#undef FORWARD
}

extern "C" int cuda_attention_mma_backward(float *dq, float *dk, float *dv, const float *dout,
                                           const float *q, const float *k, const float *v,
                                           const AttnSegment *segs, int n_segs, int max_len,
                                           const int *seq_index, int n_rows, int n_heads,
                                           int n_kv_heads, int hd, int window, float *stats_scratch,
                                           void *stream) {
    if (hd <= 0 || hd > TILED_HD || n_kv_heads <= 0 || n_heads % n_kv_heads)
        return cuda_attention_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, max_len, seq_index,
                                       n_rows, n_heads, n_kv_heads, hd, window, stats_scratch,
                                       stream);
    if (n_rows <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
#define BACKWARD(HDP)                                                                              \
    backward_launch<HDP>(dq, dk, dv, dout, q, k, v, segs, n_segs, max_len, seq_index, n_rows,      \
                         n_heads, n_kv_heads, hd, window, stats_scratch, st)
    switch (padded_hd(hd)) {
    case 16:
        return BACKWARD(16);
    case 32:
        return BACKWARD(32);
    case 64:
        return BACKWARD(64);
    default:
        return BACKWARD(128);
    }
#undef BACKWARD
}
