/* Training attention on AMX tiles under bf16 autocast (kernels/cpu/attention_amx.c) against
 * double-precision definitions computed from the same bf16-rounded operands with the same
 * rounding points:
 *  - attention_product_amx at edge shapes (rows and columns around the 16 x 16 tiles and 32 x 32
 *    blocks, depths around the 32-value step, an empty depth, a transposed A, beta 0 over NaN),
 *    with the causal parts left out: each element the double sum of bf16(A) bf16(B);
 *  - the forward and the backward (dQ, dK, dV) over a preference batch's layout (a prompt shared
 *    by two segments, odd lengths), GQA, a sliding window, soft-capping, head dims 64 and 128:
 *    the definition rounds q, k, v, dout, the probabilities P (before P·V and P^T·dO) and dS
 *    (before dS·K and dS^T·Q), nothing else. P and dS are rounded from double here and from fp32
 *    there, so a value next to a rounding boundary may round the other way: rare, so the
 *    check is on the RMS error, which must be well below what leaving P and dS unrounded would
 *    give (that is the rounding's own signal), and on the largest error, bounded by a few such
 *    flips.
 * Passes with a message on a CPU without AMX (or with another gemm_bf16 path forced). */
#include "harness.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/autocast.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float uniform(void) {
    return (float)rand() / RAND_MAX * 2 - 1;
}

static double bf16(double x) {
    float f = (float)x;
    bf16_round_inplace(&f, 1);
    return f;
}

/* ---- the product ---- */

static void check_product(bool trans_a, int m, int n, int k, float beta, AttnShape shape,
                          int diag) {
    int lda = (trans_a ? m : k) + 3, ldb = n + 5, ldc = n + 2, a_rows = trans_a ? k : m;
    float *a = malloc(sizeof(float) * ((size_t)a_rows * lda + 1));
    float *b = malloc(sizeof(float) * ((size_t)k * ldb + 1));
    float *c = malloc(sizeof(float) * (size_t)m * ldc), *c0 = malloc(sizeof(float) * m * ldc);
    for (int r = 0; r < a_rows; r++)
        for (int col = 0; col < lda; col++) {
            int i = trans_a ? col : r, l = trans_a ? r : col; /* op(A)(i, l) */
            bool zero = shape == ATTN_CAUSAL_DEPTH && (trans_a ? l < i - diag : l > i + diag);
            a[(size_t)r * lda + col] = zero ? 0.0f : uniform();
        }
    for (int i = 0; i < k * ldb; i++)
        b[i] = uniform();
    for (int i = 0; i < m * ldc; i++)
        c0[i] = c[i] = beta == 0.0f ? NAN : uniform();              /* beta 0: C is never read */
    float *ar = malloc(sizeof(float) * ((size_t)a_rows * lda + 1)); /* the rounded operands */
    float *br = malloc(sizeof(float) * ((size_t)k * ldb + 1));
    bf16_round_copy(ar, a, (size_t)a_rows * lda), bf16_round_copy(br, b, (size_t)k * ldb);
    float alpha = 0.37f;
    attention_product_amx(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape, diag);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= n) { /* the padding between rows is left alone */
                bad += !(isnan(c0[at]) ? isnan(c[at]) : c[at] == c0[at]);
                continue;
            }
            double want = 0, mag = 0;
            for (int l = 0; l < k; l++) {
                double t = (double)(trans_a ? ar[(size_t)l * lda + i] : ar[(size_t)i * lda + l]) *
                           br[(size_t)l * ldb + j];
                want += t, mag += fabs(t);
            }
            want = alpha * want + (beta != 0.0f ? c0[at] : 0.0);
            if (shape == ATTN_CAUSAL_OUTPUT && j > i + diag) {
                bad += c[at] != 0.0f; /* exactly 0 */
                continue;
            }
            /* fp32 sums of exact products: within k roundings of the magnitudes' sum */
            bad += !harness_close(c[at], want, 1e-6, 1e-6 * (k + 1) * alpha * mag + 1e-6);
        }
    CHECK(bad == 0, "trans_a %d m %d n %d k %d beta %g shape %d diag %d: %d of %d differ", trans_a,
          m, n, k, beta, (int)shape, diag, bad, m * ldc);
    free(a), free(b), free(c), free(c0), free(ar), free(br);
}

