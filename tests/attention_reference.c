/* attention_reference.h's definition. */
#include "attention_reference.h"

#include "harness.h"
#include "kernels/cpu/autocast.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static double bf16(double x) {
    float f = (float)x;
    bf16_round_inplace(&f, 1);
    return f;
}

void attention_reference(const AttnReference *r, const float *q, const float *k, const float *v,
                         const float *dout, const AttnSegment *s, const int32_t *seq_index, int nh,
                         int nkv, int hd, int window, AttnScores sc, bool round_bf16) {
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
                const float *kc = k + ((size_t)key_rows[c] * nkv + kvh) * hd;
                double x = 0;
                for (int d = 0; d < hd; d++)
                    x += (double)q[qa + d] * kc[d];
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
                const float *vc = v + ((size_t)key_rows[c] * nkv + kvh) * hd;
                p[c] /= sum;
                dp[c] = 0;
                for (int d = 0; d < hd; d++)
                    dp[c] += (double)dout[qa + d] * vc[d];
                dot += p[c] * dp[c];
            }
            for (int d = 0; d < hd; d++)
                r->out[qa + d] = r->dq[qa + d] = 0;
            for (int c = 0; c <= last; c++) {
                size_t at = ((size_t)key_rows[c] * nkv + kvh) * hd;
                double ds = p[c] * (dp[c] - dot) * capd[c], pc = p[c];
                if (round_bf16) ds = bf16(ds), pc = bf16(pc);
                ds *= sc.scale;
                for (int d = 0; d < hd; d++) {
                    r->out[qa + d] += pc * v[at + d];
                    r->dv[at + d] += pc * dout[qa + d];
                    r->dq[qa + d] += ds * k[at + d];
                    r->dk[at + d] += ds * q[qa + d];
                }
            }
        }
    free(p), free(dp), free(capd), free(key_rows);
}

int attention_reference_layout(AttnSegment segs[3], int32_t *seq_index, int last) {
    segs[0] = (AttnSegment){0, 150, 0, 0};
    segs[1] = (AttnSegment){150, 90, 0, 40};
    segs[2] = (AttnSegment){240, last, 0, 0};
    for (int r = 0; r < 150; r++)
        seq_index[r] = r;
    for (int r = 150; r < 240; r++)
        seq_index[r] = 40 + (r - 150) + (r >= 170 ? 5 : 0);
    for (int r = 240; r < 240 + last; r++)
        seq_index[r] = r - 240;
    return 240 + last;
}

static float uniform(void) {
    return (float)rand() / (float)RAND_MAX * 2 - 1;
}

/* The special operand values: NaN (a payload that a truncating rounding would turn into
 * infinity), -0, two fp32 values exactly halfway between bf16 neighbours (ties to even: one
 * rounds down, one up), then +-inf and a subnormal. */
static const uint32_t special_bits[] = {0x7f800001u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                                        0xff800000u, 0x7f800000u, 0x00012345u};

/* uniform(), or about one value in 150 one of special_bits[first .. first + count) */
static float uniform_or_special(int first, int count) {
    int pick = rand() % (150 * count);
    if (pick >= count) return uniform();
    float f;
    memcpy(&f, &special_bits[first + pick], sizeof f);
    return f;
}

/* A may hold every special value. B holds no infinity and no subnormal: AMX reads bf16
 * subnormals as zero, so inf x subnormal is NaN on its tiles and inf in fp32, a difference of
 * the hardware that neither definition should pick. B of ATTN_CAUSAL_DEPTH (keys, values,
 * queries, dO) holds no NaN either: A's masked part is zeros that a kernel may skip (the fp32
 * products) or multiply (AMX, within a 32-value step), and 0 x NaN tells the two apart. */
static float draw_a(void) {
    return uniform_or_special(0, 7);
}
static float draw_b(void) {
    return uniform_or_special(0, 4);
}
static float draw_b_causal_depth(void) {
    return uniform_or_special(1, 3);
}

/* Whether got is want: NaN where want is NaN (a NaN operand, or inf - inf), the same infinity
 * where want is infinite, else within the sweep's 1e-5. */
static bool product_value_ok(float got, double want) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return harness_close(got, want, 1e-5, 1e-5);
}

/* One product on random operands (ATTN_CAUSAL_DEPTH's part 0) with row strides past their
 * widths, C poisoned with NaN where beta is 0: the count of C's elements off the definition.
 * With specials, the operands' unmasked values include uniform_or_special's. */
