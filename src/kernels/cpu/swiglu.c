#include "kernels/cpu/kernels.h"

#include "kernels/cpu/fast_exp.h"

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + fast_expf(-g)) * up[i];
    }
}

/* out = silu(g) u with silu(g) = g σ(g), silu'(g) = σ(g) (1 + g (1 - σ(g))). */
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + fast_expf(-g)), d = dout[i];
        dup[i] = d * g * s;
        dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    }
}

/* swiglu_backward and swiglu_forward of the same gate and up in one pass: each element's
 * exponential once, and the act a tape that did not keep it needs, written beside the gradients
 * with the forward's expression (its bits). */
void swiglu_backward_act(float *act, float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], e = fast_expf(-g), s = 1.0f / (1.0f + e), d = dout[i];
        act[i] = g / (1.0f + e) * u;
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    }
}