static void test_products(void) {
    const int ms[] = {1, 15, 16, 17, 33, 64, 70}, ns[] = {1, 16, 31, 32, 33, 64, 100};
    const int ks[] = {0, 1, 31, 32, 33, 64, 97};
    for (int t = 0; t < 2; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    check_product(t, ms[mi], ns[ni], ks[ki], 0.0f, ATTN_DENSE, 0);
                    check_product(t, ms[mi], ns[ni], ks[ki], 1.0f, ATTN_DENSE, 0);
                }
    /* diagonals through, before and past the blocks, at steps' edges and inside them */
    const int diags[] = {-40, -9, 0, 1, 3, 31, 32, 40, 200};
    const int cm[] = {17, 64, 70}, cn[] = {33, 64, 130};
    for (size_t di = 0; di < sizeof diags / sizeof *diags; di++)
        for (size_t mi = 0; mi < sizeof cm / sizeof *cm; mi++)
            for (size_t ni = 0; ni < sizeof cn / sizeof *cn; ni++) {
                int d = diags[di], m = cm[mi], n = cn[ni];
                check_product(false, m, n, 64, 0.0f, ATTN_CAUSAL_OUTPUT, d);
                check_product(false, m, 64, n, 0.0f, ATTN_CAUSAL_DEPTH, d);
                check_product(true, n, 64, m, 1.0f, ATTN_CAUSAL_DEPTH, d);
            }
}

/* ---- attention ---- */

/* The definition's outputs: with rounded P and dS (torch's rounding points) and without. */
typedef struct {
    double *out, *dq, *dk, *dv;
} Grads;

/* One segment's attention in double from rounded operands (qr, kr, vr, gr: bf16 values),
 * forward into r->out and u->out, gradients added into dq, dk, dv (a shared prefix's rows
 * receive from every segment). r rounds P and dS as the AMX path does; u leaves them. */
static void reference(Grads *r, Grads *u, const float *qr, const float *kr, const float *vr,
                      const float *gr, const AttnSegment *s, const int32_t *seq_index, int nh,
                      int nkv, int hd, int window, AttnScores sc) {
    int n_keys = s->prefix_len + s->len;
    int *key_rows = malloc(sizeof(int) * (size_t)n_keys);
    for (int c = 0; c < n_keys; c++)
        key_rows[c] = c < s->prefix_len ? s->prefix_start + c : s->start + c - s->prefix_len;
    double *p = malloc(sizeof(double) * n_keys), *dp = malloc(sizeof(double) * n_keys);
    double *capd = malloc(sizeof(double) * n_keys); /* d(capped) / d(scaled score) */
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < s->len; i++) {
            int row = s->start + i, kvh = h / (nh / nkv), last = s->prefix_len + i;
            size_t qa = ((size_t)row * nh + h) * hd;
            double max = -INFINITY, sum = 0, dot = 0;
            for (int c = 0; c <= last; c++) {
                bool vis = window <= 0 || seq_index[key_rows[c]] > seq_index[row] - window;
                const float *kc = kr + ((size_t)key_rows[c] * nkv + kvh) * hd;
                double x = 0;
                for (int d = 0; d < hd; d++)
                    x += (double)qr[qa + d] * kc[d];
                x *= sc.scale;
                capd[c] = 1;
                if (sc.softcap > 0) {
                    double t = tanh(x / sc.softcap);
                    x = sc.softcap * t, capd[c] = 1 - t * t;
                }
                p[c] = vis ? x : -INFINITY;
                max = fmax(max, p[c]);
            }
            for (int c = 0; c <= last; c++)
                sum += (p[c] = exp(p[c] - max));
            for (int c = 0; c <= last; c++) {
                const float *vc = vr + ((size_t)key_rows[c] * nkv + kvh) * hd;
                p[c] /= sum;
                dp[c] = 0;
                for (int d = 0; d < hd; d++)
                    dp[c] += (double)gr[qa + d] * vc[d];
                dot += p[c] * dp[c];
            }
            for (int d = 0; d < hd; d++)
                r->out[qa + d] = u->out[qa + d] = r->dq[qa + d] = u->dq[qa + d] = 0;
            for (int c = 0; c <= last; c++) {
                size_t at = ((size_t)key_rows[c] * nkv + kvh) * hd;
                double ds = p[c] * (dp[c] - dot) * capd[c];
                double pr = bf16(p[c]), dsr = bf16(ds) * sc.scale;
                ds *= sc.scale;
                for (int d = 0; d < hd; d++) {
                    r->out[qa + d] += pr * vr[at + d];
                    u->out[qa + d] += p[c] * vr[at + d];
                    r->dv[at + d] += pr * gr[qa + d];
                    u->dv[at + d] += p[c] * gr[qa + d];
                    r->dq[qa + d] += dsr * kr[at + d];
                    u->dq[qa + d] += ds * kr[at + d];
                    r->dk[at + d] += dsr * qr[qa + d];
                    u->dk[at + d] += ds * qr[qa + d];
                }
            }
        }
    free(p), free(dp), free(capd), free(key_rows);
}

