/* Matrix products as torch's CPU autocast (dtype bfloat16) computes them: both factors rounded to
 * bf16 (nearest, ties to even), each product of two bf16 values exact in fp32, the sums fp32,
 * and the result rounded to bf16, because under autocast a linear's output is a bf16 tensor.
 * (bf16: true, kernels/cpu/backend_autocast.c.)
 *
 * How: on gemm_bf16 (gemm_bf16.h; AMX-BF16 by default where cpuid finds it), whose packing
 * rounds the factors to bf16 as it lays them out, W's once per optimizer step (its cache); the
 * sums are fp32 in another order than sgemm's. Without AMX (gemm_bf16_path() == GEMM_BF16_NONE,
 * unless RLHF_GEMM_BF16 forces its avx512 or avx2 path, both measured slower than this one), the
 * factors are rounded into fp32 copies and multiplied by OpenBLAS's sgemm: Debian's OpenBLAS
 * 0.3.21 is built without BUILD_BFLOAT16, so it declares cblas_sbgemm in cblas.h but does not
 * export it. Timings of both: bench/bench_autocast.c, bench/README.md "bf16 autocast products". */
#include "common/error.h"
#include "common/float16.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <stdlib.h>
#include <string.h>

/* The bits of f rounded to the nearest bf16 (ties to even) in the upper half, the lower half
 * zero; a NaN becomes the quiet NaN f32_to_bf16 writes. Branch-free, so that the loops below
 * vectorise (f32_to_bf16 itself is a call per value: 6% of a bf16 step in a profile). */
static inline uint32_t rounded_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : r;
}

/* f rounded to the nearest bf16 (ties to even), as an fp32. NaN stays NaN. */
static inline float round_bf16(float f) {
    uint32_t r = rounded_bits(f);
    float out;
    memcpy(&out, &r, sizeof out);
    return out;
}

/* simd: at -O2 GCC's cheap cost model leaves these loops scalar (a trip count it does not know
 * needs an epilogue), and the rounding of a bf16 rollout's outputs (64 x 151936 logits a decode
 * step at Qwen2.5's vocabulary, and every linear's) was ~11% of its CPU time (perf, 1 thread).
 * The lanes compute rounded_bits' integer expression each: the same bits. */
void bf16_round_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = round_bf16(src[i]);
}

void bf16_round_inplace(float *x, size_t n) {
    bf16_round_copy(x, x, n);
}

void bf16_narrow(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)(rounded_bits(src[i]) >> 16);
}

/* A fresh fp32 copy of W (out_dim, in_dim) with every value a bf16: fp32 weights rounded,
 * bf16 ones widened (exact), a frozen NF4 base dequantised then rounded (bitsandbytes
 * dequantises to the compute dtype, bf16 under autocast). The caller frees it. */
static float *rounded_weights(WeightRef w, int out_dim, int in_dim) {
    size_t count = (size_t)out_dim * in_dim;
    float *r = xmalloc((count ? count : 1) * sizeof *r);
    if (w.f32) {
        bf16_round_copy(r, w.f32, count);
    } else if (w.bf16) {
        bf16_widen(r, w.bf16, count);
    } else {
        weight_rows_widen(r, w, 0, out_dim, in_dim);
        bf16_round_inplace(r, count);
    }
    return r;
}

/* ---- the products ---- */

/* out += rounded bias, then out rounded: torch's bf16 addmm adds the bf16 bias to the fp32 sums
 * and rounds once. */
static void finish_output(float *out, const float *bias, int n, int out_dim) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = out + (size_t)r * out_dim;
        if (bias) /* two loops, so that each vectorises */
#pragma omp simd
            for (int j = 0; j < out_dim; j++)
                row[j] = round_bf16(row[j] + round_bf16(bias[j]));
        else
#pragma omp simd
            for (int j = 0; j < out_dim; j++)
                row[j] = round_bf16(row[j]);
    }
}

/* W packed as the forward's B (W^T) if transposed, else as dX's (W): from gemm_bf16's cache for
 * an fp32 W (the policy's, packed once per optimizer step) or a bf16 W declared frozen (a DPO
 * reference, gemm_bf16_keep_packed: packed once). Any other W stored in bf16 or NF4 (a frozen
 * base) is packed per call into *own, which the caller frees: its packings
 * kept between products (two layouts, 4 bytes a parameter) would more than undo what storing
 * it in 2 or 0.5 bytes saves, and a 7B LoRA over a bf16 base would no longer fit in 24 GB.
 * own->data is NULL otherwise. */
