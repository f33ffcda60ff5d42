#include "kernels/cpu/kernels.h"
#include "kernels/cpu/gemm_f32.h"

#include "common/error.h"
#include "common/float16.h"

#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

void bias_add_rows(float *out, const float *bias, int n, int out_dim) {
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = out + (size_t)r * out_dim;
        for (int j = 0; j < out_dim; j++)
            row[j] += bias[j];
    }
}

#if HAVE_AVX2
static float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* x · w over n floats: one 8-lane accumulator, then the lanes, then the tail. dot4_f32 sums each
 * of its rows in exactly this order, so a sequence's result does not depend on how many others
 * share its batch. */
static float dot_f32(const float *x, const float *w, int n) {
    int i = 0;
    float sum = 0.0f;
#if HAVE_AVX2
    __m256 a = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a);
    sum = hsum8(a);
#endif
    for (; i < n; i++)
        sum += x[i] * w[i];
    return sum;
}

/* Four rows against one w, sharing each load of w: four input rows against a weight row, or
 * four weight rows against one input row (a product's two factors commute exactly, so either
 * way each sum is dot_f32's). */
static void dot4_f32(float *out, const float *x0, const float *x1, const float *x2, const float *x3,
                     const float *w, int n) {
    int i = 0;
    float s[4] = {0, 0, 0, 0};
#if HAVE_AVX2
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_loadu_ps(w + i);
        a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i), a0);
        a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i), a1);
        a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i), a2);
        a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x3 + i), a3);
    }
    s[0] = hsum8(a0), s[1] = hsum8(a1), s[2] = hsum8(a2), s[3] = hsum8(a3);
#endif
    for (; i < n; i++) {
        s[0] += x0[i] * w[i], s[1] += x1[i] * w[i];
        s[2] += x2[i] * w[i], s[3] += x3[i] * w[i];
    }
    memcpy(out, s, sizeof s);
}

/* ---- weights stored in bf16 (a frozen model kept with bf16: true). A bf16 is the upper half of
 * an fp32, so widening is a shift and the arithmetic stays fp32. What bf16 saves is memory and
 * bytes read: half the weight RAM, and half the traffic where reading the weights is the cost
 * (decoding a few rows). ---- */

void bf16_widen(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
#if HAVE_AVX2
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
#endif
    for (; i < n; i++)
        dst[i] = bf16_to_f32(src[i]);
}

/* x · w over n floats, w widened from bf16 on the fly. */
static float dot_bf16(const float *x, const uint16_t *w, int n) {
    int i = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    /* one cache line of w per step */
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        __m512i w0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i)));
        __m512i w1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i + 16)));
        a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), _mm512_loadu_ps(x + i),
                             a0);
        a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)),
                             _mm512_loadu_ps(x + i + 16), a1);
    }
    sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#elif HAVE_AVX2
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256i w0 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
        __m256i w1 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), _mm256_loadu_ps(x + i),
                             a0);
        a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w1, 16)),
                             _mm256_loadu_ps(x + i + 8), a1);
    }
    sum = hsum8(_mm256_add_ps(a0, a1));
#endif
    for (; i < n; i++)
        sum += x[i] * bf16_to_f32(w[i]);
    return sum;
}

/* Asks for weight rows 4g .. 4g + 3 (contiguous; fewer at the end of W) into L1. A thread's groups
 * are one contiguous stretch of W, but the hardware prefetcher, seeing four rows read side by side,
 * does not run ahead of them: on the 135M shape at batch 1 this took decoding from 77% to 86% of
 * the bandwidth floor (5 alternated runs each). */
static void prefetch_group(WeightRef w, int g, int in_dim, int out_dim) {
#if HAVE_AVX2
    size_t row_bytes = (size_t)in_dim * (w.f32 ? sizeof(float) : sizeof(uint16_t));
    const char *first = w.f32 ? (const char *)w.f32 : (const char *)w.bf16;
    first += (size_t)g * 4 * row_bytes;
    int rows = out_dim - 4 * g < 4 ? out_dim - 4 * g : 4;
    for (size_t b = 0; b < (size_t)rows * row_bytes; b += 64)
        _mm_prefetch(first + b, _MM_HINT_T0);
#else
    (void)w, (void)g, (void)in_dim, (void)out_dim;
#endif
}

