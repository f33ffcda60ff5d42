#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Softmax of one score row over the keys it may see; masked keys get probability 0
 * (transformers adds the dtype's minimum, which underflows to exactly 0 after exp).
 * `row` holds scores for keys key0..key0+n-1; query i sees keys in [first, i]. */
static void masked_softmax_row(float *row, int key0, int n, const uint8_t *key_mask, int i,
                               int window) {
    int first = 0;
    if (window > 0 && i - window + 1 > first) first = i - window + 1;
    float max = -INFINITY;
    for (int l = first; l <= i; l++)
        if ((!key_mask || key_mask[l]) && row[l - key0] > max) max = row[l - key0];
    for (int l = key0; l < key0 + n; l++) {
        float *p = &row[l - key0];
        bool visible = l >= first && l <= i && (!key_mask || key_mask[l]) && max != -INFINITY;
        *p = visible ? expf(*p - max) : 0.0f;
    }
    if (max == -INFINITY) return; /* nothing visible: the row's output is zero */
    float sum = 0.0f;
    for (int l = first; l <= i; l++)
        sum += row[l - key0];
    float inv = 1.0f / sum;
    for (int l = first; l <= i; l++)
        row[l - key0] *= inv;
}

/* Query rows are processed in blocks; a block only meets the keys some row of it can see
 * (causal: up to its last row; window: from its first row's window start), which skips the
 * upper triangle and, with a sliding window, everything before the window. */
#define QUERY_BLOCK 64

void attention_forward(float *out, const float *q, const float *k, const float *v,
                       const uint8_t *key_mask, int batch, int t_len, int n_heads, int n_kv_heads,
                       int hd, int window) {
    int n_rep = n_heads / n_kv_heads;
    int q_stride = n_heads * hd, kv_stride = n_kv_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    size_t scratch = (size_t)QUERY_BLOCK * t_len;
    float *scores_all = xmalloc(scratch * sizeof(float) * (size_t)omp_get_max_threads());
    int n_blocks = (t_len + QUERY_BLOCK - 1) / QUERY_BLOCK;

    /* One (sequence, head, query block) per task: S = Q K^T through BLAS, masked softmax by
     * rows, then O = P V. */
#pragma omp parallel for schedule(dynamic) collapse(3)
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < n_heads; h++) {
            for (int blk = 0; blk < n_blocks; blk++) {
                float *scores = scores_all + scratch * (size_t)omp_get_thread_num();
                int i0 = blk * QUERY_BLOCK;
                int rows = t_len - i0 < QUERY_BLOCK ? t_len - i0 : QUERY_BLOCK;
                int key0 = window > 0 && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
                int keys = i0 + rows - key0;
                const float *qh = q + ((size_t)b * t_len + i0) * q_stride + (size_t)h * hd;
                const float *kh =
                    k + ((size_t)b * t_len + key0) * kv_stride + (size_t)(h / n_rep) * hd;
                const float *vh =
                    v + ((size_t)b * t_len + key0) * kv_stride + (size_t)(h / n_rep) * hd;
                float *oh = out + ((size_t)b * t_len + i0) * q_stride + (size_t)h * hd;
                const uint8_t *mask_b = key_mask ? key_mask + (size_t)b * t_len : NULL;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, scale, qh,
                            q_stride, kh, kv_stride, 0.0f, scores, keys);
                for (int r = 0; r < rows; r++)
                    masked_softmax_row(scores + (size_t)r * keys, key0, keys, mask_b, i0 + r,
                                       window);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, scores,
                            keys, vh, kv_stride, 0.0f, oh, q_stride);
            }
        }
    }
    free(scores_all);
}

/* Per query block, with P the block's probabilities (recomputed), dO its output gradient:
 * dV += P^T dO, dP = dO V^T, dS = P ⊙ (dP - rowsum(dP ⊙ P)), dQ = scale dS K, dK += scale dS^T Q.
 */
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const uint8_t *key_mask, int batch,
                        int t_len, int n_heads, int n_kv_heads, int hd, int window) {
    int n_rep = n_heads / n_kv_heads;
    int q_stride = n_heads * hd, kv_stride = n_kv_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    size_t scratch = (size_t)QUERY_BLOCK * t_len;
    float *scratch_all = xmalloc(2 * scratch * sizeof(float) * (size_t)omp_get_max_threads());
    int n_blocks = (t_len + QUERY_BLOCK - 1) / QUERY_BLOCK;
    for (int b = 0; b < batch; b++) {
        memset(dk + (size_t)b * t_len * kv_stride, 0, (size_t)t_len * kv_stride * sizeof(float));
        memset(dv + (size_t)b * t_len * kv_stride, 0, (size_t)t_len * kv_stride * sizeof(float));
    }

#pragma omp parallel for schedule(dynamic) collapse(2)
    for (int b = 0; b < batch; b++) {
        for (int kvh = 0; kvh < n_kv_heads; kvh++) {
            float *probs = scratch_all + 2 * scratch * (size_t)omp_get_thread_num();
            float *dprobs = probs + scratch;
            const uint8_t *mask_b = key_mask ? key_mask + (size_t)b * t_len : NULL;
            for (int h = kvh * n_rep; h < (kvh + 1) * n_rep; h++) {
                for (int blk = 0; blk < n_blocks; blk++) {
                    int i0 = blk * QUERY_BLOCK;
                    int rows = t_len - i0 < QUERY_BLOCK ? t_len - i0 : QUERY_BLOCK;
                    int key0 = window > 0 && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
                    int keys = i0 + rows - key0;
                    size_t q_off = ((size_t)b * t_len + i0) * q_stride + (size_t)h * hd;
                    size_t kv_off = ((size_t)b * t_len + key0) * kv_stride + (size_t)kvh * hd;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, scale,
                                q + q_off, q_stride, k + kv_off, kv_stride, 0.0f, probs, keys);
                    for (int r = 0; r < rows; r++)
                        masked_softmax_row(probs + (size_t)r * keys, key0, keys, mask_b, i0 + r,
                                           window);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hd, rows, 1.0f,
                                probs, keys, dout + q_off, q_stride, 1.0f, dv + kv_off, kv_stride);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f,
                                dout + q_off, q_stride, v + kv_off, kv_stride, 0.0f, dprobs, keys);
                    for (int r = 0; r < rows; r++) {
                        float *p = probs + (size_t)r * keys, *dp = dprobs + (size_t)r * keys;
                        double sum = 0.0;
                        for (int l = 0; l < keys; l++)
                            sum += (double)dp[l] * p[l];
                        for (int l = 0; l < keys; l++)
                            dp[l] = p[l] * (dp[l] - (float)sum);
                    }
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, scale,
                                dprobs, keys, k + kv_off, kv_stride, 0.0f, dq + q_off, q_stride);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hd, rows, scale,
                                dprobs, keys, q + q_off, q_stride, 1.0f, dk + kv_off, kv_stride);
                }
            }
        }
    }
    free(scratch_all);
}
