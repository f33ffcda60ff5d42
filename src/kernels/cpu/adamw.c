/* The fp32 AdamW update and the gradient's sum of squares, for backend_cpu (backend.h). */
#include "kernels/cpu/kernels.h"

#include <math.h>

void adamw_f32_update(float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < numel; i++) {
        p[i] *= c->shrink;
        m[i] += (1.0f - c->beta1) * (g[i] - m[i]);
        v[i] = c->beta2 * v[i] + (1.0f - c->beta2) * g[i] * g[i];
        p[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_bc2_sqrt + c->eps);
    }
}

double sum_squares(const float *g, size_t n) {
    double ss = 0.0;
#pragma omp parallel for reduction(+ : ss) schedule(static)
    for (size_t i = 0; i < n; i++)
        ss += (double)g[i] * g[i];
    return ss;
}
