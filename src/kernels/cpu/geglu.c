#include "kernels/cpu/kernels.h"

#include <math.h>

/* torch's gelu(x, approximate="tanh") (aten's GeluKernel): 0.5 x (1 + tanh(beta (x + kappa x³)))
 * with beta = sqrt(2 / pi), kappa = 0.044715. */
#define GELU_BETA  0.7978845608028654f
#define GELU_KAPPA 0.044715f

void geglu_tanh_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], inner = GELU_BETA * (x + GELU_KAPPA * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(inner)) * up[i];
    }
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t²) beta (1 + 3 kappa x²), t = tanh(inner), as aten's
 * GeluBackward with approximate="tanh". */
void geglu_tanh_backward(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], d = dout[i];
        float t = tanhf(GELU_BETA * (x + GELU_KAPPA * x * x * x));
        float gelu = 0.5f * x * (1.0f + t);
        float dgelu = 0.5f * (1.0f + t) +
                      0.5f * x * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x * x);
        dup[i] = d * gelu;
        dgate[i] = d * up[i] * dgelu;
    }
}

void softcap_inplace(float *x, size_t n, float softcap) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / softcap) * softcap;
}
