#include "kernels/cpu/kernels.h"
#include "kernels/cpu/gemm_f32.h"

#include "common/error.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/fused_logprob_rows.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

/* One block of rows against the whole vocabulary, tile by tile: each row's running
 * log-sum-exp in acc[] and its target's logit in target_logit[] (logits finished by cap). */
static void block_logsumexp(RunningLse *acc, float *target_logit, float *tile, const float *hidden,
                            const int32_t *target, WeightRef lm_head, int rows, int h, int vocab,
                            bool stats, LogitCap cap) {
    for (int r = 0; r < rows; r++)
        acc[r] = (RunningLse){-INFINITY, 0.0, 0.0, 0.0, 0};
    for (int c0 = 0; c0 < vocab; c0 += VOCAB_BLOCK) {
        int cols = vocab - c0 < VOCAB_BLOCK ? vocab - c0 : VOCAB_BLOCK;
        if (lm_head.bf16)
            matmul_forward_bf16(tile, hidden, lm_head.bf16 + (size_t)c0 * h, NULL, rows, h, cols);
        else
            gemm_f32(false, true, rows, cols, h, 1.0f, hidden, h, lm_head.f32 + (size_t)c0 * h, h,
                     0.0f, tile, cols);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            float *z = tile + (size_t)r * cols;
            if (cap_active(cap)) finish_logits(z, cols, cap);
            if (stats)
                lse_update_stats(&acc[r], z, cols, c0);
            else
                lse_update(&acc[r], z, cols);
            int t = target[r] - c0;
            if (t >= 0 && t < cols) target_logit[r] = z[t];
        }
    }
}

typedef struct {
    float *tile;         /* ROW_BLOCK x VOCAB_BLOCK logits */
    RunningLse *acc;     /* per row of the block */
    float *target_logit; /* per row of the block */
} LogprobScratch;

static LogprobScratch scratch_alloc(int n_rows, int vocab) {
    int rows_cap = n_rows < ROW_BLOCK ? n_rows : ROW_BLOCK;
    int cols_cap = vocab < VOCAB_BLOCK ? vocab : VOCAB_BLOCK;
    LogprobScratch s = {xmalloc((size_t)rows_cap * cols_cap * sizeof(float)),
                        xmalloc((size_t)rows_cap * sizeof(RunningLse)),
                        xmalloc((size_t)rows_cap * sizeof(float))};
    return s;
}

static void scratch_free(LogprobScratch *s) {
    free(s->tile);
    free(s->acc);
    free(s->target_logit);
}

void fused_logprob_forward_stats(float *logp, LogitStats *stats, const float *hidden,
                                 const int32_t *target, const float *lm_head, int n_rows, int h,
                                 int vocab) {
    fused_logprob_forward_weights(logp, stats, hidden, target, (WeightRef){.f32 = lm_head}, n_rows,
                                  h, vocab);
}

void fused_logprob_forward_weights(float *logp, LogitStats *stats, const float *hidden,
                                   const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                   int vocab) {
    fused_logprob_forward_capped(logp, stats, hidden, target, lm_head, n_rows, h, vocab,
                                 (LogitCap){0.0f, 1.0f});
}

/* The forward of every public variant: lse (may be NULL) receives each row's log-sum-exp as the
 * backward computes it from the same running sums, (float)(max + log(sum)). */
static void forward_rows(float *logp, LogitStats *stats, float *lse, const float *hidden,
                         const int32_t *target, WeightRef lm_head, int n_rows, int h, int vocab,
                         LogitCap cap) {
    if (n_rows == 0) return;
    LogprobScratch s = scratch_alloc(n_rows, vocab);
    for (int r0 = 0; r0 < n_rows; r0 += ROW_BLOCK) {
        int rows = n_rows - r0 < ROW_BLOCK ? n_rows - r0 : ROW_BLOCK;
        block_logsumexp(s.acc, s.target_logit, s.tile, hidden + (size_t)r0 * h, target + r0,
                        lm_head, rows, h, vocab, stats != NULL, cap);
        for (int r = 0; r < rows; r++) {
            const RunningLse *a = &s.acc[r];
            double row_lse = a->max + log(a->sum);
            logp[r0 + r] = (float)((double)s.target_logit[r] - row_lse);
            if (lse) lse[r0 + r] = (float)row_lse;
            if (stats) /* H = lse - sum p z = log(s) - sum p (z - m) */
                stats[r0 + r] = (LogitStats){(float)(a->zsum / vocab),
                                             (float)(log(a->sum) - a->ez / a->sum), a->argmax};
        }
    }
    scratch_free(&s);
}

void fused_logprob_forward_capped(float *logp, LogitStats *stats, const float *hidden,
                                  const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                  int vocab, LogitCap cap) {
    forward_rows(logp, stats, NULL, hidden, target, lm_head, n_rows, h, vocab, cap);
}

void fused_logprob_forward_lse(float *logp, LogitStats *stats, float *lse, const float *hidden,
                               const int32_t *target, WeightRef lm_head, int n_rows, int h,
                               int vocab) {
    forward_rows(logp, stats, lse, hidden, target, lm_head, n_rows, h, vocab,
                 (LogitCap){0.0f, 1.0f});
}

void fused_logprob_forward(float *logp, const float *hidden, const int32_t *target,
                           const float *lm_head, int n_rows, int h, int vocab) {
    fused_logprob_forward_stats(logp, NULL, hidden, target, lm_head, n_rows, h, vocab);
}

/* d logp / d z_j = [j = target] - softmax_j, so with upstream g: dz = g (onehot - p). The logits
 * are recomputed tile by tile, after a first pass has found each row's log-sum-exp (skipped
 * where the forward hands it over: fused_logprob_backward_lse). */
