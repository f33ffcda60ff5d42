// What a query row of a segment sees (kernels/tensor_types.h's AttnSegment layout: a segment's
// own rows, optionally after a shared prefix's rows), for the tiled attention kernels:
// attention_tiled.cu (fp32, CUDA cores) and attention_mma.cu (bf16 tensor cores) mask alike.
#ifndef RLHF_KERNELS_CUDA_ATTENTION_VIEW_CUH
#define RLHF_KERNELS_CUDA_ATTENTION_VIEW_CUH

#include "kernels/cuda/cuda_device.h"
#include "kernels/tensor_types.h"

// The key rows of segment s in key order (the prefix's rows, then its own), and what a query
// sees: key c of own query i when c <= prefix_len + i and, under a window, its seq_index is past
// the query's - window.
struct SegmentView {
    AttnSegment s;
    __device__ __forceinline__ int key_row(int c) const {
        return c < s.prefix_len ? s.prefix_start + c : s.start + (c - s.prefix_len);
    }
};

// Row r of a query tile starting at own query q0 of segment s (rows_here of the tile's rows are
// real) and the keys it sees: key c up to its own (causal), under a window only keys whose
// seq_index is past the query's - window. A row past the segment's end sees none. The forward
// and dq kernels both mask with sees(), so their P is the same function.
struct QueryRow {
    int row, n_keys, oldest;
    bool real;
    __device__ __forceinline__ QueryRow(const AttnSegment &s, int q0, int r, int rows_here,
                                        int window, const int *seq_index)
        : row(s.start + q0 + r), n_keys(s.prefix_len + q0 + r + 1), oldest(0), real(r < rows_here) {
        if (window > 0 && real) oldest = seq_index[row] - window;
    }
    __device__ __forceinline__ bool sees(const SegmentView &seg, int c, int window,
                                         const int *seq_index) const {
        return real && c < n_keys && (window <= 0 || seq_index[seg.key_row(c)] > oldest);
    }
};

#endif
