#include "kernels/cpu/kernels.h"

#include "common/error.h"
#include "kernels/cpu/fast_exp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

/* Tiles of ROW_BLOCK rows x VOCAB_BLOCK vocabulary entries: 8 MB of logits at a time, yet each
 * tile is a GEMM large enough to run at full speed. Tiling the rows alone (all V columns per
 * tile) would leave only a few dozen rows per GEMM at real vocabulary sizes, and every tile
 * would re-read the whole lm_head. */
#define ROW_BLOCK   512
#define VOCAB_BLOCK 4096

int fused_logprob_chunk_rows(int vocab) {
    (void)vocab;
    return ROW_BLOCK;
}

/* Running log-sum-exp of one row: max m and s = sum exp(z - m) over the columns seen so far. */
typedef struct {
    float max;
    double sum;
} RunningLse;

static void lse_update(RunningLse *acc, const float *z, int n) {
    float m = acc->max;
    for (int j = 0; j < n; j++)
        m = z[j] > m ? z[j] : m;
    /* fp32 exponentials in short fp32 blocks, blocks added in fp64: fp32 accuracy at any
     * vocabulary size without a double exp per logit. */
    double s = 0.0;
    for (int j0 = 0; j0 < n; j0 += 256) {
        int j1 = j0 + 256 < n ? j0 + 256 : n;
        float block = 0.0f;
#pragma omp simd reduction(+ : block)
        for (int j = j0; j < j1; j++)
            block += fast_expf(z[j] - m);
        s += block;
    }
    acc->sum = acc->sum * exp((double)acc->max - (double)m) + s;
    acc->max = m;
}

void fused_logprob_forward(float *logp, const float *hidden, const int32_t *target,
                           const float *lm_head, int n_rows, int h, int vocab) {
    if (n_rows == 0) return;
    int rows_cap = n_rows < ROW_BLOCK ? n_rows : ROW_BLOCK;
    int cols_cap = vocab < VOCAB_BLOCK ? vocab : VOCAB_BLOCK;
    float *tile = xmalloc((size_t)rows_cap * cols_cap * sizeof(float));
    RunningLse *acc = xmalloc((size_t)rows_cap * sizeof *acc);
    float *target_logit = xmalloc((size_t)rows_cap * sizeof(float));
    for (int r0 = 0; r0 < n_rows; r0 += ROW_BLOCK) {
        int rows = n_rows - r0 < ROW_BLOCK ? n_rows - r0 : ROW_BLOCK;
        for (int r = 0; r < rows; r++)
            acc[r] = (RunningLse){-INFINITY, 0.0};
        for (int c0 = 0; c0 < vocab; c0 += VOCAB_BLOCK) {
            int cols = vocab - c0 < VOCAB_BLOCK ? vocab - c0 : VOCAB_BLOCK;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, h, 1.0f,
                        hidden + (size_t)r0 * h, h, lm_head + (size_t)c0 * h, h, 0.0f, tile, cols);
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++) {
                const float *z = tile + (size_t)r * cols;
                lse_update(&acc[r], z, cols);
                int t = target[r0 + r] - c0;
                if (t >= 0 && t < cols) target_logit[r] = z[t];
            }
        }
        for (int r = 0; r < rows; r++)
            logp[r0 + r] = (float)((double)target_logit[r] - acc[r].max - log(acc[r].sum));
    }
    free(target_logit);
    free(acc);
    free(tile);
}
