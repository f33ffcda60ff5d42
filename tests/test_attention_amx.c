/* Training attention under bf16 autocast, on AMX tiles (kernels/cpu/attention_amx.c) and on fp32
 * products of rounded operands (attention_rounded.c, CPUs without AMX), against
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
 *  - the same bits on one thread as on all (the products are each one thread's).
 * The rounding path's attention runs on every CPU; the AMX checks pass with a message on a CPU
 * without AMX (or with another gemm_bf16 path forced). */
#include "attention_reference.h"
#include "harness.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_train.h"
#include "kernels/cpu/autocast.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 33;

/* ---- attention ---- */

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

/* The path under test: AMX (rounds its operands as it packs them) or the rounding fp32 kernel
 * (given rounded q, k, v, dout, as backend_autocast.c gives it). */
static bool on_amx;

static void run_forward(float *out, const float *q, const float *k, const float *v,
                        const AttnSegment *segs, int n_segs, const int32_t *seq_index, int nh,
                        int nkv, int hd, int window, AttnScores sc) {
    if (on_amx)
        attention_forward_amx(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window, sc);
    else
        attention_forward_with(&attention_kernel_fp32_rounding_a, out, q, k, v, segs, n_segs,
                               seq_index, nh, nkv, hd, window, sc);
}

static void run_backward(float *dq, float *dk, float *dv, const float *g, const float *q,
                         const float *k, const float *v, const AttnSegment *segs, int n_segs,
                         const int32_t *seq_index, int n, int nh, int nkv, int hd, int window,
                         AttnScores sc) {
    if (on_amx)
        attention_backward_amx(dq, dk, dv, g, q, k, v, segs, n_segs, seq_index, n, nh, nkv, hd,
                               window, sc);
    else
        attention_backward_with(&attention_kernel_fp32_rounding_a, dq, dk, dv, g, q, k, v, segs,
                                n_segs, seq_index, n, nh, nkv, hd, window, sc);
}

/* attention_reference_layout's preference pair and a lone sequence of `last` rows (its blocks'
 * row counts and key counts around the 32-row steps of the packed P and dS). */
static void check_attention(int nh, int nkv, int hd, int window, float softcap, int last) {
    AttnSegment segs[3];
    int32_t seq_index[240 + 600];
    const int n_segs = 3, n = attention_reference_layout(segs, seq_index, last);
    AttnScores sc = {1.0f / sqrtf((float)hd), softcap};
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *v = malloc(sizeof(float) * nk), *g = malloc(sizeof(float) * nq);
    float *qr = malloc(sizeof(float) * nq), *kr = malloc(sizeof(float) * nk);
    float *vr = malloc(sizeof(float) * nk), *gr = malloc(sizeof(float) * nq);
    float *out = malloc(sizeof(float) * nq), *dq = malloc(sizeof(float) * nq);
    float *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    /* the definition with the AMX path's rounding (r) and without (u) */
    AttnReference r = {calloc(nq, 8), calloc(nq, 8), calloc(nk, 8), calloc(nk, 8)};
    AttnReference u = {calloc(nq, 8), calloc(nq, 8), calloc(nk, 8), calloc(nk, 8)};
    for (size_t i = 0; i < nq; i++)
        q[i] = 3 * harness_frand(&rng), g[i] = harness_frand(&rng);
    for (size_t i = 0; i < nk; i++)
        k[i] = 3 * harness_frand(&rng), v[i] = harness_frand(&rng);
    bf16_round_copy(qr, q, nq), bf16_round_copy(kr, k, nk);
    bf16_round_copy(vr, v, nk), bf16_round_copy(gr, g, nq);
    /* AMX gets the unrounded values (its packing must round them), the fp32 path rounded ones */
    const float *aq = on_amx ? q : qr, *ak = on_amx ? k : kr, *av = on_amx ? v : vr;
    const float *ag = on_amx ? g : gr;
    run_forward(out, aq, ak, av, segs, n_segs, seq_index, nh, nkv, hd, window, sc);
    run_backward(dq, dk, dv, ag, aq, ak, av, segs, n_segs, seq_index, n, nh, nkv, hd, window, sc);
    /* the same bits on one thread (every output element is one thread's, in a fixed order) */
    float *o1 = malloc(sizeof(float) * nq), *dq1 = malloc(sizeof(float) * nq);
    float *dk1 = malloc(sizeof(float) * nk), *dv1 = malloc(sizeof(float) * nk);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    run_forward(o1, aq, ak, av, segs, n_segs, seq_index, nh, nkv, hd, window, sc);
    run_backward(dq1, dk1, dv1, ag, aq, ak, av, segs, n_segs, seq_index, n, nh, nkv, hd, window,
                 sc);
    omp_set_num_threads(threads);
    CHECK(memcmp(o1, out, nq * 4) == 0 && memcmp(dq1, dq, nq * 4) == 0 &&
              memcmp(dk1, dk, nk * 4) == 0 && memcmp(dv1, dv, nk * 4) == 0,
          "hd %d window %d: 1 thread and %d give other bits", hd, window, threads);
    free(o1), free(dq1), free(dk1), free(dv1);
    for (int s = 0; s < n_segs; s++) {
        attention_reference(&r, qr, kr, vr, gr, &segs[s], seq_index, nh, nkv, hd, window, sc, true);
        attention_reference(&u, qr, kr, vr, gr, &segs[s], seq_index, nh, nkv, hd, window, sc,
                            false);
    }
    char what[96];
    snprintf(what, sizeof what, "%s: heads %d/%d hd %d window %d softcap %g last %d",
             on_amx ? "amx" : "fp32 rounding", nh, nkv, hd, window, softcap, last);
    compare(what, "out", out, r.out, u.out, nq);
    compare(what, "dq", dq, r.dq, u.dq, nq);
    compare(what, "dk", dk, r.dk, u.dk, nk);
    compare(what, "dv", dv, r.dv, u.dv, nk);
    free(q), free(k), free(v), free(g), free(qr), free(kr), free(vr), free(gr);
    free(out), free(dq), free(dk), free(dv);
    for (int i = 0; i < 4; i++)
        free((&r.out)[i]), free((&u.out)[i]);
}

static void check_all(void) {
    check_attention(6, 2, 64, 0, 0.0f, 77);
    check_attention(6, 2, 64, 50, 0.0f, 77);
    check_attention(4, 4, 128, 0, 0.0f, 77);
    check_attention(6, 3, 128, 37, 0.0f, 77);
    check_attention(6, 2, 64, 0, 5.0f, 77);
    check_attention(6, 3, 40, 37, 0.0f, 77); /* a head dim short of the 32-value step: padded */
    /* a one-row block; a block of 33 rows (a 32-row step and one row past it); 97 = 64 + 33 */
    check_attention(6, 2, 64, 0, 0.0f, 1);
    check_attention(6, 2, 64, 20, 5.0f, 33);
    check_attention(6, 3, 40, 0, 0.0f, 97);
    /* 600 keys: P^T's 64 x 600 is past the stack buffers (AMX's packers, the rounding copy):
     * the heap / gemm_bf16-packer path */
    check_attention(2, 1, 64, 0, 0.0f, 600);
}

int main(void) {
    on_amx = false; /* a CPU without AMX: the same values rounded, fp32 sums */
    check_all();
    if (!attention_amx_usable()) {
        printf("test_attention_amx: no AMX here (or another gemm_bf16 path forced): its checks "
               "skipped\n");
        return harness_finish("test_attention_amx");
    }
    on_amx = true;
    attention_product_sweep(attention_product_amx, "attention_product_amx", true);
    check_all();
    return harness_finish("test_attention_amx");
}
