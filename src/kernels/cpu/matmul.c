#include "kernels/cpu/kernels.h"

#include <cblas.h>

void matmul_forward(float *out, const float *in, const float *w, const float *bias, int n,
                    int in_dim, int out_dim) {
    if (n == 0) return;
    if (n == 1) /* one row (decoding one sequence): a matrix-vector product streams W once */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out_dim, in_dim, 1.0f, w, in_dim, in, 1, 0.0f, out,
                    1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out_dim, in_dim, 1.0f, in, in_dim,
                    w, in_dim, 0.0f, out, out_dim);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = out + (size_t)r * out_dim;
        for (int j = 0; j < out_dim; j++)
            row[j] += bias[j];
    }
}

void matmul_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int n, int in_dim, int out_dim) {
    if (n == 0) return;
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in_dim, out_dim, 1.0f, dout,
                    out_dim, w, in_dim, 0.0f, din, in_dim);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, n, 1.0f, dout,
                    out_dim, in, in_dim, 1.0f, dw, in_dim);
    if (!dbias) return;
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
