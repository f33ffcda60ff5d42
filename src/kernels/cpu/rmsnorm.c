#include "kernels/cpu/kernels.h"

#include <math.h>

void rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps) {
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
            y[j] = w[j] * (x[j] * rstd);
    }
}
