#include "kernels/cpu/kernels.h"

#include <math.h>

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