/* One row (decoding one sequence): W streams through once, split between the threads; fp32
 * weights four rows at a time, so that four sums are in flight. OpenBLAS's sgemv kept the second
 * core idle on the small products (a profile of batch-1 decoding: 11% of the time in OpenMP's
 * wait). Each output is summed as the few-rows path sums it, so a sequence decodes to the same
 * logits alone as beside up to 15 others. (Four bf16 rows at a time were slower than one: 52-56
 * vs 61-71 tokens/s on the 135M shape.) */
static void forward_one_row(float *out, const float *x, WeightRef w, int in_dim, int out_dim) {
    int groups = (out_dim + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int g = 0; g < groups; g++) {
        int j = 4 * g, end = j + 4 < out_dim ? j + 4 : out_dim;
        size_t at = (size_t)j * in_dim;
        const float *w0 = w.f32 ? w.f32 + at : NULL;
        if (g + 1 < groups) prefetch_group(w, g + 1, in_dim, out_dim);
        if (end - j == 4 && w0)
            dot4_f32(out + j, w0, w0 + in_dim, w0 + 2 * (size_t)in_dim, w0 + 3 * (size_t)in_dim, x,
                     in_dim);
        else
            for (; j < end; j++, at += (size_t)in_dim)
                out[j] = w.f32 ? dot_f32(x, w.f32 + at, in_dim) : dot_bf16(x, w.bf16 + at, in_dim);
    }
}

/* Up to this many rows (decoding a few sequences), each weight row is read once and dotted with
 * every input row, so the weights stream through at memory speed; BLAS would first copy all of W
 * into its packed layout, which costs more than the few products. Beyond, BLAS multiplies (bf16
 * weights: widened to fp32 panel by panel first). */
#define FEW_ROWS 16

static void forward_few_rows(float *out, const float *in, WeightRef w, int n, int in_dim,
                             int out_dim) {
    if (n == 1) {
        forward_one_row(out, in, w, in_dim, out_dim);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int j = 0; j < out_dim; j++) {
        size_t at = (size_t)j * in_dim;
        int r = 0;
        if (w.f32)
            for (; r + 4 <= n; r += 4) {
                float got[4];
                const float *x = in + (size_t)r * in_dim;
                dot4_f32(got, x, x + in_dim, x + 2 * (size_t)in_dim, x + 3 * (size_t)in_dim,
                         w.f32 + at, in_dim);
                for (int k = 0; k < 4; k++)
                    out[(size_t)(r + k) * out_dim + j] = got[k];
            }
        for (; r < n; r++) {
            const float *x = in + (size_t)r * in_dim;
            out[(size_t)r * out_dim + j] =
                w.f32 ? dot_f32(x, w.f32 + at, in_dim) : dot_bf16(x, w.bf16 + at, in_dim);
        }
    }
}

void matmul_forward(float *out, const float *in, const float *w, const float *bias, int n,
                    int in_dim, int out_dim) {
    if (n == 0) return;
    if (n <= FEW_ROWS) /* BLAS would pack all of W for a handful of rows */
        forward_few_rows(out, in, (WeightRef){.f32 = w}, n, in_dim, out_dim);
    else
        gemm_f32(false, true, n, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim, 0.0f, out, out_dim);
    bias_add_rows(out, bias, n, out_dim);
}

void matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int n, int in_dim, int out_dim) {
    if (n == 0) return;
    if (din)
        gemm_f32(false, false, n, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim, 0.0f, din,
                 in_dim);
    if (dw)
        gemm_f32(true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, in, in_dim, 1.0f, dw,
                 in_dim);
    if (dbias) bias_grad_add(dbias, dout, n, out_dim);
}

void bias_grad_add(float *dbias, const float *dout, int n, int out_dim) {
    /* columns split between threads: each sum runs over the rows in order, so it is
     * reproducible */
#pragma omp parallel for schedule(static)
    for (int j = 0; j < out_dim; j++) {
        float s = 0.0f;
        for (int r = 0; r < n; r++)
            s += dout[(size_t)r * out_dim + j];
        dbias[j] += s;
    }
}

/* Whether w is an fp32 matrix (not bf16 or NF4). */
static bool stored_f32(WeightRef w) {
    return w.f32 && !w.bf16 && !w.nf4;
}

