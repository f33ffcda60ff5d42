/* The tiled attention kernels (attention_tiled.cu) that cuda_attention_forward and
 * cuda_attention_backward (cuda_kernels.h) hand heads of up to TILED_HD dims to; wider heads go
 * to attention.cu's one-row kernels. Same contracts as those two functions (arguments checked
 * by them), the same values to fp32 rounding (another summation order), bitwise reproducible. */
#ifndef RLHF_KERNELS_CUDA_ATTENTION_TILED_H
#define RLHF_KERNELS_CUDA_ATTENTION_TILED_H

#include "kernels/tensor_types.h"

/* The widest head the tiles hold: their shared-memory rows are this wide (static shared memory,
 * under 48 KB a block at these tile sizes). */
#define TILED_HD 128

#ifdef __cplusplus
extern "C" {
#endif

int cuda_attention_tiled_forward(float *out, const float *q, const float *k, const float *v,
                                 const AttnSegment *segs, int n_segs, int max_len,
                                 const int *seq_index, int n_heads, int n_kv_heads, int hd,
                                 int window, void *stream);
int cuda_attention_tiled_backward(float *dq, float *dk, float *dv, const float *dout,
                                  const float *q, const float *k, const float *v,
                                  const AttnSegment *segs, int n_segs, int max_len,
                                  const int *seq_index, int n_rows, int n_heads, int n_kv_heads,
                                  int hd, int window, float *stats_scratch, void *stream);

#ifdef __cplusplus
}
#endif

#endif