void fused_logprob_backward(float *dhidden, float *dlm_head, const float *dlogp,
                            const float *hidden, const int32_t *target, const float *lm_head,
                            int n_rows, int h, int vocab) {
    fused_logprob_backward_weights(dhidden, dlm_head, dlogp, hidden, target,
                                   (WeightRef){.f32 = lm_head}, n_rows, h, vocab);
}

/* A frozen lm_head stored narrower (bf16) is widened one vocabulary tile at a time into `panel`
 * (VOCAB_BLOCK x h floats), which both products of the tile then read: never all of it in fp32. */
void fused_logprob_backward_weights(float *dhidden, float *dlm_head, const float *dlogp,
                                    const float *hidden, const int32_t *target, WeightRef lm_head,
                                    int n_rows, int h, int vocab) {
    fused_logprob_backward_capped(dhidden, dlm_head, dlogp, hidden, target, lm_head, n_rows, h,
                                  vocab, (LogitCap){0.0f, 1.0f});
}

/* The backward of every public variant. lse: each row's log-sum-exp from forward_rows of the
 * same rows (the hand-over), or NULL to find it here with a first pass over the vocabulary.
 * With a LogitCap the raw logit z becomes f(z) = post c tanh(z / c), f'(z) = post (1 - tanh²):
 * the gradient of each finished logit is carried back to z through it. round_dz: each logit's
 * gradient rounded to bf16 before both products (fused_logprob_backward_bf16_dz). */
static void backward_rows(float *dhidden, float *dlm_head, const float *dlogp, const float *lse,
                          const float *hidden, const int32_t *target, WeightRef lm_head, int n_rows,
                          int h, int vocab, LogitCap cap, bool round_dz) {
    if (n_rows == 0) return;
    LogprobScratch s = scratch_alloc(n_rows, vocab);
    float *panel = NULL;
    if (!lm_head.f32)
        panel = xmalloc((size_t)(vocab < VOCAB_BLOCK ? vocab : VOCAB_BLOCK) * h * sizeof(float));
    float *row_lse =
        lse ? NULL : xmalloc((size_t)(n_rows < ROW_BLOCK ? n_rows : ROW_BLOCK) * sizeof(float));
    for (int r0 = 0; r0 < n_rows; r0 += ROW_BLOCK) {
        int rows = n_rows - r0 < ROW_BLOCK ? n_rows - r0 : ROW_BLOCK;
        const float *hb = hidden + (size_t)r0 * h;
        float *dhb = dhidden + (size_t)r0 * h;
        const float *block_lse = lse ? lse + r0 : row_lse;
        if (!lse) {
            block_logsumexp(s.acc, s.target_logit, s.tile, hb, target + r0, lm_head, rows, h, vocab,
                            false, cap);
            for (int r = 0; r < rows; r++)
                row_lse[r] = (float)(s.acc[r].max + log(s.acc[r].sum));
        }
        memset(dhb, 0, (size_t)rows * h * sizeof(float));
        for (int c0 = 0; c0 < vocab; c0 += VOCAB_BLOCK) {
            int cols = vocab - c0 < VOCAB_BLOCK ? vocab - c0 : VOCAB_BLOCK;
            const float *w = lm_head.f32 ? lm_head.f32 + (size_t)c0 * h : panel;
            if (!lm_head.f32) weight_rows_widen(panel, lm_head, (size_t)c0, cols, h);
            gemm_f32(false, true, rows, cols, h, 1.0f, hb, h, w, h, 0.0f, s.tile, cols);
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *dz = s.tile + (size_t)r * cols;
                logit_grads(dz, cols, dlogp[r0 + r], block_lse[r], target[r0 + r] - c0, cap);
                if (round_dz) bf16_round_inplace(dz, (size_t)cols); /* under 65536: no team */
            }
            gemm_f32(false, false, rows, h, cols, 1.0f, s.tile, cols, w, h, 1.0f, dhb, h);
            if (dlm_head) /* NULL: a frozen lm_head */
                gemm_f32(true, false, cols, h, rows, 1.0f, s.tile, cols, hb, h, 1.0f,
                         dlm_head + (size_t)c0 * h, h);
        }
    }
    free(row_lse);
    free(panel);
    scratch_free(&s);
}

void fused_logprob_backward_capped(float *dhidden, float *dlm_head, const float *dlogp,
                                   const float *hidden, const int32_t *target, WeightRef lm_head,
                                   int n_rows, int h, int vocab, LogitCap cap) {
    backward_rows(dhidden, dlm_head, dlogp, NULL, hidden, target, lm_head, n_rows, h, vocab, cap,
                  false);
}

void fused_logprob_backward_bf16_dz(float *dhidden, float *dlm_head, const float *dlogp,
                                    const float *hidden, const int32_t *target, WeightRef lm_head,
                                    int n_rows, int h, int vocab, LogitCap cap) {
    backward_rows(dhidden, dlm_head, dlogp, NULL, hidden, target, lm_head, n_rows, h, vocab, cap,
                  true);
}

void fused_logprob_backward_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                const float *lse, const float *hidden, const int32_t *target,
                                WeightRef lm_head, int n_rows, int h, int vocab) {
    backward_rows(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n_rows, h, vocab,
                  (LogitCap){0.0f, 1.0f}, false);
}

void fused_logprob_backward_bf16_dz_lse(float *dhidden, float *dlm_head, const float *dlogp,
                                        const float *lse, const float *hidden,
                                        const int32_t *target, WeightRef lm_head, int n_rows, int h,
                                        int vocab) {
    backward_rows(dhidden, dlm_head, dlogp, lse, hidden, target, lm_head, n_rows, h, vocab,
                  (LogitCap){0.0f, 1.0f}, true);
}