static double rms_diff(const float *got, const double *want, const double *want2, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got ? got[i] : want2[i];
        e += (g - want[i]) * (g - want[i]);
    }
    return sqrt(e / (double)(n ? n : 1));
}

/* got against r (the definition with the AMX path's rounding) and u (without): the RMS error
 * below a fifth of r's distance from u, and every element within `flips` times the largest
 * |r| (a rounding that went the other way moves an element by about 2^-8 of a term). */
static void compare(const char *what, const char *name, const float *got, const double *r,
                    const double *u, size_t n) {
    double big = 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(r[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - r[i]) / big);
    double e = rms_diff(got, r, NULL, n), e_u = rms_diff(NULL, r, u, n);
    printf("%s %s: rms error %.3g (unrounded P/dS would be %.3g), worst / largest %.3g\n", what,
           name, e, e_u, worst);
    CHECK(e < 0.2 * e_u, "%s %s: rms error %.3g not well below the rounding's own %.3g", what, name,
          e, e_u);
    CHECK(worst < 4e-3, "%s %s: an element off by %.3g of the largest", what, name, worst);
}

/* A preference pair's layout, twice over: chosen = prompt (40) + response (110) in one segment,
 * rejected = 90 rows continuing the same prompt (its seq_index skipping 5, a dropped padding
 * hole); then a lone 77-row sequence. */
static void check_attention(int nh, int nkv, int hd, int window, float softcap) {
    const AttnSegment segs[] = {{0, 150, 0, 0}, {150, 90, 0, 40}, {240, 77, 0, 0}};
    const int n_segs = 3, n = 317;
    int32_t seq_index[317];
    for (int r = 0; r < 150; r++)
        seq_index[r] = r;
    for (int r = 150; r < 240; r++)
        seq_index[r] = 40 + (r - 150) + (r >= 170 ? 5 : 0);
    for (int r = 240; r < n; r++)
        seq_index[r] = r - 240;
    AttnScores sc = {1.0f / sqrtf((float)hd), softcap};
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *v = malloc(sizeof(float) * nk), *g = malloc(sizeof(float) * nq);
    float *qr = malloc(sizeof(float) * nq), *kr = malloc(sizeof(float) * nk);
    float *vr = malloc(sizeof(float) * nk), *gr = malloc(sizeof(float) * nq);
    float *out = malloc(sizeof(float) * nq), *dq = malloc(sizeof(float) * nq);
    float *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    Grads r = {calloc(nq, 8), calloc(nq, 8), calloc(nk, 8), calloc(nk, 8)};
    Grads u = {calloc(nq, 8), calloc(nq, 8), calloc(nk, 8), calloc(nk, 8)};
    for (size_t i = 0; i < nq; i++)
        q[i] = 3 * uniform(), g[i] = uniform();
    for (size_t i = 0; i < nk; i++)
        k[i] = 3 * uniform(), v[i] = uniform();
    bf16_round_copy(qr, q, nq), bf16_round_copy(kr, k, nk);
    bf16_round_copy(vr, v, nk), bf16_round_copy(gr, g, nq);
    /* the kernel gets the unrounded values: its packing must round them */
    attention_forward_amx(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window, sc);
    attention_backward_amx(dq, dk, dv, g, q, k, v, segs, n_segs, seq_index, n, nh, nkv, hd, window,
                           sc);
    for (int s = 0; s < n_segs; s++)
        reference(&r, &u, qr, kr, vr, gr, &segs[s], seq_index, nh, nkv, hd, window, sc);
    char what[96];
    snprintf(what, sizeof what, "heads %d/%d hd %d window %d softcap %g", nh, nkv, hd, window,
             softcap);
    compare(what, "out", out, r.out, u.out, nq);
    compare(what, "dq", dq, r.dq, u.dq, nq);
    compare(what, "dk", dk, r.dk, u.dk, nk);
    compare(what, "dv", dv, r.dv, u.dv, nk);
    free(q), free(k), free(v), free(g), free(qr), free(kr), free(vr), free(gr);
    free(out), free(dq), free(dk), free(dv);
    for (int i = 0; i < 4; i++)
        free((&r.out)[i]), free((&u.out)[i]);
}

int main(void) {
    if (!attention_amx_usable()) {
        printf("test_attention_amx: no AMX here (or another gemm_bf16 path forced): skipped\n");
        return harness_finish("test_attention_amx");
    }
    srand(33);
    test_products();
    check_attention(6, 2, 64, 0, 0.0f);
    check_attention(6, 2, 64, 50, 0.0f);
    check_attention(4, 4, 128, 0, 0.0f);
    check_attention(6, 3, 128, 37, 0.0f);
    check_attention(6, 2, 64, 0, 5.0f);
    return harness_finish("test_attention_amx");
}
