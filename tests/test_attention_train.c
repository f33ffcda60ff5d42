/* Training attention (kernels/cpu/attention.c) and its products (attention_products.c) against
 * double-precision definitions (attention_reference.h): the products at edge shapes (rows around
 * the 8-row tile, columns around the 32-column tile and its 16-column halves, an empty depth, a
 * transposed A, beta 0 over NaN), also with the causal parts left out, then the forward and the
 * backward (dQ, dK, dV) over a preference batch's layout at head dims 64 (SmolLM2's and Qwen2.5's:
 * whole tiles) and 24 (masked tails), GQA, a prompt shared by two segments, with and without a
 * sliding window. test_kernel_grads checks the backward by finite differences at a tiny head dim;
 * this checks it at the shapes that run. */
#include "attention_reference.h"
#include "harness.h"
#include "kernels/cpu/attention_products.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static float uniform(void) {
    return (float)rand() / (float)RAND_MAX * 2 - 1;
}

/* |got - want| <= tol * (the largest |want|): gradients are sums with cancellation, so their
 * error scales with the array's magnitude, not each element's. Returns the worst ratio. */
static double worst_error(const float *got, const double *want, size_t n) {
    double scale = 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - want[i]) / scale);
    return worst;
}

/* attention_reference_layout's preference pair and a lone 20-row sequence. */
static void check_attention(int nh, int nkv, int hd, int window) {
    AttnSegment segs[3];
    int32_t seq_index[260];
    const int n_segs = 3, n = attention_reference_layout(segs, seq_index, 20);
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *v = malloc(sizeof(float) * nk), *dout = malloc(sizeof(float) * nq);
    float *out = malloc(sizeof(float) * nq), *dq = malloc(sizeof(float) * nq);
    float *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    double *want = calloc(nq, sizeof(double)), *want_dq = calloc(nq, sizeof(double));
    double *want_dk = calloc(nk, sizeof(double)), *want_dv = calloc(nk, sizeof(double));
    for (size_t i = 0; i < nq; i++)
        q[i] = 2 * uniform(), dout[i] = uniform();
    for (size_t i = 0; i < nk; i++)
        k[i] = 2 * uniform(), v[i] = uniform();
    attention_forward(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window);
    attention_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n, nh, nkv, hd, window);
    AttnReference ref = {want, want_dq, want_dk, want_dv};
    for (int s = 0; s < n_segs; s++)
        attention_reference(&ref, q, k, v, dout, &segs[s], seq_index, nh, nkv, hd, window,
                            (AttnScores){1.0f / sqrtf((float)hd), 0.0f}, false);
    int bad = 0;
    for (size_t i = 0; i < nq; i++)
        bad += !harness_close(out[i], want[i], 1e-5, 1e-6);
    CHECK(bad == 0, "hd %d window %d: %d of %zu outputs differ from the definition", hd, window,
          bad, nq);
    double e_q = worst_error(dq, want_dq, nq), e_k = worst_error(dk, want_dk, nk);
    double e_v = worst_error(dv, want_dv, nk);
    printf("hd %d window %d: worst gradient error / largest gradient: dq %.2g dk %.2g dv %.2g\n",
           hd, window, e_q, e_k, e_v);
    CHECK(e_q < 2e-6 && e_k < 2e-6 && e_v < 2e-6,
          "hd %d window %d: gradients off the definition (dq %.3g dk %.3g dv %.3g)", hd, window,
          e_q, e_k, e_v);
    free(q), free(k), free(v), free(dout), free(out), free(dq), free(dk), free(dv);
    free(want), free(want_dq), free(want_dk), free(want_dv);
}

int main(void) {
    srand(33);
    /* the products are single-threaded on the tile; gemm_f32's threads would only wait on
     * each other at these sizes */
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    attention_product_sweep(attention_product, "attention_product", false);
    /* the path other CPUs run */
    attention_product_sweep(attention_product_fallback, "attention_product_fallback", false);
    omp_set_num_threads(threads);
    check_attention(6, 2, 64, 0);
    check_attention(6, 2, 64, 50);
    check_attention(6, 3, 24, 0);
    check_attention(6, 3, 24, 37);
    return harness_finish("test_attention_train");
}