static int product_errors(AttnProductFn product, bool round_bf16, bool trans_a, int m, int n, int k,
                          float beta, AttnShape shape, int diag, bool specials) {
    float (*draw)(void) = specials ? draw_a : uniform;
    float (*draw_b_values)(void) = !specials                    ? uniform
                                   : shape == ATTN_CAUSAL_DEPTH ? draw_b_causal_depth
                                                                : draw_b;
    int lda = (trans_a ? m : k) + 3, ldb = n + 5, ldc = n + 2, a_rows = trans_a ? k : m;
    size_t na = (size_t)a_rows * lda, nb = (size_t)k * ldb, nc = (size_t)m * ldc;
    float *a = malloc(sizeof(float) * (na + 1)), *b = malloc(sizeof(float) * (nb + 1));
    float *ar = malloc(sizeof(float) * (na + 1)), *br = malloc(sizeof(float) * (nb + 1));
    float *c = malloc(sizeof(float) * nc), *c0 = malloc(sizeof(float) * nc);
    for (int r = 0; r < a_rows; r++)
        for (int col = 0; col < lda; col++) {
            int i = trans_a ? col : r, l = trans_a ? r : col; /* op(A)(i, l) */
            bool zero = shape == ATTN_CAUSAL_DEPTH && (trans_a ? l < i - diag : l > i + diag);
            a[(size_t)r * lda + col] = zero ? 0.0f : draw();
        }
    for (size_t i = 0; i < nb; i++)
        b[i] = draw_b_values();
    for (size_t i = 0; i < nc; i++)
        c0[i] = c[i] = beta == 0.0f ? NAN : uniform(); /* beta 0: C is never read */
    for (size_t i = 0; i < na; i++)                    /* the operands the definition multiplies */
        ar[i] = round_bf16 ? bf16((double)a[i]) : a[i];
    for (size_t i = 0; i < nb; i++)
        br[i] = round_bf16 ? bf16((double)b[i]) : b[i];
    float alpha = 0.37f;
    product(trans_a, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, shape, diag);
    int bad = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= n) { /* the padding between rows is left alone */
                bad += !(isnan(c0[at]) ? isnan(c[at]) : c[at] == c0[at]);
                continue;
            }
            double want = 0;
            for (int l = 0; l < k; l++)
                want += (double)(trans_a ? ar[(size_t)l * lda + i] : ar[(size_t)i * lda + l]) *
                        br[(size_t)l * ldb + j];
            want = alpha * want + (beta != 0.0f ? c0[at] : 0.0);
            if (shape == ATTN_CAUSAL_OUTPUT && j > i + diag)
                bad += c[at] != 0.0f; /* exactly 0 */
            else
                bad += !product_value_ok(c[at], want);
        }
    }
    free(a), free(b), free(ar), free(br), free(c), free(c0);
    return bad;
}

static void check_product_values(AttnProductFn product, const char *name, bool round_bf16,
                                 bool trans_a, int m, int n, int k, float beta, AttnShape shape,
                                 int diag, bool specials) {
    int bad = product_errors(product, round_bf16, trans_a, m, n, k, beta, shape, diag, specials);
    CHECK(bad == 0, "%s trans_a %d m %d n %d k %d beta %g shape %d diag %d%s: %d of %d differ",
          name, trans_a, m, n, k, beta, (int)shape, diag, specials ? " (special values)" : "", bad,
          m * (n + 2));
}

static void check_product(AttnProductFn product, const char *name, bool round_bf16, bool trans_a,
                          int m, int n, int k, float beta, AttnShape shape, int diag) {
    check_product_values(product, name, round_bf16, trans_a, m, n, k, beta, shape, diag, false);
}

void attention_product_sweep(AttnProductFn product, const char *name, bool round_bf16) {
    /* rows around the AVX-512 tile's 8 and the AMX blocks' 16 and 32; columns around the
     * 32-column tile, its 16-column halves and the blocks; depths around AMX's 32-value step */
    const int ms[] = {1, 7, 8, 9, 16, 17, 33, 64, 70}, ns[] = {1, 15, 16, 17, 31, 32, 33, 64, 100};
    const int ks[] = {0, 1, 5, 31, 33, 64, 97};
    for (int t = 0; t < 2; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    int m = ms[mi], n = ns[ni], k = ks[ki];
                    check_product(product, name, round_bf16, t, m, n, k, 0.0f, ATTN_DENSE, 0);
                    check_product(product, name, round_bf16, t, m, n, k, 1.0f, ATTN_DENSE, 0);
                }
    /* the causal shapes: diagonals through, before and past the tiles and blocks, at AMX's depth
     * steps' edges and inside them (a query block's first query sees diag + 1 keys: its prefix
     * and the earlier blocks) */
    const int diags[] = {-40, -9, 0, 1, 3, 8, 31, 32, 40, 200};
    const int cm[] = {1, 9, 17, 64, 70}, cn[] = {1, 17, 33, 64, 100, 130};
    for (size_t di = 0; di < sizeof diags / sizeof *diags; di++)
        for (size_t mi = 0; mi < sizeof cm / sizeof *cm; mi++)
            for (size_t ni = 0; ni < sizeof cn / sizeof *cn; ni++) {
                int d = diags[di], m = cm[mi], n = cn[ni];
                check_product(product, name, round_bf16, false, m, n, 64, 0.0f, ATTN_CAUSAL_OUTPUT,
                              d);
                check_product(product, name, round_bf16, false, m, 64, n, 0.0f, ATTN_CAUSAL_DEPTH,
                              d);
                check_product(product, name, round_bf16, true, m, 64, n, 1.0f, ATTN_CAUSAL_DEPTH,
                              d);
            }
    /* NaN, infinities, subnormals, -0 and rounding ties among the operands (the products' own
     * rounding to bf16 must give what bf16_round_inplace gives, NaN staying NaN); most outputs
     * stay finite (about one operand in 150 is special) */
    srand(7);
    for (int t = 0; t < 2; t++)
        for (int rep = 0; rep < 4; rep++) {
            check_product_values(product, name, round_bf16, t, 70, 100, 97, rep % 2 ? 1.0f : 0.0f,
                                 ATTN_DENSE, 0, true);
            check_product_values(product, name, round_bf16, t, 64, 64, 130, 0.0f, ATTN_CAUSAL_DEPTH,
                                 3 + rep, true);
        }
    for (int rep = 0; rep < 4; rep++)
        check_product_values(product, name, round_bf16, false, 70, 130, 64, 0.0f,
                             ATTN_CAUSAL_OUTPUT, 31 + rep, true);
}
