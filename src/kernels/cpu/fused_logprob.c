#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

/* About 16 MB of logits per chunk: large enough for an efficient GEMM, small enough that
 * the [tokens x vocab] matrix never exists as a whole. */
#define LOGITS_CHUNK_FLOATS (4u << 20)

int fused_logprob_chunk_rows(int vocab) {
    int rows = (int)(LOGITS_CHUNK_FLOATS / (unsigned)vocab);
    if (rows < 1) rows = 1;
    if (rows > 512) rows = 512;
    return rows;
}

void fused_logprob_forward(float *logp, const float *hidden, const int32_t *target,
                           const float *lm_head, int n_rows, int h, int vocab) {
    int chunk = fused_logprob_chunk_rows(vocab);
    if (chunk > n_rows) chunk = n_rows;
    if (chunk == 0) return;
    float *logits = xmalloc((size_t)chunk * vocab * sizeof(float));
    for (int r0 = 0; r0 < n_rows; r0 += chunk) {
        int rows = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, vocab, h, 1.0f,
                    hidden + (size_t)r0 * h, h, lm_head, h, 0.0f, logits, vocab);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *z = logits + (size_t)r * vocab;
            float max = -INFINITY;
            for (int j = 0; j < vocab; j++) max = z[j] > max ? z[j] : max;
            /* fp32 exponentials summed in short fp32 blocks, blocks added in fp64: accurate
             * to fp32 rounding for any vocabulary size without a double exp per logit. */
            double sum = 0.0;
            for (int j0 = 0; j0 < vocab; j0 += 256) {
                int j1 = j0 + 256 < vocab ? j0 + 256 : vocab;
                float block = 0.0f;
                for (int j = j0; j < j1; j++) block += expf(z[j] - max);
                sum += block;
            }
            logp[r0 + r] = (float)((double)(z[target[r0 + r]] - max) - log(sum));
        }
    }
    free(logits);
}
