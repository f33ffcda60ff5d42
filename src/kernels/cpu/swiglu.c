#include "kernels/cpu/kernels.h"

#include "kernels/cpu/fast_exp.h"

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + fast_expf(-g)) * up[i];
    }
}
