#include "kernels/cpu/kernels.h"

void rope_forward(float *x, const int32_t *positions, const float *cos_table,
                  const float *sin_table, int n, int n_heads, int hd, int rot) {
    int half = rot / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        size_t row = (size_t)(positions ? positions[r] : r) * half;
        const float *c = cos_table + row, *s = sin_table + row;
        for (int h = 0; h < n_heads; h++) {
            float *u = x + ((size_t)r * n_heads + h) * hd;
            for (int j = 0; j < half; j++) {
                float a = u[j], b = u[j + half];
                u[j] = a * c[j] - b * s[j];
                u[j + half] = b * c[j] + a * s[j];
            }
        }
    }
}

/* The forward rotates each pair (a, b) by +θ; the gradient goes back through -θ. */
void rope_backward(float *dx, const int32_t *positions, const float *cos_table,
                   const float *sin_table, int n, int n_heads, int hd, int rot) {
    int half = rot / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        size_t row = (size_t)(positions ? positions[r] : r) * half;
        const float *c = cos_table + row, *s = sin_table + row;
        for (int h = 0; h < n_heads; h++) {
            float *u = dx + ((size_t)r * n_heads + h) * hd;
            for (int j = 0; j < half; j++) {
                float da = u[j], db = u[j + half];
                u[j] = da * c[j] + db * s[j];
                u[j + half] = db * c[j] - da * s[j];
            }
        }
    }
}