static const Bf16PackedB *packed_weight(WeightRef w, int out_dim, int in_dim, bool transposed,
                                        Bf16PackedB *own) {
    own->data = NULL;
    if (w.f32) return bf16_weight_packed(w.f32, NULL, out_dim, in_dim, transposed);
    /* a frozen reference's bf16 W: packed once and kept (gemm_bf16_keep_packed) */
    if (gemm_bf16_weight_kept(w.bf16))
        return bf16_weight_packed(NULL, w.bf16, out_dim, in_dim, transposed);
    float *tmp = NULL; /* an NF4 W dequantised; a bf16 one is read as it is */
    if (!w.bf16) {
        tmp = xmalloc(((size_t)out_dim * in_dim + 1) * sizeof *tmp);
        weight_rows_widen(tmp, w, 0, out_dim, in_dim);
    }
    /* W (out_dim, in_dim) row-major; the forward's B is W^T (in_dim x out_dim) */
    Bf16Source s = {.f32 = tmp,
                    .bf16 = tmp ? NULL : w.bf16,
                    .row_stride = transposed ? 1 : (size_t)in_dim,
                    .col_stride = transposed ? (size_t)in_dim : 1};
    if (transposed)
        bf16_pack_b(own, s, in_dim, out_dim);
    else
        bf16_pack_b(own, s, out_dim, in_dim);
    free(tmp);
    return own;
}

/* The rows x cols matrix x (row-major) as a Bf16Source, or its transpose. */
static Bf16Source matrix_source(const float *x, int cols, bool transposed) {
    return (Bf16Source){.f32 = x,
                        .row_stride = transposed ? 1 : (size_t)cols,
                        .col_stride = transposed ? (size_t)cols : 1};
}

/* out = bf16(bf16(in) · bf16(W)^T + bf16(bias)) on gemm_bf16, in already packed as A
 * (n x in_dim), B = W^T (in_dim x out_dim): the bias added and the output rounded as the
 * product stores its blocks (finish_output's bits, without its pass over out). */
static void forward_packed(float *out, const Bf16PackedA *a, WeightRef w, const float *bias,
                           int in_dim, int out_dim) {
    Bf16PackedB own;
    float *rb = NULL;
    if (bias) {
        rb = xmalloc((size_t)out_dim * sizeof *rb);
        bf16_round_copy(rb, bias, (size_t)out_dim);
    }
    gemm_bf16_rounded(out, (size_t)out_dim, a, packed_weight(w, out_dim, in_dim, true, &own), rb);
    bf16_packed_b_free(&own);
    free(rb);
}

void autocast_linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n,
                             int in_dim, int out_dim) {
    if (n == 0) return;
    if (gemm_bf16_path() != GEMM_BF16_NONE) {
        Bf16PackedA a;
        bf16_pack_a(&a, matrix_source(in, in_dim, false), n, in_dim);
        forward_packed(out, &a, w, bias, in_dim, out_dim);
        bf16_packed_a_free(&a);
        return;
    }
    float *x = xmalloc((size_t)n * in_dim * sizeof *x);
    bf16_round_copy(x, in, (size_t)n * in_dim);
    float *wr = rounded_weights(w, out_dim, in_dim);
    matmul_forward(out, x, wr, NULL, n, in_dim, out_dim);
    free(wr);
    free(x);
    finish_output(out, bias, n, out_dim);
}

void autocast_linears_forward(const LinearPart *parts, int count, const float *in, int n,
                              int in_dim) {
    if (n == 0) return;
    if (gemm_bf16_path() == GEMM_BF16_NONE) { /* rounded copies of W: nothing shared */
        for (int i = 0; i < count; i++)
            autocast_linear_forward(parts[i].out, in, parts[i].w, parts[i].bias, n, in_dim,
                                    parts[i].out_dim);
        return;
    }
    Bf16PackedA a;
    bf16_pack_a(&a, matrix_source(in, in_dim, false), n, in_dim);
    for (int i = 0; i < count; i++)
        forward_packed(parts[i].out, &a, parts[i].w, parts[i].bias, in_dim, parts[i].out_dim);
    bf16_packed_a_free(&a);
}

/* dw += bf16(dout)^T · bf16(in) on gemm_bf16, fp32 sums unrounded (as the sgemm path's), in
 * already packed as B (n x in_dim): A = dout^T (out_dim x n), packed from dout_a (dout packed as
 * A for dX: the same bits, half the bytes read, no rounding) if not NULL, else from dout. */
static void weight_grad_packed(float *dw, const float *dout, const Bf16PackedA *dout_a,
                               const Bf16PackedB *in_b, int n, int in_dim, int out_dim) {
    Bf16PackedA a;
    if (dout_a)
        bf16_pack_a_transposed(&a, dout_a);
    else
        bf16_pack_a(&a, matrix_source(dout, out_dim, true), out_dim, n);
    gemm_bf16(dw, (size_t)in_dim, true, &a, in_b);
    bf16_packed_a_free(&a);
}

/* dbias += column sums of bf16(dout), in fp32 as matmul_backward sums them. */
static void bias_grad_rounded(float *dbias, const float *dout, int n, int in_dim, int out_dim) {
    float *g = xmalloc((size_t)n * out_dim * sizeof *g);
    bf16_round_copy(g, dout, (size_t)n * out_dim);
    matmul_backward(NULL, NULL, dbias, g, NULL, NULL, n, in_dim, out_dim);
    free(g);
}

