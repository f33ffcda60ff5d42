/* Attention on the tensor cores (attention_mma.cu) for the CUDA backend under bf16 autocast
 * (backend_cuda.h invariant 6): the contracts of cuda_attention_forward and
 * cuda_attention_backward (cuda_kernels.h), with q, k, v and dout taken as bf16 (rounded as they
 * are read: exact for the rounded values the autocast entries pass), the probabilities and dS
 * rounded to bf16 before their products, fp32 softmax statistics and accumulation. Heads wider
 * than TILED_HD, or arguments those functions refuse, go to them unchanged. Bitwise
 * reproducible (no atomics). Not for fp32 mode: its parity tests need the fp32 kernels. */
#ifndef RLHF_KERNELS_CUDA_ATTENTION_MMA_H
#define RLHF_KERNELS_CUDA_ATTENTION_MMA_H

#include "kernels/tensor_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (rows x n_heads x hd) of the segments' rows; returns the launch error (0 on success). */
int cuda_attention_mma_forward(float *out, const float *q, const float *k, const float *v,
                               const AttnSegment *segs, int n_segs, int max_len,
                               const int *seq_index, int n_heads, int n_kv_heads, int hd,
                               int window, void *stream);
/* dq on the segments' rows, dk and dv on rows [0, n_rows) (every row: zero where no query sees
 * it); stats_scratch holds 2 x n_rows x n_heads floats. Returns the launch error. */
int cuda_attention_mma_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const AttnSegment *segs, int n_segs,
                                int max_len, const int *seq_index, int n_rows, int n_heads,
                                int n_kv_heads, int hd, int window, float *stats_scratch,
                                void *stream);

#ifdef __cplusplus
}
#endif

#endif
