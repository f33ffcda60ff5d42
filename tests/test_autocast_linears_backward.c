/* The autocast backend's linears_backward (kernels/backend.h; backend_autocast.c): the backward of
 * linears of one input (q, k, v; gate, up) in one op, each dout packed once for its dX and dW
 * products, against the calls it replaces through the same table: linear_backward's din for
 * each part (into din for the first, into tmp then add for the others), then
 * linear_weight_grads over the parts. din, every dw and every dbias must be the same bits, dw
 * and dbias accumulated onto the same random values; parts with dw or dbias NULL (a frozen or
 * bias-less linear) left alone. On every gemm_bf16 path this machine has and on the sgemm
 * fallback (GEMM_BF16_NONE), at 1 and 2 threads, over shapes with rows, in_dim and out_dim odd,
 * short of, at and past 16 and 32, with 1, 2 and 3 parts. dout holds values whose bf16 rounding
 * is special (ties, NaN, infinities, a subnormal, -0). */
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 3

static float *random_values(size_t count, uint64_t *state) {
    float *x = malloc((count ? count : 1) * sizeof *x);
    for (size_t i = 0; i < count; i++)
        x[i] = (float)(harness_uniform(state) - 0.5);
    return x;
}

/* count parts of out_dims[i] outputs over one input (n x in_dim). Part 1 has no dbias and, with
 * three parts, part 2 no dw. */
static void check_case(const Backend *be, int n, int in_dim, const int *out_dims, int count,
                       const char *path, int threads, uint64_t *state) {
    omp_set_num_threads(threads);
    size_t ni = (size_t)n * in_dim;
    float *in = random_values(ni, state), *w[MAX_PARTS], *dout[MAX_PARTS];
    float *dw[2][MAX_PARTS], *db[2][MAX_PARTS];
    for (int i = 0; i < count; i++) {
        size_t nw = (size_t)out_dims[i] * in_dim, nd = (size_t)n * out_dims[i];
        w[i] = random_values(nw, state);
        dout[i] = malloc(nd * sizeof *dout[i]);
        for (size_t k = 0; k < nd; k++)
            dout[i][k] = harness_bf16_edge_value(state);
        uint64_t start = *state; /* the same accumulated-onto values for both ways */
        for (int v = 0; v < 2; v++) {
            uint64_t st = start;
            dw[v][i] = random_values(nw, &st);
            db[v][i] = random_values((size_t)out_dims[i], &st);
            *state = st;
        }
    }
    LinearGradPart parts[2][MAX_PARTS];
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < count; i++)
            parts[v][i] = (LinearGradPart){.w = {.f32 = w[i]},
                                           .out_dim = out_dims[i],
                                           .dout = dout[i],
                                           .dw = count == 3 && i == 2 ? NULL : dw[v][i],
                                           .dbias = i == 1 ? NULL : db[v][i]};
    float *din[2] = {malloc(ni * sizeof(float)), malloc(ni * sizeof(float))};
    float *tmp = malloc(ni * sizeof *tmp);
    be->linears_backward(be, parts[0], count, in, din[0], tmp, n, in_dim);
    for (int i = 0; i < count; i++) {
        be->linear_backward(be, i == 0 ? din[1] : tmp, NULL, NULL, dout[i], in, parts[1][i].w, n,
                            in_dim, out_dims[i]);
        if (i > 0) be->add(be, din[1], din[1], tmp, ni);
    }
    be->linear_weight_grads(be, parts[1], count, in, n, in_dim);
    const char *what = "%s, %d threads, %d x %d, %d parts: %s";
    CHECK(memcmp(din[0], din[1], ni * sizeof *din[0]) == 0, what, path, threads, n, in_dim, count,
          "din differs");
    for (int i = 0; i < count; i++) {
        size_t nw = (size_t)out_dims[i] * in_dim;
        CHECK(memcmp(dw[0][i], dw[1][i], nw * sizeof(float)) == 0, what, path, threads, n, in_dim,
              count, "a dw differs");
        CHECK(memcmp(db[0][i], db[1][i], (size_t)out_dims[i] * sizeof(float)) == 0, what, path,
              threads, n, in_dim, count, "a dbias differs");
    }
    for (int i = 0; i < count; i++) {
        gemm_bf16_weights_changed(w[i], (size_t)out_dims[i] * in_dim * sizeof(float));
        free(w[i]), free(dout[i]);
        for (int v = 0; v < 2; v++)
            free(dw[v][i]), free(db[v][i]);
    }
    free(din[0]), free(din[1]), free(tmp), free(in);
}

int main(void) {
    const Backend *be = backend_cpu_autocast();
    CHECK(be->linears_backward != NULL, "the autocast backend has no linears_backward");
    if (!be->linears_backward) return harness_finish("test_autocast_linears_backward");
    uint64_t state = 77;
    static const int shapes[][5] = {
        /* n, in_dim, count, out_dims */
        {1, 33, 1, 17, 0},     {37, 70, 2, 45, 1},  {17, 16, 3, 32, 16},
        {100, 64, 3, 130, 31}, {64, 97, 2, 2, 300}, {0, 32, 2, 16, 16},
    };
    int paths = 0;
    for (int p = GEMM_BF16_NONE; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        paths++;
        for (int threads = 1; threads <= 2; threads++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                int count = shapes[s][2];
                int out_dims[MAX_PARTS] = {shapes[s][3], shapes[s][4], shapes[s][3] + 5};
                check_case(be, shapes[s][0], shapes[s][1], out_dims, count,
                           gemm_bf16_path_name((GemmBf16Path)p), threads, &state);
            }
    }
    CHECK(paths >= 1, "no gemm_bf16 path checked");
    return harness_finish("test_autocast_linears_backward");
}
