/* Training attention (kernels/cpu/attention.c) and its products (attention_products.c) against
 * double-precision definitions: the products at edge shapes (rows around the 8-row tile,
 * columns around the 32-column tile and its 16-column halves, an empty depth, a transposed A,
 * beta 0 over NaN), also with the causal parts left out, then the forward and the backward (dQ, dK,
 * dV) over a preference batch's layout at head dims 64 (SmolLM2's and Qwen2.5's: whole tiles) and
 * 24 (masked tails), GQA, a prompt shared by two segments, with and without a sliding window.
 * test_kernel_grads checks the backward by finite differences at a tiny head dim; this checks it at
 * the shapes that run. */
#include "harness.h"
#include "kernels/cpu/attention_products.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static float uniform(void) {
    return (float)rand() / RAND_MAX * 2 - 1;
}

/* Whether op(A)(i, l) lies in ATTN_CAUSAL_DEPTH's zero part. */
static bool depth_zero(bool trans_a, int i, int l, int diag) {
    return trans_a ? l < i - diag : l > i + diag;
}

typedef void (*ProductFn)(bool trans_a, int m, int n, int k, float alpha, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c, int ldc, AttnShape shape,
                          int diag);

/* Both paths: attention_product (the AVX-512 tile where cpuid has it) and the fallback other
 * CPUs run. */
static const ProductFn products[] = {attention_product, attention_product_fallback};
static const char *const product_names[] = {"attention_product", "attention_product_fallback"};

static void check_one_product(int path, bool trans_a, int m, int n, int k, float beta,
                              AttnShape shape, int diag) {
    int lda = (trans_a ? m : k) + 3, ldb = n + 5, ldc = n + 2;
    int a_rows = trans_a ? k : m;
    float *a = malloc(sizeof(float) * ((size_t)a_rows * lda + 1));
    float *b = malloc(sizeof(float) * ((size_t)k * ldb + 1));
    float *c = malloc(sizeof(float) * (size_t)m * ldc),
          *c0 = malloc(sizeof(float) * (size_t)m * ldc);
    for (int r = 0; r < a_rows; r++)
        for (int col = 0; col < lda; col++) {
            int i = trans_a ? col : r, l = trans_a ? r : col; /* op(A)(i, l) */
            bool zero = shape == ATTN_CAUSAL_DEPTH && depth_zero(trans_a, i, l, diag);
            a[(size_t)r * lda + col] = zero ? 0.0f : uniform();
        }
    for (int i = 0; i < k * ldb; i++)
        b[i] = uniform();
    for (int i = 0; i < m * ldc; i++)
        c0[i] = c[i] = beta == 0.0f ? NAN : uniform(); /* beta 0: C is never read */
    float alpha = 0.37f;
    products[path](trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape, diag);
    int bad = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            if (j >= n) { /* the padding between rows is left alone */
                bad += !(isnan(c0[i * ldc + j]) ? isnan(c[i * ldc + j])
                                                : c[i * ldc + j] == c0[i * ldc + j]);
                continue;
            }
            double want = 0;
            for (int l = 0; l < k; l++)
                want += (double)(trans_a ? a[l * lda + i] : a[i * lda + l]) * b[l * ldb + j];
            want = alpha * want + (beta != 0.0f ? c0[i * ldc + j] : 0.0);
            if (shape == ATTN_CAUSAL_OUTPUT && j > i + diag) want = 0;
            bad += !harness_close(c[i * ldc + j], want, 1e-5, 1e-5);
        }
    }
    CHECK(bad == 0, "%s trans_a %d m %d n %d k %d beta %g shape %d diag %d: %d of %d differ",
          product_names[path], trans_a, m, n, k, beta, (int)shape, diag, bad, m * ldc);
    free(a), free(b), free(c), free(c0);
}

static void check_product(bool trans_a, int m, int n, int k, float beta, AttnShape shape,
                          int diag) {
    for (int path = 0; path < 2; path++)
        check_one_product(path, trans_a, m, n, k, beta, shape, diag);
}

static void test_products(void) {
    const int ms[] = {1, 7, 8, 9, 64, 70}, ns[] = {1, 15, 16, 17, 31, 32, 33, 64, 100};
    const int ks[] = {0, 1, 5, 64};
    for (int t = 0; t < 2; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    check_product(t, ms[mi], ns[ni], ks[ki], 0.0f, ATTN_DENSE, 0);
                    check_product(t, ms[mi], ns[ni], ks[ki], 1.0f, ATTN_DENSE, 0);
                }
    /* the causal shapes: diagonals through, before and past the tiles (a query block's first
     * query sees diag + 1 keys: its prefix and the earlier blocks) */
    const int diags[] = {-9, 0, 3, 8, 31, 40, 200};
    for (size_t di = 0; di < sizeof diags / sizeof *diags; di++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int d = diags[di], m = ms[mi], n = ns[ni];
                check_product(false, m, n, 64, 0.0f, ATTN_CAUSAL_OUTPUT, d);
                check_product(false, m, 64, n, 0.0f, ATTN_CAUSAL_DEPTH, d);
                check_product(true, m, 64, n, 1.0f, ATTN_CAUSAL_DEPTH, d);
            }
}

