#include "kernels/cpu/kernels.h"

#include <cblas.h>

void matmul_forward(float *out, const float *in, const float *w, const float *bias, int n,
                    int in_dim, int out_dim) {
    if (n == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out_dim, in_dim, 1.0f, in, in_dim, w,
                in_dim, 0.0f, out, out_dim);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *row = out + (size_t)r * out_dim;
        for (int j = 0; j < out_dim; j++)
            row[j] += bias[j];
    }
}
