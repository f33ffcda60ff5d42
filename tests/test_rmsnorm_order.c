/* RMSNorm's summation order (kernels/cpu/rmsnorm.c): the kernels sum several rows side by side
 * and dw's columns as vector lanes, for speed; each sum must still be the plain one, every bit:
 * a row's squares and its dot product added in double one column after another, dw's column
 * over the rows in row order in fp32. The reference below is that plain loop, one row at a time,
 * compared with memcmp on ragged shapes (row counts not a multiple of the group, widths not a
 * multiple of the column block), both gains (w and 1 + w), din apart from dout and over it. */
#include "harness.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void ref_forward(float *out, const float *in, const float *w, float offset, int n, int c,
                        float eps) {
    for (int r = 0; r < n; r++) {
        const float *x = in + (size_t)r * c;
        double ss = 0.0;
        for (int j = 0; j < c; j++)
            ss += (double)x[j] * x[j];
        float rstd = 1.0f / sqrtf((float)(ss / c) + eps);
        for (int j = 0; j < c; j++)
            out[(size_t)r * c + j] = (offset + w[j]) * (x[j] * rstd);
    }
}

static void ref_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                         float offset, int n, int c, float eps) {
    float *rstd = malloc((size_t)n * sizeof *rstd);
    for (int r = 0; r < n; r++) {
        double ss = 0.0;
        for (int j = 0; j < c; j++)
            ss += (double)in[(size_t)r * c + j] * in[(size_t)r * c + j];
        rstd[r] = 1.0f / sqrtf((float)(ss / c) + eps);
    }
    for (int j = 0; j < c; j++) {
        float s = 0.0f;
        for (int r = 0; r < n; r++)
            s += dout[(size_t)r * c + j] * in[(size_t)r * c + j] * rstd[r];
        dw[j] += s;
    }
    for (int r = 0; r < n; r++) {
        const float *x = in + (size_t)r * c, *dy = dout + (size_t)r * c;
        double dot = 0.0;
        for (int j = 0; j < c; j++)
            dot += (double)(offset + w[j]) * dy[j] * x[j];
        float rs = rstd[r], k = (float)(dot / c) * rs * rs * rs;
        for (int j = 0; j < c; j++)
            din[(size_t)r * c + j] = rs * (offset + w[j]) * dy[j] - k * x[j];
    }
    free(rstd);
}

static float *filled(size_t n, double phase, double scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * sin(1.7 * (double)i + phase) * (1.0 + 0.01 * (double)(i % 101)));
    return x;
}

static void check_shape(int n, int c, bool one_plus, bool in_place) {
    float eps = 1e-5f, offset = one_plus ? 1.0f : 0.0f;
    size_t cells = (size_t)n * c;
    float *in = filled(cells, 0.3, 2.0), *w = filled((size_t)c, 1.1, 1.0);
    float *dout = filled(cells, 2.9, 0.5);
    float *got = malloc(cells * sizeof *got), *want = malloc(cells * sizeof *want);
    if (one_plus)
        rmsnorm_1p_forward(got, in, w, n, c, eps);
    else
        rmsnorm_forward(got, in, w, n, c, eps);
    ref_forward(want, in, w, offset, n, c, eps);
    CHECK(memcmp(got, want, cells * sizeof *got) == 0,
          "forward n=%d c=%d%s: not the plain sums' bits", n, c, one_plus ? " (1 + w)" : "");

    float *dw_got = filled((size_t)c, 0.7, 0.1), *dw_want = malloc((size_t)c * sizeof *dw_want);
    memcpy(dw_want, dw_got, (size_t)c * sizeof *dw_got); /* dw accumulates */
    float *dy = malloc(cells * sizeof *dy);
    memcpy(dy, dout, cells * sizeof *dy);
    float *din = in_place ? dy : got; /* din over dout, as the decoder's backward passes it */
    if (one_plus)
        rmsnorm_1p_backward(din, dw_got, dy, in, w, n, c, eps);
    else
        rmsnorm_backward(din, dw_got, dy, in, w, n, c, eps);
    ref_backward(want, dw_want, dout, in, w, offset, n, c, eps);
    CHECK(memcmp(din, want, cells * sizeof *din) == 0, "backward din n=%d c=%d%s%s: differs", n, c,
          one_plus ? " (1 + w)" : "", in_place ? " in place" : "");
    CHECK(memcmp(dw_got, dw_want, (size_t)c * sizeof *dw_got) == 0,
          "backward dw n=%d c=%d%s%s: differs", n, c, one_plus ? " (1 + w)" : "",
          in_place ? " in place" : "");
    free(in), free(w), free(dout), free(got), free(want), free(dw_got), free(dw_want), free(dy);
}

int main(void) {
    int shapes[][2] = {{1, 7}, {13, 37}, {29, 576}, {64, 64}, {8, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int one_plus = 0; one_plus < 2; one_plus++)
            for (int in_place = 0; in_place < 2; in_place++)
                check_shape(shapes[s][0], shapes[s][1], one_plus, in_place);
    return harness_finish("test_rmsnorm_order");
}