/* One segment's attention from the definition, in double: forward into out, and with dout the
 * gradients added into dq, dk, dv (a shared prefix's rows receive from every segment). */
static void attention_reference(double *out, double *dq, double *dk, double *dv, const float *q,
                                const float *k, const float *v, const float *dout,
                                const AttnSegment *s, const int32_t *seq_index, int nh, int nkv,
                                int hd, int window) {
    int n_keys = s->prefix_len + s->len;
    double scale = 1.0 / sqrt((double)hd);
    int *key_rows = malloc(sizeof(int) * (size_t)n_keys);
    for (int c = 0; c < n_keys; c++)
        key_rows[c] = c < s->prefix_len ? s->prefix_start + c : s->start + c - s->prefix_len;
    double *p = malloc(sizeof(double) * (size_t)n_keys), *dp = malloc(sizeof(double) * n_keys);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < s->len; i++) {
            int row = s->start + i, kvh = h / (nh / nkv), last = s->prefix_len + i;
            const float *qi = q + ((size_t)row * nh + h) * hd;
            const float *gi = dout + ((size_t)row * nh + h) * hd;
            double max = -INFINITY, sum = 0, dot = 0;
            for (int c = 0; c <= last; c++) {
                bool vis = window <= 0 || seq_index[key_rows[c]] > seq_index[row] - window;
                const float *kc = k + ((size_t)key_rows[c] * nkv + kvh) * hd;
                double sc = 0;
                for (int d = 0; d < hd; d++)
                    sc += (double)qi[d] * kc[d];
                p[c] = vis ? sc * scale : -INFINITY;
                max = fmax(max, p[c]);
            }
            for (int c = 0; c <= last; c++)
                sum += (p[c] = exp(p[c] - max));
            for (int c = 0; c <= last; c++) {
                const float *vc = v + ((size_t)key_rows[c] * nkv + kvh) * hd;
                p[c] /= sum;
                dp[c] = 0;
                for (int d = 0; d < hd; d++)
                    dp[c] += (double)gi[d] * vc[d];
                dot += p[c] * dp[c];
            }
            double *o = out + ((size_t)row * nh + h) * hd, *dqi = dq + ((size_t)row * nh + h) * hd;
            for (int d = 0; d < hd; d++)
                o[d] = dqi[d] = 0;
            for (int c = 0; c <= last; c++) {
                size_t at = ((size_t)key_rows[c] * nkv + kvh) * hd;
                double ds = p[c] * (dp[c] - dot) * scale;
                for (int d = 0; d < hd; d++) {
                    o[d] += p[c] * v[at + d];
                    dv[at + d] += p[c] * gi[d];
                    dqi[d] += ds * k[at + d];
                    dk[at + d] += ds * qi[d];
                }
            }
        }
    free(p), free(dp), free(key_rows);
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

/* A preference pair's layout, twice over: chosen = prompt (40) + response (110) in one segment,
 * rejected = 90 rows continuing the same prompt (its seq_index skipping 5, a dropped padding
 * hole); then a lone 20-row sequence. */
static void check_attention(int nh, int nkv, int hd, int window) {
    const AttnSegment segs[] = {{0, 150, 0, 0}, {150, 90, 0, 40}, {240, 20, 0, 0}};
    const int n_segs = 3, n = 260;
    int32_t seq_index[260];
    for (int r = 0; r < 150; r++)
        seq_index[r] = r;
    for (int r = 150; r < 240; r++)
        seq_index[r] = 40 + (r - 150) + (r >= 170 ? 5 : 0);
    for (int r = 240; r < n; r++)
        seq_index[r] = r - 240;
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
    for (int s = 0; s < n_segs; s++)
        attention_reference(want, want_dq, want_dk, want_dv, q, k, v, dout, &segs[s], seq_index, nh,
                            nkv, hd, window);
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
    test_products();
    omp_set_num_threads(threads);
    check_attention(6, 2, 64, 0);
    check_attention(6, 2, 64, 50);
    check_attention(6, 3, 24, 0);
    check_attention(6, 3, 24, 37);
    return harness_finish("test_attention_train");
}
