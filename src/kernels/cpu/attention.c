#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* Softmax of one score row over the keys it may see; masked keys get probability 0
 * (transformers adds the dtype's minimum, which underflows to exactly 0 after exp). */
static void masked_softmax_row(float *row, const uint8_t *key_mask, int i, int window) {
    int first = 0;
    if (window > 0 && i - window + 1 > first) first = i - window + 1;
    float max = -INFINITY;
    for (int l = first; l <= i; l++)
        if ((!key_mask || key_mask[l]) && row[l] > max) max = row[l];
    if (max == -INFINITY) { /* nothing visible: the row's output is zero */
        for (int l = 0; l <= i; l++) row[l] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int l = 0; l < first; l++) row[l] = 0.0f;
    for (int l = first; l <= i; l++) {
        float e = (!key_mask || key_mask[l]) ? expf(row[l] - max) : 0.0f;
        row[l] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int l = first; l <= i; l++) row[l] *= inv;
}

void attention_forward(float *out, const float *q, const float *k, const float *v,
                       const uint8_t *key_mask, int batch, int t_len, int n_heads, int n_kv_heads,
                       int hd, int window) {
    int n_rep = n_heads / n_kv_heads;
    int q_stride = n_heads * hd, kv_stride = n_kv_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    size_t tt = (size_t)t_len * t_len;
    float *scores_all = xmalloc(tt * sizeof(float) * (size_t)omp_get_max_threads());

    /* One (sequence, head) pair per task: S = QK^T through BLAS, masked softmax by rows,
     * then O = P V. The upper triangle of S is computed and ignored; the tiled kernel that
     * skips it comes with the performance work. */
#pragma omp parallel for schedule(static) collapse(2)
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < n_heads; h++) {
            float *scores = scores_all + tt * (size_t)omp_get_thread_num();
            const float *qh = q + (size_t)b * t_len * q_stride + (size_t)h * hd;
            const float *kh = k + (size_t)b * t_len * kv_stride + (size_t)(h / n_rep) * hd;
            const float *vh = v + (size_t)b * t_len * kv_stride + (size_t)(h / n_rep) * hd;
            float *oh = out + (size_t)b * t_len * q_stride + (size_t)h * hd;
            const uint8_t *mask_b = key_mask ? key_mask + (size_t)b * t_len : NULL;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t_len, t_len, hd, scale, qh,
                        q_stride, kh, kv_stride, 0.0f, scores, t_len);
            for (int i = 0; i < t_len; i++) {
                float *row = scores + (size_t)i * t_len;
                masked_softmax_row(row, mask_b, i, window);
                for (int l = i + 1; l < t_len; l++) row[l] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t_len, hd, t_len, 1.0f, scores,
                        t_len, vh, kv_stride, 0.0f, oh, q_stride);
        }
    }
    free(scores_all);
}
