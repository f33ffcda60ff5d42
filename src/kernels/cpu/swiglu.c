#include "kernels/cpu/kernels.h"

#include "kernels/cpu/fast_exp.h"

/* Each expression written once: swiglu_backward_act must give the bits of swiglu_forward and
 * swiglu_backward, so the three loops share these (e = fast_expf(-g)). */
static inline float swiglu_act(float g, float u, float e) {
    return g / (1.0f + e) * u;
}

/* out = silu(g) u with silu(g) = g σ(g), silu'(g) = σ(g) (1 + g (1 - σ(g))). */
static inline void swiglu_grads(float d, float g, float u, float e, float *dg, float *du) {
    float s = 1.0f / (1.0f + e);
    *du = d * g * s;
    *dg = d * u * s * (1.0f + g * (1.0f - s));
}

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = swiglu_act(gate[i], up[i], fast_expf(-gate[i]));
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        swiglu_grads(dout[i], gate[i], up[i], fast_expf(-gate[i]), &dgate[i], &dup[i]);
}

/* swiglu_backward and swiglu_forward of the same gate and up in one pass: each element's
 * exponential once, and the act a tape that did not keep it needs, written beside the gradients
 * (dgate may alias dout: both read before either is written). */
void swiglu_backward_act(float *act, float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], e = fast_expf(-g), d = dout[i];
        act[i] = swiglu_act(g, u, e);
        swiglu_grads(d, g, u, e, &dgate[i], &dup[i]);
    }
}
