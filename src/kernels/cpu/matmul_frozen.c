/* Products with a frozen weight stored narrower than fp32 (bf16, or NF4 for QLoRA): the input
 * gradient din = dout · W that a LoRA adapter over a frozen base needs, and NF4's forward, without
 * an fp32 copy of W.
 *
 * Invariants:
 *  1. W is widened to fp32 one panel of rows at a time (about 8 MB), never whole; the arithmetic
 *     is fp32 throughout (BLAS sgemm on the widened panel), so the result is what an fp32 W
 *     holding the same rounded values gives, up to the order of the sums over panels.
 *  2. A frozen narrow W has no gradient: dw must be NULL (backend.h's linear_backward). */
#include "common/error.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/nf4.h"

#include <stdlib.h>

/* Weight rows per widened panel: about 8 MB of fp32, as matmul.c's bf16 forward panels. */
static int panel_rows(int in_dim) {
    int rows = (1 << 21) / (in_dim > 0 ? in_dim : 1);
    return rows < 16 ? 16 : rows;
}

void weight_rows_widen(float *dst, WeightRef w, size_t row0, int rows, int in_dim) {
    size_t at = row0 * (size_t)in_dim;
    if (w.f32) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < in_dim; i++)
                dst[(size_t)r * in_dim + i] = w.f32[at + (size_t)r * in_dim + i];
        return;
    }
    if (w.nf4) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            nf4_dequantize(dst + (size_t)r * in_dim, w.nf4, at + (size_t)r * in_dim,
                           (size_t)in_dim);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        bf16_widen(dst + (size_t)r * in_dim, w.bf16 + at + (size_t)r * in_dim, (size_t)in_dim);
}

void frozen_linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n,
                           int in_dim, int out_dim) {
    if (n == 0) return;
    int rows = panel_rows(in_dim);
    if (rows > out_dim) rows = out_dim;
    float *panel = xmalloc((size_t)rows * in_dim * sizeof(float));
    for (int j0 = 0; j0 < out_dim; j0 += rows) {
        int m = out_dim - j0 < rows ? out_dim - j0 : rows;
        weight_rows_widen(panel, w, (size_t)j0, m, in_dim);
        gemm_f32(false, true, n, m, in_dim, 1.0f, in, in_dim, panel, in_dim, 0.0f, out + j0,
                 out_dim);
    }
    free(panel);
    bias_add_rows(out, bias, n, out_dim);
}

/* din (N, in_dim) = dout (N, out_dim) · W, W widened panel by panel: the rows j0.. of W meet the
 * columns j0.. of dout, each panel's product added onto the ones before. */
static void din_panels(float *din, const float *dout, WeightRef w, int n, int in_dim, int out_dim) {
    int rows = panel_rows(in_dim);
    if (rows > out_dim) rows = out_dim;
    float *panel = xmalloc((size_t)rows * in_dim * sizeof(float));
    for (int j0 = 0; j0 < out_dim; j0 += rows) {
        int m = out_dim - j0 < rows ? out_dim - j0 : rows;
        weight_rows_widen(panel, w, (size_t)j0, m, in_dim);
        gemm_f32(false, false, n, in_dim, m, 1.0f, dout + j0, out_dim, panel, in_dim,
                 j0 == 0 ? 0.0f : 1.0f, din, in_dim);
    }
    free(panel);
}

void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     WeightRef w, int n, int in_dim, int out_dim) {
    if (w.f32) {
        matmul_backward(din, dw, dbias, dout, in, w.f32, n, in_dim, out_dim);
        return;
    }
    if (n == 0) return;
    if (din) din_panels(din, dout, w, n, in_dim, out_dim);
    /* dw is NULL (invariant 2); the bias, if any, is fp32 and may train */
    if (dbias) matmul_backward(NULL, NULL, dbias, dout, in, NULL, n, in_dim, out_dim);
}