void autocast_linear_din_kept(float *din, const float *dout, WeightRef w, int n, int in_dim,
                              int out_dim, AutocastDout *kept) {
    kept->a.data = NULL;
    if (n == 0) return;
    if (gemm_bf16_path() == GEMM_BF16_NONE) { /* sgemm on rounded copies: nothing to keep */
        autocast_linear_backward(din, NULL, NULL, dout, NULL, w, n, in_dim, out_dim);
        return;
    }
    /* din = bf16(dout) · bf16(W): A = dout, B = W (out_dim x in_dim); the gradient of a bf16
     * cast is bf16: rounded as the product stores it */
    Bf16PackedB own;
    bf16_pack_a(&kept->a, matrix_source(dout, out_dim, false), n, out_dim);
    gemm_bf16_rounded(din, (size_t)in_dim, &kept->a, packed_weight(w, out_dim, in_dim, false, &own),
                      NULL);
    bf16_packed_b_free(&own);
}

/* autocast_linear_backward on gemm_bf16: the same products, the packing doing the rounding. */
static void backward_gemm_bf16(float *din, float *dw, float *dbias, const float *dout,
                               const float *in, WeightRef w, int n, int in_dim, int out_dim) {
    /* dout as A (n x out_dim), for dX and, transposed, for dW */
    AutocastDout kept = {{0}};
    if (din) autocast_linear_din_kept(din, dout, w, n, in_dim, out_dim, &kept);
    if (dw) { /* B = in (n x in_dim) */
        Bf16PackedB b;
        bf16_pack_b(&b, matrix_source(in, in_dim, false), n, in_dim);
        weight_grad_packed(dw, dout, kept.a.data ? &kept.a : NULL, &b, n, in_dim, out_dim);
        bf16_packed_b_free(&b);
    }
    bf16_packed_a_free(&kept.a);
    if (dbias) bias_grad_rounded(dbias, dout, n, in_dim, out_dim);
}

void autocast_linear_backward(float *din, float *dw, float *dbias, const float *dout,
                              const float *in, WeightRef w, int n, int in_dim, int out_dim) {
    if (n == 0) return;
    if (gemm_bf16_path() != GEMM_BF16_NONE) {
        backward_gemm_bf16(din, dw, dbias, dout, in, w, n, in_dim, out_dim);
        return;
    }
    /* the gradient reaching a bf16 output is a bf16 tensor in torch */
    float *g = xmalloc((size_t)n * out_dim * sizeof *g);
    bf16_round_copy(g, dout, (size_t)n * out_dim);
    if (din) {
        float *wr = rounded_weights(w, out_dim, in_dim);
        matmul_backward(din, NULL, NULL, g, NULL, wr, n, in_dim, out_dim);
        free(wr);
        bf16_round_inplace(din, (size_t)n * in_dim); /* the gradient of a bf16 cast is bf16 */
    }
    if (dw) {
        /* dW's fp32 sums go into the fp32 gradient unrounded (torch rounds each product's dW to
         * bf16 before adding it): closer to fp32, and no weight-sized temporary */
        float *x = xmalloc((size_t)n * in_dim * sizeof *x);
        bf16_round_copy(x, in, (size_t)n * in_dim);
        matmul_backward(NULL, dw, NULL, g, x, NULL, n, in_dim, out_dim);
        free(x);
    }
    if (dbias) matmul_backward(NULL, NULL, dbias, g, NULL, NULL, n, in_dim, out_dim);
    free(g);
}

void autocast_linear_weight_grads_kept(const LinearGradPart *parts, AutocastDout *kept, int count,
                                       const float *in, int n, int in_dim) {
    if (n == 0) return;
    if (gemm_bf16_path() == GEMM_BF16_NONE) { /* sgemm on rounded copies: nothing shared */
        for (int i = 0; i < count; i++)
            autocast_linear_backward(NULL, parts[i].dw, parts[i].dbias, parts[i].dout, in,
                                     parts[i].w, n, in_dim, parts[i].out_dim);
        return;
    }
    Bf16PackedB b = {0}; /* in as B, packed once for every dw product */
    for (int i = 0; i < count; i++) {
        const LinearGradPart *p = &parts[i];
        const Bf16PackedA *dout_a = kept && kept[i].a.data ? &kept[i].a : NULL;
        if (p->dw) {
            if (!b.data) bf16_pack_b(&b, matrix_source(in, in_dim, false), n, in_dim);
            weight_grad_packed(p->dw, p->dout, dout_a, &b, n, in_dim, p->out_dim);
        }
        if (p->dbias) bias_grad_rounded(p->dbias, p->dout, n, in_dim, p->out_dim);
        if (kept) bf16_packed_a_free(&kept[i].a);
    }
    bf16_packed_b_free(&b);
}

void autocast_linear_weight_grads(const LinearGradPart *parts, int count, const float *in, int n,
                                  int in_dim) {
    autocast_linear_weight_grads_kept(parts, NULL, count, in, n, in_dim);
}