void linears_forward(const LinearPart *parts, int count, const float *in, int n, int in_dim) {
    bool shared = n > FEW_ROWS && count <= GEMM_F32_MAX_PARTS;
    for (int i = 0; i < count; i++)
        shared = shared && stored_f32(parts[i].w);
    if (!shared) { /* the few-rows path reads W row by row, narrow W are widened: one by one */
        for (int i = 0; i < count; i++)
            linear_forward(parts[i].out, in, parts[i].w, parts[i].bias, n, in_dim,
                           parts[i].out_dim);
        return;
    }
    GemmF32Part gp[GEMM_F32_MAX_PARTS] = {{0}};
    for (int i = 0; i < count; i++) /* out_i = in W_i^T, as matmul_forward's gemm_f32 */
        gp[i] = (GemmF32Part){.x = parts[i].w.f32,
                              .ldx = in_dim,
                              .len = parts[i].out_dim,
                              .alpha = 1.0f,
                              .beta = 0.0f,
                              .c = parts[i].out,
                              .ldc = parts[i].out_dim};
    gemm_f32_shared(true, false, true, n, in_dim, in, in_dim, gp, count);
    for (int i = 0; i < count; i++)
        bias_add_rows(parts[i].out, parts[i].bias, n, parts[i].out_dim);
}

void linear_weight_grads(const LinearGradPart *parts, int count, const float *in, int n,
                         int in_dim) {
    if (n == 0) return;
    GemmF32Part gp[GEMM_F32_MAX_PARTS] = {{0}};
    int products = 0;
    for (int i = 0; i < count; i++) {
        const LinearGradPart *p = &parts[i];
        if (!p->dw) continue;
        if (count > GEMM_F32_MAX_PARTS) { /* (more than a layer has: one by one) */
            matmul_backward(NULL, p->dw, NULL, p->dout, in, NULL, n, in_dim, p->out_dim);
            continue;
        }
        /* dW_i += dout_i^T in, as matmul_backward's gemm_f32 */
        gp[products++] = (GemmF32Part){.x = p->dout,
                                       .ldx = p->out_dim,
                                       .len = p->out_dim,
                                       .alpha = 1.0f,
                                       .beta = 1.0f,
                                       .c = p->dw,
                                       .ldc = in_dim};
    }
    if (products) gemm_f32_shared(false, true, false, in_dim, n, in, in_dim, gp, products);
    for (int i = 0; i < count; i++)
        if (parts[i].dbias) bias_grad_add(parts[i].dbias, parts[i].dout, n, parts[i].out_dim);
}

/* ---- products with bf16 weights ---- */

/* Weight rows per widened panel: about 8 MB of fp32. Wide panels keep each GEMM large (BLAS packs
 * them in cache-sized blocks itself); the widening's extra traffic is small next to the GEMM's
 * work once there are more than a few rows. */
static int panel_rows(int in_dim) {
    int rows = (1 << 21) / (in_dim > 0 ? in_dim : 1);
    return rows < 16 ? 16 : rows;
}

static void forward_panels(float *out, const float *in, const uint16_t *w, int n, int in_dim,
                           int out_dim) {
    int rows = panel_rows(in_dim);
    if (rows > out_dim) rows = out_dim;
    float *panel = xmalloc((size_t)rows * in_dim * sizeof(float));
    for (int j0 = 0; j0 < out_dim; j0 += rows) {
        int m = out_dim - j0 < rows ? out_dim - j0 : rows;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++)
            bf16_widen(panel + (size_t)r * in_dim, w + (size_t)(j0 + r) * in_dim, (size_t)in_dim);
        gemm_f32(false, true, n, m, in_dim, 1.0f, in, in_dim, panel, in_dim, 0.0f, out + j0,
                 out_dim);
    }
    free(panel);
}

void matmul_forward_bf16(float *out, const float *in, const uint16_t *w, const float *bias, int n,
                         int in_dim, int out_dim) {
    if (n == 0) return;
    if (n <= FEW_ROWS)
        forward_few_rows(out, in, (WeightRef){.bf16 = w}, n, in_dim, out_dim);
    else
        forward_panels(out, in, w, n, in_dim, out_dim);
    bias_add_rows(out, bias, n, out_dim);
}

void linear_forward(float *out, const float *in, WeightRef w, const float *bias, int n, int in_dim,
                    int out_dim) {
    if (w.nf4)
        frozen_linear_forward(out, in, w, bias, n, in_dim, out_dim);
    else if (w.bf16)
        matmul_forward_bf16(out, in, w.bf16, bias, n, in_dim, out_dim);
    else
        matmul_forward(out, in, w.f32, bias, n, in_dim, out_dim);
}
