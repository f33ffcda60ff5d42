#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>

/* The norm with gain (offset + w): 0 for Llama's w, 1 for Gemma's (1 + w) (one fp32 add, as
 * transformers' 1.0 + weight.float()). */
static void rmsnorm_offset_forward(float *out, const float *in, const float *w, float offset, int n,
                                   int c, float eps) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *x = in + (size_t)r * c;
        float *y = out + (size_t)r * c;
        /* transformers accumulates the mean of squares in fp32; summing in double here
         * keeps us within its rounding for any width. */
        double ss = 0.0;
        for (int j = 0; j < c; j++)
            ss += (double)x[j] * x[j];
        float rstd = 1.0f / sqrtf((float)(ss / c) + eps);
        for (int j = 0; j < c; j++)
            y[j] = (offset + w[j]) * (x[j] * rstd);
    }
}

void rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps) {
    rmsnorm_offset_forward(out, in, w, 0.0f, n, c, eps);
}

void rmsnorm_1p_forward(float *out, const float *in, const float *w, int n, int c, float eps) {
    rmsnorm_offset_forward(out, in, w, 1.0f, n, c, eps);
}

static float row_rstd(const float *x, int c, float eps) {
    double ss = 0.0;
    for (int j = 0; j < c; j++)
        ss += (double)x[j] * x[j];
    return 1.0f / sqrtf((float)(ss / c) + eps);
}

/* With y = g ⊙ x r, g = offset + w, r = (mean(x²) + eps)^-1/2:
 * dx = r (g ⊙ dy) - x r³/C Σ_k g_k dy_k x_k,   dw = dg = Σ_rows dy ⊙ x r. */
static void rmsnorm_offset_backward(float *din, float *dw, const float *dout, const float *in,
                                    const float *w, float offset, int n, int c, float eps) {
    float *rstd = xmalloc((size_t)n * sizeof *rstd);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        rstd[r] = row_rstd(in + (size_t)r * c, c, eps);
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int j = 0; j < c; j++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++)
                s += dout[(size_t)r * c + j] * in[(size_t)r * c + j] * rstd[r];
            dw[j] += s;
        }
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *x = in + (size_t)r * c, *dy = dout + (size_t)r * c;
        float *dx = din + (size_t)r * c;
        double dot = 0.0;
        for (int j = 0; j < c; j++)
            dot += (double)(offset + w[j]) * dy[j] * x[j];
        float rs = rstd[r], k = (float)(dot / c) * rs * rs * rs;
        for (int j = 0; j < c; j++)
            dx[j] = rs * (offset + w[j]) * dy[j] - k * x[j];
    }
    free(rstd);
}

void rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                      int n, int c, float eps) {
    rmsnorm_offset_backward(din, dw, dout, in, w, 0.0f, n, c, eps);
}

void rmsnorm_1p_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                         int n, int c, float eps) {
    rmsnorm_offset_backward(din, dw, dout, in, w, 1.0f, n, c, eps);
}
