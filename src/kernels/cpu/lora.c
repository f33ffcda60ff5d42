#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <cblas.h>
#include <stdlib.h>

void lora_forward_add(float *out, const float *in, const float *A, const float *B, int n,
                      int in_dim, int out_dim, int r, float scaling) {
    if (n == 0) return;
    float *t = xmalloc((size_t)n * r * sizeof *t); /* in A^T: (N, r) */
    matmul_forward(t, in, A, NULL, n, in_dim, r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out_dim, r, scaling, t, r, B, r, 1.0f,
                out, out_dim);
    free(t);
}

/* With t = in A^T: dB += scaling dout^T t; dt = scaling dout B; dA += dt^T in; din += dt A. */
void lora_backward(float *din, float *dA, float *dB, const float *dout, const float *in,
                   const float *A, const float *B, int n, int in_dim, int out_dim, int r,
                   float scaling) {
    if (n == 0) return;
    float *t = xmalloc((size_t)n * r * sizeof *t), *dt = xmalloc((size_t)n * r * sizeof *dt);
    matmul_forward(t, in, A, NULL, n, in_dim, r);
    if (dB) /* NULL: the adapter is not being trained */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, r, n, scaling, dout, out_dim,
                    t, r, 1.0f, dB, r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, r, out_dim, scaling, dout, out_dim, B,
                r, 0.0f, dt, r);
    if (dA)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, in_dim, n, 1.0f, dt, r, in, in_dim,
                    1.0f, dA, in_dim);
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in_dim, r, 1.0f, dt, r, A, in_dim,
                    1.0f, din, in_dim);
    free(t);
    free(dt);
}
