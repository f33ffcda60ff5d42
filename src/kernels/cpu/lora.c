#include "kernels/cpu/kernels.h"
#include "kernels/cpu/gemm_f32.h"

#include "common/error.h"
#include "common/rng.h"

#include <stdlib.h>
#include <string.h>

/* Keep-scale of element i: 1/(1-p) when kept, 0 when dropped. A stateless mix of key and index
 * (SplitMix64's value at step i of the stream from key), so that parallel threads need no shared
 * generator and the backward regenerates the same mask. */
static float dropout_scale(uint64_t key, size_t i, float p) {
    double u = rng_unit_double(rng_mix64(key + (uint64_t)i * RNG_GOLDEN_GAMMA));
    return u < p ? 0.0f : 1.0f / (1.0f - p);
}

/* drop(in), or in itself when there is no dropout (then *owned is NULL). */
static const float *dropped_input(const float *in, size_t count, float p, uint64_t key,
                                  float **owned) {
    *owned = NULL;
    if (p <= 0) return in;
    float *x = xmalloc(count * sizeof *x);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++)
        x[i] = in[i] * dropout_scale(key, i, p);
    *owned = x;
    return x;
}

void lora_forward_add(float *out, const float *in, const float *A, const float *B, int n,
                      int in_dim, int out_dim, int r, float scaling, float dropout_p,
                      uint64_t dropout_key) {
    if (n == 0) return;
    float *owned;
    const float *x = dropped_input(in, (size_t)n * in_dim, dropout_p, dropout_key, &owned);
    float *t = xmalloc((size_t)n * r * sizeof *t); /* drop(in) A^T: (N, r) */
    matmul_forward(t, x, A, NULL, n, in_dim, r);
    gemm_f32(false, true, n, out_dim, r, scaling, t, r, B, r, 1.0f, out, out_dim);
    free(t);
    free(owned);
}

/* With x = drop(in), t = x A^T: dB += scaling dout^T t; dt = scaling dout B; dA += dt^T x;
 * din += drop'(dt A), the same mask and scale applied to the input gradient. */
void lora_backward(float *din, float *dA, float *dB, const float *dout, const float *in,
                   const float *A, const float *B, int n, int in_dim, int out_dim, int r,
                   float scaling, float dropout_p, uint64_t dropout_key) {
    if (n == 0) return;
    float *owned;
    const float *x = dropped_input(in, (size_t)n * in_dim, dropout_p, dropout_key, &owned);
    float *t = xmalloc((size_t)n * r * sizeof *t), *dt = xmalloc((size_t)n * r * sizeof *dt);
    matmul_forward(t, x, A, NULL, n, in_dim, r);
    if (dB) /* NULL: the adapter is not being trained */
        gemm_f32(true, false, out_dim, r, n, scaling, dout, out_dim, t, r, 1.0f, dB, r);
    gemm_f32(false, false, n, r, out_dim, scaling, dout, out_dim, B, r, 0.0f, dt, r);
    if (dA) gemm_f32(true, false, r, in_dim, n, 1.0f, dt, r, x, in_dim, 1.0f, dA, in_dim);
    if (din && dropout_p <= 0) {
        gemm_f32(false, false, n, in_dim, r, 1.0f, dt, r, A, in_dim, 1.0f, din, in_dim);
    } else if (din) {
        float *dx = xmalloc((size_t)n * in_dim * sizeof *dx);
        gemm_f32(false, false, n, in_dim, r, 1.0f, dt, r, A, in_dim, 0.0f, dx, in_dim);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < (size_t)n * in_dim; i++)
            din[i] += dx[i] * dropout_scale(dropout_key, i, dropout_p);
        free(dx);
    }
    free(t);
    free(dt);
    free(owned);
}
