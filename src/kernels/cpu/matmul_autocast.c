/* Matrix products as torch's CPU autocast (dtype bfloat16) computes them: both factors rounded to
 * bf16 (nearest, ties to even), each product of two bf16 values exact in fp32, the sums fp32,
 * and the result rounded to bf16, because under autocast a linear's output is a bf16 tensor.
 * (bf16: true, kernels/cpu/backend_autocast.c.)
 *
 * Two ways to the same numbers, chosen per product by `autocast_packed_pays`:
 *  - the packed bf16 dot-product kernels (packed_matmul_bf16.c, AVX512_BF16's vdpbf16ps, two
 *    products per fp32 lane per instruction), with W rounded and packed on each call;
 *  - elsewhere, the factors rounded into fp32 copies and multiplied by OpenBLAS's sgemm (the
 *    "widening" path: the same exact products, summed in sgemm's order).
 * Debian's OpenBLAS 0.3.21 is built without BUILD_BFLOAT16: it declares cblas_sbgemm in cblas.h
 * but does not export it, so there is no library bf16 GEMM to call here.
 *
 * The two paths sum in different orders, so their results differ by fp32 rounding (before the
 * final bf16 rounding), never by a bf16 step more than that rounding causes. */
#include "common/error.h"
#include "common/float16.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/kernels.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

/* f rounded to the nearest bf16 (ties to even), as an fp32. NaN stays NaN. */
static inline float round_bf16(float f) {
    return bf16_to_f32(f32_to_bf16(f));
}

void bf16_round_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = round_bf16(src[i]);
}

void bf16_round_inplace(float *x, size_t n) {
    bf16_round_copy(x, x, n);
}

void bf16_narrow(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

/* A fresh fp32 copy of w (rows x cols) with every value a bf16: fp32 weights rounded, bf16 ones
 * widened (exact). The caller frees it. */
static float *rounded_weights(WeightRef w, size_t count) {
    float *r = xmalloc(count * sizeof *r);
    if (w.bf16)
        bf16_widen(r, w.bf16, count);
    else
        bf16_round_copy(r, w.f32, count);
    return r;
}

/* ---- the packed path ---- */

bool autocast_packed_pays(int n) {
    /* With the instruction the packed kernel's bf16 dots do two products where sgemm's FMA does
     * one; rounding and packing W costs one pass over it, which a product of 32 rows already
     * repays (bench/README.md, "bf16 autocast products"). Without it there is nothing to gain. */
    return packed_bf16_available() && n >= 32;
}

/* out (n, out_dim) = in · bf16(W)^T through the packed bf16 kernel (which rounds `in` itself);
 * W fp32 (rounded here) or bf16. */
static void packed_product(float *out, const float *in, WeightRef w, int n, int in_dim,
                           int out_dim) {
    size_t count = (size_t)in_dim * out_dim;
    uint16_t *w16 = NULL;
    const uint16_t *src = w.bf16;
    if (!src) {
        w16 = xmalloc(count * sizeof *w16);
        bf16_narrow(w16, w.f32, count);
        src = w16;
    }
    size_t packed_count = packed_weight_bf16_count(in_dim, out_dim);
    uint16_t *panels = aligned_alloc(64, (packed_count * sizeof *panels + 63) / 64 * 64);
    if (!panels) { /* as xmalloc: exhaustion here is not an input error */
        fputs("out of memory (bf16 autocast: a packed weight)\n", stderr);
        abort();
    }
    PackedWeight p;
    packed_weight_fill_bf16(&p, panels, src, in_dim, out_dim);
    free(w16);
    packed_matmul_bf16_forward(out, in, &p, NULL, n);
    free(panels);
}

/* dst (cols, rows) = src (rows, cols)^T, fp32. */
static void transpose(float *dst, const float *src, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++)
            dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* ---- the products ---- */

/* out += rounded bias, then out rounded: torch's bf16 addmm adds the bf16 bias to the fp32 sums
 * and rounds once. */
static void finish_output(float *out, const float *bias, int n, int out_dim) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = out + (size_t)r * out_dim;
        for (int j = 0; j < out_dim; j++)
            row[j] = round_bf16(bias ? row[j] + round_bf16(bias[j]) : row[j]);
    }
}

void autocast_linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n,
                             int in_dim, int out_dim) {
    if (n == 0) return;
    if (autocast_packed_pays(n)) {
        packed_product(out, in, w, n, in_dim, out_dim);
    } else {
        float *x = xmalloc((size_t)n * in_dim * sizeof *x);
        bf16_round_copy(x, in, (size_t)n * in_dim);
        float *wr = rounded_weights(w, (size_t)in_dim * out_dim);
        matmul_forward(out, x, wr, NULL, n, in_dim, out_dim);
        free(wr);
        free(x);
    }
    finish_output(out, bias, n, out_dim);
}

void autocast_linear_backward(float *din, float *dw, float *dbias, const float *dout,
                              const float *in, const float *w, int n, int in_dim, int out_dim) {
    if (n == 0) return;
    /* the gradient reaching a bf16 output is a bf16 tensor in torch */
    float *g = xmalloc((size_t)n * out_dim * sizeof *g);
    bf16_round_copy(g, dout, (size_t)n * out_dim);
    bool packed = autocast_packed_pays(n);
    if (din) {
        if (packed) { /* din = g · W: the packed kernel multiplies by (W^T)^T */
            float *wt = xmalloc((size_t)in_dim * out_dim * sizeof *wt);
            transpose(wt, w, out_dim, in_dim);
            packed_product(din, g, (WeightRef){wt, NULL}, n, out_dim, in_dim);
            free(wt);
        } else {
            float *wr = rounded_weights((WeightRef){w, NULL}, (size_t)in_dim * out_dim);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in_dim, out_dim, 1.0f, g,
                        out_dim, wr, in_dim, 0.0f, din, in_dim);
            free(wr);
        }
        bf16_round_inplace(din, (size_t)n * in_dim); /* the gradient of a bf16 cast is bf16 */
    }
    if (dw) {
        /* dW's fp32 sums are added to the fp32 gradient unrounded (torch rounds each product's
         * dW to bf16 before adding it): closer to fp32, and the widening path needs no
         * weight-sized temporary */
        if (packed) { /* dW = g^T · x: rows of g^T times (x^T)^T */
            float *gt = xmalloc((size_t)n * out_dim * sizeof *gt);
            float *xt = xmalloc((size_t)n * in_dim * sizeof *xt);
            float *prod = xmalloc((size_t)in_dim * out_dim * sizeof *prod);
            transpose(gt, g, n, out_dim);
            transpose(xt, in, n, in_dim);
            packed_product(prod, gt, (WeightRef){xt, NULL}, out_dim, n, in_dim);
            size_t count = (size_t)in_dim * out_dim;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < count; i++)
                dw[i] += prod[i];
            free(prod);
            free(xt);
            free(gt);
        } else {
            float *x = xmalloc((size_t)n * in_dim * sizeof *x);
            bf16_round_copy(x, in, (size_t)n * in_dim);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, n, 1.0f, g,
                        out_dim, x, in_dim, 1.0f, dw, in_dim);
            free(x);
        }
    }
    if (dbias) matmul_backward(NULL, NULL, dbias, g, NULL, NULL, n, in_dim, out_dim);
    free(g);
}
