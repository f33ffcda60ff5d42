/* The autocast backend's products of one input (backend_autocast.c's linears and
 * linear_weight_grads, matmul_autocast.c's autocast_linears_forward and
 * autocast_linear_weight_grads, which pack the shared input once) against the same products one
 * by one through its linear (packed NULL) and linear_backward, bit for bit: the outputs, and dW
 * and dbias accumulated onto values already there. Parts with a bias and without, W in fp32 and
 * in bf16 (a frozen W: no dW), a part with neither gradient, odd sizes, on every gemm_bf16 path
 * this machine has and on the sgemm one. */
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { PARTS = 4 };

static float *filled(size_t n, unsigned *seed) {
    float *x = malloc((n + 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rand_r(seed) / (double)RAND_MAX - 0.5) * 2.0f;
    return x;
}

static bool same(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

static void check(const char *path, int n, int in_dim, unsigned seed) {
    const Backend *be = backend_cpu_autocast();
    static const int out_dims[PARTS] = {45, 16, 33, 70};
    float *in = filled((size_t)n * in_dim, &seed);
    float *w[PARTS], *bias[PARTS], *dout[PARTS], *out1[PARTS], *out2[PARTS];
    float *dw1[PARTS], *dw2[PARTS], *db1[PARTS], *db2[PARTS];
    uint16_t *w16 = NULL;
    LinearPart fwd[PARTS];
    LinearGradPart bwd[PARTS];
    for (int i = 0; i < PARTS; i++) {
        size_t nw = (size_t)out_dims[i] * in_dim, no = (size_t)n * out_dims[i];
        w[i] = filled(nw, &seed), bias[i] = filled(out_dims[i], &seed);
        dout[i] = filled(no, &seed);
        out1[i] = filled(no, &seed), out2[i] = filled(no, &seed);
        dw1[i] = filled(nw, &seed), dw2[i] = malloc((nw + 1) * sizeof *dw2[i]);
        db1[i] = filled(out_dims[i], &seed), db2[i] = malloc((out_dims[i] + 1) * sizeof *db2[i]);
        memcpy(dw2[i], dw1[i], nw * sizeof *dw1[i]);
        memcpy(db2[i], db1[i], out_dims[i] * sizeof *db1[i]);
    }
    /* part 1 a frozen bf16 W (no dW); part 2 no bias; part 3 neither gradient */
    w16 = malloc(((size_t)out_dims[1] * in_dim + 1) * sizeof *w16);
    for (size_t i = 0; i < (size_t)out_dims[1] * in_dim; i++)
        w16[i] = f32_to_bf16(w[1][i]);
    for (int i = 0; i < PARTS; i++) {
        WeightRef wr = i == 1 ? (WeightRef){.bf16 = w16} : (WeightRef){.f32 = w[i]};
        const float *b = i == 2 ? NULL : bias[i];
        fwd[i] = (LinearPart){.out = out2[i], .w = wr, .bias = b, .out_dim = out_dims[i]};
        bwd[i] = (LinearGradPart){.dw = i == 1 || i == 3 ? NULL : dw2[i],
                                  .dbias = i >= 2 ? NULL : db2[i],
                                  .dout = dout[i],
                                  .w = wr,
                                  .out_dim = out_dims[i]};
        be->linear(be, out1[i], in, wr, NULL, b, n, in_dim, out_dims[i]);
        be->linear_backward(be, NULL, bwd[i].dw ? dw1[i] : NULL, bwd[i].dbias ? db1[i] : NULL,
                            dout[i], in, wr, n, in_dim, out_dims[i]);
    }
    be->linears(be, fwd, PARTS, in, n, in_dim);
    be->linear_weight_grads(be, bwd, PARTS, in, n, in_dim);
    /* no part with a dW (the shared packing not made at all): part 1's dbias once more */
    be->linear_weight_grads(be, &bwd[1], 1, in, n, in_dim);
    be->linear_backward(be, NULL, NULL, db1[1], dout[1], in, fwd[1].w, n, in_dim, out_dims[1]);
    for (int i = 0; i < PARTS; i++) {
        size_t nw = (size_t)out_dims[i] * in_dim, no = (size_t)n * out_dims[i];
        CHECK(same(out1[i], out2[i], no), "%s %dx%d part %d: linears' output not linear's bits",
              path, n, in_dim, i);
        CHECK(same(dw1[i], dw2[i], nw) && same(db1[i], db2[i], out_dims[i]),
              "%s %dx%d part %d: linear_weight_grads' dW or dbias not linear_backward's bits", path,
              n, in_dim, i);
        free(w[i]), free(bias[i]), free(dout[i]), free(out1[i]), free(out2[i]);
        free(dw1[i]), free(dw2[i]), free(db1[i]), free(db2[i]);
    }
    free(w16), free(in);
}

int main(void) {
    for (int p = 0; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        const char *path = gemm_bf16_path_name((GemmBf16Path)p);
        check(path, 1, 7, 1);
        check(path, 37, 67, 2);
        check(path, 130, 96, 3);
        check(path, 70, 577, 4);
    }
    return harness_finish("test_autocast_linears");
}
