/* CPU kernels against direct double-precision definitions (the model-level parity tests
 * check them against transformers; these pin down the edge cases). */
#include "common/float16.h"
#include "harness.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/fused_logprob_rows.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_fast_exp(void) {
    double worst = 0;
    for (float x = -87.0f; x < 88.5f; x += 0.001953125f) {
        double want = exp((double)x), got = fast_expf(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 3e-7, "fast_expf worst relative error %.3g", worst);
    printf("fast_expf: worst relative error %.3g on [-87, 88.5]\n", worst);
    CHECK(fast_expf(-1000.0f) < 2e-38f, "very negative inputs give ~0");
    CHECK(fast_expf(1000.0f) > 3e38f, "very large inputs give ~FLT_MAX");
    CHECK(fast_expf(0.0f) == 1.0f, "exp(0) = 1");
}

/* log-softmax over a vocabulary wider than one tile, rows more than one tile, extreme logits. */
static void test_fused_logprob(void) {
    const int n = 600, h = 8, vocab = 9000;
    float *hidden = malloc(sizeof(float) * n * h), *w = malloc(sizeof(float) * vocab * h);
    float *logp = malloc(sizeof(float) * n);
    int32_t *target = malloc(sizeof(int32_t) * n);
    srand(7);
    for (int i = 0; i < n * h; i++)
        hidden[i] = (float)rand() / (float)RAND_MAX * 4 - 2;
    for (int i = 0; i < vocab * h; i++)
        w[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    for (int j = 0; j < h; j++)
        w[(size_t)5000 * h + j] = 30.0f * hidden[j]; /* a dominant logit for row 0 */
    for (int r = 0; r < n; r++)
        target[r] = (r * 7919) % vocab;
    target[0] = 5000;
    LogitStats *stats = malloc(sizeof *stats * n);
    fused_logprob_forward_stats(logp, stats, hidden, target, w, n, h, vocab);
    float *plain = malloc(sizeof(float) * n);
    fused_logprob_forward(plain, hidden, target, w, n, h, vocab);
    int bad = 0, bad_stats = 0, same = 0;
    for (int r = 0; r < n; r++)
        same += plain[r] == logp[r];
    CHECK(same == n, "the statistics do not change the log-probs (%d of %d equal)", same, n);
    for (int r = 0; r < n; r++) {
        double max = -INFINITY, *z = malloc(sizeof(double) * vocab);
        for (int v = 0; v < vocab; v++) {
            double s = 0;
            for (int j = 0; j < h; j++)
                s += (double)hidden[r * h + j] * w[(size_t)v * h + j];
            z[v] = s;
            max = fmax(max, s);
        }
        double sum = 0;
        for (int v = 0; v < vocab; v++)
            sum += exp(z[v] - max);
        double want = z[target[r]] - max - log(sum);
        if (!harness_close(logp[r], want, 1e-5, 1e-5)) bad++;
        double mean = 0, entropy = 0;
        int argmax = 0;
        for (int v = 0; v < vocab; v++) {
            double p = exp(z[v] - max) / sum;
            mean += z[v] / vocab;
            entropy -= p > 0 ? p * log(p) : 0;
            if (z[v] > z[argmax]) argmax = v;
        }
        if (!harness_close(stats[r].mean_logit, mean, 1e-4, 1e-5) ||
            !harness_close(stats[r].entropy, entropy, 1e-4, 1e-6) || stats[r].argmax != argmax)
            bad_stats++;
        free(z);
    }
    CHECK(bad == 0, "%d of %d rows differ from the double-precision log-softmax", bad, n);
    CHECK(bad_stats == 0, "%d of %d rows: mean logit, entropy or argmax differ", bad_stats, n);
    CHECK(stats[0].argmax == 5000, "the dominant logit is the argmax");
    free(stats);
    free(plain);
    free(hidden);
    free(w);
    free(logp);
    free(target);
}

/* Attention straight from the definition (hf-formats.md §3.2), in double, over one segment:
 * the keys its query row i sees are the prefix rows, then its own rows up to i, those within the
 * window by seq_index. */
static void attention_reference(double *out, const float *q, const float *k, const float *v,
                                const AttnSegment *s, const int32_t *seq_index, int nh, int nkv,
                                int hd, int window) {
    int n_keys = s->prefix_len + s->len;
    int *key_rows = malloc((size_t)n_keys * sizeof *key_rows);
    for (int c = 0; c < n_keys; c++)
        key_rows[c] = c < s->prefix_len ? s->prefix_start + c : s->start + c - s->prefix_len;
    double *w = malloc((size_t)n_keys * sizeof *w);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < s->len; i++) {
            int row = s->start + i, kvh = h / (nh / nkv), last = s->prefix_len + i;
            double *o = out + ((size_t)row * nh + h) * hd, max = -INFINITY, sum = 0;
            for (int c = 0; c <= last; c++) {
                bool vis = window <= 0 || seq_index[key_rows[c]] > seq_index[row] - window;
                double sc = 0;
                for (int d = 0; d < hd; d++)
                    sc += (double)q[((size_t)row * nh + h) * hd + d] *
                          k[((size_t)key_rows[c] * nkv + kvh) * hd + d];
                w[c] = vis ? sc / sqrt((double)hd) : -INFINITY;
                max = fmax(max, w[c]);
            }
            for (int c = 0; c <= last; c++)
                sum += (w[c] = exp(w[c] - max));
            for (int d = 0; d < hd; d++) {
                o[d] = 0;
                for (int c = 0; c <= last; c++)
                    o[d] += w[c] / sum * v[((size_t)key_rows[c] * nkv + kvh) * hd + d];
            }
        }
    free(w);
    free(key_rows);
}

/* Segments as a packed batch lays them out: a 150-row sequence; a second one that continues the
 * first 70 rows of the first (a shared prompt) with 90 rows of its own, its seq_index skipping 5
 * (padding dropped); a third continuing the same prefix with 3 rows; a lone short one. Several
 * query blocks, GQA, with and without a window. */
static void test_attention(void) {
    const int nh = 4, nkv = 2, hd = 16;
    const AttnSegment segs[] = {{0, 150, 0, 0}, {150, 90, 0, 70}, {240, 3, 0, 70}, {243, 20, 0, 0}};
    const int n_segs = 4, N = 263;
    int32_t seq_index[263];
    for (int r = 0; r < 150; r++)
        seq_index[r] = r;
    for (int r = 150; r < 240; r++)
        seq_index[r] = 70 + (r - 150) + (r >= 170 ? 5 : 0);
    for (int r = 240; r < 243; r++)
        seq_index[r] = 70 + (r - 240);
    for (int r = 243; r < N; r++)
        seq_index[r] = r - 243;
    size_t nq = (size_t)N * nh * hd, nk = (size_t)N * nkv * hd;
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    float *out = malloc(nq * sizeof *out);
    double *want = malloc(nq * sizeof *want);
    srand(11);
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    for (size_t i = 0; i < nk; i++)
        k[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    for (size_t i = 0; i < nk; i++)
        v[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    int windows[] = {0, 40, 73, 1};
    for (int w = 0; w < 4; w++) {
        attention_forward(out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, windows[w]);
        for (int s = 0; s < n_segs; s++)
            attention_reference(want, q, k, v, &segs[s], seq_index, nh, nkv, hd, windows[w]);
        int bad = 0;
        for (size_t i = 0; i < nq; i++)
            bad += !harness_close(out[i], want[i], 1e-4, 1e-5);
        CHECK(bad == 0, "window %d: %d of %zu outputs differ from the definition", windows[w], bad,
              nq);
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(want);
}

/* attention_over_cache against the definition in double precision: head sizes that take the
 * vector paths (64, 128) and one that does not (12), lengths around the 8-key blocks, rows
 * spaced wider than a head as in the cache (several kv heads per row), and groups of 1 to 7
 * query heads sharing the kv head (the vector path takes heads four at a time). */
static void test_attention_over_cache(void) {
    enum { MAX_Q = 7, MAX_LEN = 150 };
    const int hds[] = {64, 128, 12}, lens[] = {1, 7, 8, 9, MAX_LEN}, groups[] = {1, 3, 4, 7};
    const size_t stride = 3 * 128 + 4;
    float *k = malloc(MAX_LEN * stride * sizeof *k), *v = malloc(MAX_LEN * stride * sizeof *v);
    float q[MAX_Q * 128], out[MAX_Q * 128], scores[MAX_Q * MAX_LEN];
    srand(5);
    for (size_t i = 0; i < MAX_LEN * stride; i++) {
        k[i] = (float)rand() / (float)RAND_MAX * 4 - 2;
        v[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    }
    for (int i = 0; i < MAX_Q * 128; i++)
        q[i] = (float)rand() / (float)RAND_MAX * 2 - 1;
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 5; b++) {
            for (int g = 0; g < 4; g++) {
                int hd = hds[a], len = lens[b], n_q = groups[g], bad = 0;
                const float *kh = k + 128, *vh = v + 128; /* the second kv head of each row */
                attention_over_cache(out, q, kh, vh, len, stride, hd, n_q, scores);
                for (int h = 0; h < n_q; h++) {
                    const float *qh = q + h * hd;
                    double w[MAX_LEN], max = -1e300, sum = 0;
                    for (int t = 0; t < len; t++) {
                        double s = 0;
                        for (int d = 0; d < hd; d++)
                            s += (double)qh[d] * kh[t * stride + d];
                        w[t] = s / sqrt((double)hd);
                        max = w[t] > max ? w[t] : max;
                    }
                    for (int t = 0; t < len; t++)
                        sum += (w[t] = exp(w[t] - max));
                    for (int d = 0; d < hd; d++) {
                        double want = 0;
                        for (int t = 0; t < len; t++)
                            want += w[t] / sum * vh[t * stride + d];
                        bad += !harness_close(out[h * hd + d], want, 1e-4, 1e-5);
                    }
                }
                CHECK(bad == 0,
                      "hd %d, %d keys, %d heads: %d of %d outputs differ from the "
                      "definition",
                      hd, len, n_q, bad, n_q * hd);
            }
        }
    }
    free(k);
    free(v);
}

/* attention_cached_rows_prefixed, where rows read their prompt's positions from another slot
 * (kv_cache.h invariant 7), against attention_cached_rows_scored over a cache with those positions
 * copied into each row's own slot: the same bits. Prefix lengths below, at and past a block of
 * eight keys and at the whole sequence, windows that start before, inside and past the prefix,
 * head sizes of the vector paths and not, Qwen2.5's 7 heads a group and a soft cap. The borrowed
 * positions of each borrowing slot hold NaN, so a read of them would show. */
static void test_attention_cached_prefixed(void) {
    enum { SLOTS = 5, MAX_LEN = 40, NKV = 2, N = 4 };
    const int hds[] = {64, 12}, reps[] = {7, 1};
    uint64_t rs = 31;
    for (int a = 0; a < 2; a++) {
        int hd = hds[a], n_rep = reps[a], nh = NKV * n_rep;
        size_t kvd = (size_t)NKV * hd, cache = (size_t)SLOTS * MAX_LEN * kvd;
        float *k0 = malloc(cache * sizeof *k0), *v0 = malloc(cache * sizeof *v0);
        float *k = malloc(cache * sizeof *k), *v = malloc(cache * sizeof *v);
        float *kc = malloc(cache * sizeof *kc), *vc = malloc(cache * sizeof *vc);
        float *q = malloc((size_t)N * nh * hd * sizeof *q);
        float *want = malloc((size_t)N * nh * hd * sizeof *want);
        float *got = malloc((size_t)N * nh * hd * sizeof *got);
        for (size_t i = 0; i < cache; i++)
            k0[i] = 2 * harness_frand(&rs), v0[i] = harness_frand(&rs);
        for (int i = 0; i < N * nh * hd; i++)
            q[i] = harness_frand(&rs);
        /* rows 0-3 in slots 1-4, each borrowing prefix_len[r] positions of slot 0 (row 3: none) */
        const int32_t slot[N] = {1, 2, 3, 4}, pos[N] = {30, 39, 9, 20};
        const int32_t prefix_slot[N] = {0, 0, 0, 4}, lens[][N] = {{7, 8, 9, 0}, {17, 39, 10, 0}};
        const int windows[] = {0, 5, 12};
        const AttnScores scs[] = {{1.0f / sqrtf((float)hd), 0.0f}, {0.2f, 3.0f}};
        int bad = 0, cases = 0;
        for (int li = 0; li < 2; li++)
            for (int wi = 0; wi < 3; wi++)
                for (int si = 0; si < 2; si++, cases++) {
                    const int32_t *plen = lens[li];
                    memcpy(kc, k0, cache * sizeof *k), memcpy(vc, v0, cache * sizeof *v);
                    memcpy(k, k0, cache * sizeof *k), memcpy(v, v0, cache * sizeof *v);
                    for (int r = 0; r < N; r++) /* the copied layout, and NaN where lent */
                        for (int t = 0; t < plen[r]; t++) {
                            size_t own = ((size_t)slot[r] * MAX_LEN + t) * kvd;
                            size_t from = ((size_t)prefix_slot[r] * MAX_LEN + t) * kvd;
                            memcpy(kc + own, k0 + from, kvd * sizeof *k);
                            memcpy(vc + own, v0 + from, kvd * sizeof *v);
                            for (size_t d = 0; d < kvd; d++)
                                k[own + d] = NAN, v[own + d] = NAN;
                        }
                    attention_cached_rows_scored(want, q, kc, vc, slot, pos, N, MAX_LEN, nh, NKV,
                                                 hd, windows[wi], scs[si]);
                    attention_cached_rows_prefixed(got, q, k, v, slot, pos, prefix_slot, plen, N,
                                                   MAX_LEN, nh, NKV, hd, windows[wi], scs[si]);
                    bad += memcmp(got, want, (size_t)N * nh * hd * sizeof *got) != 0;
                }
        CHECK(bad == 0, "hd %d: %d of %d cases read through lent prompts differ from copies", hd,
              bad, cases);
        free(k0), free(v0), free(k), free(v), free(kc), free(vc), free(q), free(want), free(got);
    }
}

/* The scores of the keys past the blocks of eight, bit for bit as a scalar dot product sums them
 * (index by index, the product rounded, then the sum; the vector path runs eight heads side by
 * side): over two keys, both in that tail, with v = (1, 0), head h's output is exactly its softmax
 * weight of key 0, which this test computes from such scalar scores (the softmax of two:
 * one sum, fast_expf), for 7 heads of 64, 128 and 12 over random inputs. */
static void test_attention_tail_exact(void) {
    enum { N_Q = 7, MAX_HD = 128, TRIALS = 40 };
    const int hds[] = {64, 128, 12};
    const size_t stride = 2 * MAX_HD;
    float q[N_Q * MAX_HD], k[2 * stride], v[2 * stride], out[N_Q * MAX_HD], scores[N_Q * 2];
    unsigned seed = 9;
    for (size_t i = 0; i < 2 * stride; i++)
        v[i] = i < stride ? 1.0f : 0.0f;
    for (int a = 0; a < 3; a++) {
        int hd = hds[a], bad = 0;
        for (int trial = 0; trial < TRIALS; trial++) {
            for (int i = 0; i < N_Q * hd; i++)
                q[i] = (float)rand_r(&seed) / (float)RAND_MAX * 2 - 1;
            for (size_t i = 0; i < 2 * stride; i++)
                k[i] = (float)rand_r(&seed) / (float)RAND_MAX * 2 - 1;
            attention_over_cache(out, q, k, v, 2, stride, hd, N_Q, scores);
            float scale = 1.0f / sqrtf((float)hd);
            for (int h = 0; h < N_Q; h++) {
                float w[2];
                for (int t = 0; t < 2; t++) {
                    float sum = 0.0f;
                    for (int d = 0; d < hd; d++) {
                        float product = q[h * hd + d] * k[t * stride + d]; /* rounded apart */
                        sum = sum + product;
                    }
                    w[t] = sum * scale;
                }
                float max = w[0] > w[1] ? w[0] : w[1];
                float e0 = fast_expf(w[0] - max), e1 = fast_expf(w[1] - max);
                float want = e0 * (1.0f / (e0 + e1));
                bad += memcmp(&out[h * hd], &want, sizeof want) != 0;
            }
        }
        CHECK(bad == 0, "hd %d: %d of %d tail scores' weights differ from the scalar sums' bits",
              hd, bad, TRIALS * N_Q);
    }
}

/* The largest error of out = x · w^T + bias against the sum in double, relative to the sum of
 * the terms' magnitudes. */
static double worst_linear_error(const float *out, const float *x, const float *w,
                                 const float *bias, int n, int in_dim, int out_dim) {
    double worst = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out_dim; j++) {
            double want = bias[j], scale = fabs(bias[j]);
            for (int k = 0; k < in_dim; k++) {
                want += (double)x[r * in_dim + k] * w[j * in_dim + k];
                scale += fabs((double)x[r * in_dim + k] * w[j * in_dim + k]);
            }
            double err = fabs(out[r * out_dim + j] - want) / scale;
            if (err > worst) worst = err;
        }
    return worst;
}

/* A product's operands: random weights (out_dim, in_dim) and n input rows, a bias, room for the
 * n output rows and for one row computed alone. */
typedef struct {
    float *w, *x, *bias, *out, *one;
} LinearCase;

static LinearCase linear_case_new(int n, int in_dim, int out_dim) {
    LinearCase c = {malloc(sizeof(float) * (size_t)out_dim * in_dim),
                    malloc(sizeof(float) * (size_t)n * in_dim), malloc(sizeof(float) * out_dim),
                    malloc(sizeof(float) * (size_t)n * out_dim), malloc(sizeof(float) * out_dim)};
    for (int i = 0; i < out_dim * in_dim; i++)
        c.w[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < n * in_dim; i++)
        c.x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int j = 0; j < out_dim; j++)
        c.bias[j] = (float)j / out_dim;
    return c;
}

static void linear_case_free(LinearCase *c) {
    free(c->w), free(c->x), free(c->bias), free(c->out), free(c->one);
}

/* fp32 products of few rows (decoding up to 16 sequences) against the sum in double: one row
 * (four weight rows at a time, out_dim not a multiple of four), 2-3 rows, 4-row groups with a
 * remainder; in_dim past and short of the vector width. And every row's result is bitwise the
 * same alone as in its batch, whatever the batch's size. */
static void test_matmul_few_rows(void) {
    const int shapes[][3] = {{1, 37, 19}, {1, 64, 300}, {2, 5, 7},
                             {3, 64, 33}, {7, 100, 21}, {16, 37, 19}};
    srand(13);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], in_dim = shapes[s][1], out_dim = shapes[s][2];
        LinearCase c = linear_case_new(n, in_dim, out_dim);
        float *w = c.w, *x = c.x, *bias = c.bias, *out = c.out, *one = c.one;
        matmul_forward(out, x, w, bias, n, in_dim, out_dim);
        double worst = worst_linear_error(out, x, w, bias, n, in_dim, out_dim);
        CHECK(worst < 1e-6, "matmul %dx%dx%d: worst error %.3g of the term magnitudes", n, in_dim,
              out_dim, worst);
        for (int r = 0; r < n; r++) {
            matmul_forward(one, x + (size_t)r * in_dim, w, bias, 1, in_dim, out_dim);
            CHECK(memcmp(one, out + (size_t)r * out_dim, sizeof *one * out_dim) == 0,
                  "matmul %dx%dx%d: row %d alone differs from its batch's", n, in_dim, out_dim, r);
        }
        linear_case_free(&c);
    }
}

/* Products with bf16-stored weights against a double-precision product with the same (widened)
 * weights: the few-rows path (n <= 16) and the widened-panel path, in_dim not a multiple of the
 * vector width, a bias, and panels that do not divide out_dim. */
static void test_matmul_bf16(void) {
    const int shapes[][3] = {{1, 37, 19}, {3, 64, 300}, {16, 5, 7}, {17, 37, 19}, {40, 300, 1500}};
    srand(11);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], in_dim = shapes[s][1], out_dim = shapes[s][2];
        uint16_t *w16 = malloc(sizeof *w16 * (size_t)out_dim * in_dim);
        float *w = malloc(sizeof *w * (size_t)out_dim * in_dim);
        float *x = malloc(sizeof *x * (size_t)n * in_dim), *bias = malloc(sizeof *bias * out_dim);
        float *out = malloc(sizeof *out * (size_t)n * out_dim);
        for (int i = 0; i < out_dim * in_dim; i++)
            w16[i] = f32_to_bf16((float)rand() / (float)RAND_MAX - 0.5f);
        bf16_widen(w, w16, (size_t)out_dim * in_dim);
        for (int i = 0; i < n * in_dim; i++)
            x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int j = 0; j < out_dim; j++)
            bias[j] = (float)j / out_dim;
        matmul_forward_bf16(out, x, w16, bias, n, in_dim, out_dim);
        double worst = worst_linear_error(out, x, w, bias, n, in_dim, out_dim);
        CHECK(worst < 1e-6, "bf16 matmul %dx%dx%d: worst error %.3g of the term magnitudes", n,
              in_dim, out_dim, worst);
        free(w16), free(w), free(x), free(bias), free(out);
    }
}

/* The packed product of n rows against the direct sum, and each row's result bitwise the same
 * whatever the rows beside it (the row alone at 1 thread, against its batch at 2). */
static void check_packed_matmul(int n, int in_dim, int out_dim) {
    LinearCase c = linear_case_new(n, in_dim, out_dim);
    float *panels = aligned_alloc(64, packed_weight_floats(in_dim, out_dim) * sizeof(float));
    PackedWeight pw;
    packed_weight_fill(&pw, panels, c.w, in_dim, out_dim);
    packed_matmul_forward(c.out, c.x, &pw, c.bias, n);
    double worst = worst_linear_error(c.out, c.x, c.w, c.bias, n, in_dim, out_dim);
    CHECK(worst < 1e-6, "packed matmul %dx%dx%d: worst error %.3g of the term magnitudes", n,
          in_dim, out_dim, worst);
    int mid = n / 2, threads = omp_get_max_threads();
    omp_set_num_threads(1);
    packed_matmul_forward(c.one, c.x + (size_t)mid * in_dim, &pw, c.bias, 1);
    omp_set_num_threads(threads);
    CHECK(memcmp(c.one, c.out + (size_t)mid * out_dim, sizeof *c.one * out_dim) == 0,
          "packed matmul %dx%dx%d: row %d alone at 1 thread differs from its batch's", n, in_dim,
          out_dim, mid);
    free(panels);
    linear_case_free(&c);
}

/* Shapes with every edge: out_dim not a multiple of the 16- or 32-feature panel, in_dim past one
 * 1024-deep block and not a multiple of it, rows in more than one 256-row chunk (the
 * last one short), and 1 to 25 rows: tiles of every height, for tiles of up to 6 (AVX2) and 12
 * rows (AVX-512, their heights evened out: 13 rows 7 + 6, 25 rows 9 + 8 + 8). */
static void test_packed_matmul(void) {
    const int shapes[][3] = {{1, 37, 19},     {6, 64, 16},  {64, 512, 40}, {15, 1100, 150},
                             {70, 1100, 150}, {130, 20, 5}, {530, 300, 70}};
    srand(12);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        check_packed_matmul(shapes[s][0], shapes[s][1], shapes[s][2]);
    for (int n = 1; n <= 25; n++)
        check_packed_matmul(n, 600, 33);
}

/* The bf16 packed product (a model kept in bf16): against the sum in double of the same
 * operands rounded to bf16, where each product is exact and only the fp32 sums differ; within
 * 1e-2 of the term magnitudes of the unrounded fp32 product; and each row bitwise the same alone
 * at 1 thread as in its batch. */
static void check_packed_matmul_bf16(int n, int in_dim, int out_dim) {
    LinearCase c = linear_case_new(n, in_dim, out_dim);
    size_t nw = (size_t)out_dim * in_dim, nx = (size_t)n * in_dim;
    uint16_t *w16 = malloc(nw * sizeof *w16), *x16 = malloc(nx * sizeof *x16);
    float *w_rounded = malloc(nw * sizeof(float)), *x_rounded = malloc(nx * sizeof(float));
    for (size_t i = 0; i < nw; i++)
        w16[i] = f32_to_bf16(c.w[i]);
    for (size_t i = 0; i < nx; i++)
        x16[i] = f32_to_bf16(c.x[i]);
    bf16_widen(w_rounded, w16, nw);
    bf16_widen(x_rounded, x16, nx);
    uint16_t *panels = aligned_alloc(64, packed_weight_bf16_count(in_dim, out_dim) * 2);
    PackedWeight pw;
    packed_weight_fill_bf16(&pw, panels, w16, in_dim, out_dim);
    packed_matmul_forward(c.out, c.x, &pw, c.bias, n);
    double worst = worst_linear_error(c.out, x_rounded, w_rounded, c.bias, n, in_dim, out_dim);
    CHECK(worst < 1e-6, "bf16 packed matmul %dx%dx%d: worst error %.3g of the term magnitudes", n,
          in_dim, out_dim, worst);
    worst = worst_linear_error(c.out, c.x, c.w, c.bias, n, in_dim, out_dim);
    CHECK(worst < 1e-2, "bf16 packed matmul %dx%dx%d: worst error %.3g against fp32", n, in_dim,
          out_dim, worst);
    int mid = n / 2, threads = omp_get_max_threads();
    omp_set_num_threads(1);
    packed_matmul_forward(c.one, c.x + (size_t)mid * in_dim, &pw, c.bias, 1);
    omp_set_num_threads(threads);
    CHECK(memcmp(c.one, c.out + (size_t)mid * out_dim, sizeof *c.one * out_dim) == 0,
          "bf16 packed matmul %dx%dx%d: row %d alone at 1 thread differs from its batch's", n,
          in_dim, out_dim, mid);
    free(panels), free(w16), free(x16), free(w_rounded), free(x_rounded);
    linear_case_free(&c);
}

/* Edges as test_packed_matmul's, and an odd in_dim (a zero last pair half). */
static void test_packed_matmul_bf16(void) {
    const int shapes[][3] = {{1, 37, 19},     {6, 64, 16},     {64, 512, 40},
                             {15, 2100, 150}, {70, 1101, 150}, {530, 300, 70}};
    srand(14);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        check_packed_matmul_bf16(shapes[s][0], shapes[s][1], shapes[s][2]);
}

/* The rollout's AMX form (packed_matmul_amx.c) of W (fp32, or kept in bf16) against the exact
 * product, per output element relative to the sum of its terms' magnitudes S = sum |x_k w_k|
 * (+ |bias|). The bounds, derived (u = 2^-24 fp32's unit roundoff, b = 2^-8 bf16's):
 *  - against the rounded operands (x and W rounded to bf16 as the kernel rounds them, each
 *    product then exact in fp32): the fp32 sums of in_dim terms, plus the bias's addition, err
 *    at most (in_dim + 1) u S (the classic bound for recursive summation; the tile unit's own
 *    order and its pairwise steps are within it);
 *  - against the fp32 operands: each term x_k w_k is moved by at most (2b + b^2) |x_k w_k| by
 *    the two roundings (b for x alone when W is already bf16), on top of the sums' error.
 * And a row alone at 1 thread is bit for bit its batch's row (every output element is summed
 * by one thread over the whole depth, whatever the other rows). On every gemm_bf16 path this CPU
 * has (the form's products are gemm_bf16's; the rollout takes it on AMX only). */
static void check_packed_matmul_amx(int n, int in_dim, int out_dim, bool bf16_weights) {
    LinearCase c = linear_case_new(n, in_dim, out_dim);
    size_t nw = (size_t)out_dim * in_dim, nx = (size_t)n * in_dim;
    uint16_t *w16 = malloc(nw * sizeof *w16), *x16 = malloc(nx * sizeof *x16);
    float *w_rounded = malloc(nw * sizeof(float)), *x_rounded = malloc(nx * sizeof(float));
    for (size_t i = 0; i < nw; i++)
        w16[i] = f32_to_bf16(c.w[i]);
    for (size_t i = 0; i < nx; i++)
        x16[i] = f32_to_bf16(c.x[i]);
    bf16_widen(w_rounded, w16, nw);
    bf16_widen(x_rounded, x16, nx);
    if (bf16_weights) memcpy(c.w, w_rounded, nw * sizeof(float)); /* the model's values */
    PackedWeight pw;
    WeightRef w = bf16_weights ? (WeightRef){.bf16 = w16} : (WeightRef){.f32 = c.w};
    packed_weight_amx(&pw, w, in_dim, out_dim);
    CHECK(packed_weight_is_amx(&pw) && !pw.panels && !pw.panels16, "the AMX form holds no copy");
    const char *kind = bf16_weights ? "bf16" : "fp32";
    const double u = ldexp(1.0, -24), b = ldexp(1.0, -8);
    for (int p = GEMM_BF16_AVX2; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        const char *path = gemm_bf16_path_name((GemmBf16Path)p);
        packed_matmul_forward(c.out, c.x, &pw, c.bias, n);
        double sums = (in_dim + 1) * u;
        double worst = worst_linear_error(c.out, x_rounded, w_rounded, c.bias, n, in_dim, out_dim);
        CHECK(worst <= sums,
              "AMX form (%s, %s W) %dx%dx%d: %.3g of the term magnitudes from "
              "the product of the rounded operands, over the bound %.3g",
              path, kind, n, in_dim, out_dim, worst, sums);
        double rounding = bf16_weights ? b : 2 * b + b * b;
        worst = worst_linear_error(c.out, c.x, c.w, c.bias, n, in_dim, out_dim);
        CHECK(worst <= rounding + sums,
              "AMX form (%s, %s W) %dx%dx%d: %.3g against fp32, over "
              "the bound %.3g",
              path, kind, n, in_dim, out_dim, worst, rounding + sums);
        int mid = n / 2, threads = omp_get_max_threads();
        omp_set_num_threads(1);
        packed_matmul_forward(c.one, c.x + (size_t)mid * in_dim, &pw, c.bias, 1);
        omp_set_num_threads(threads);
        CHECK(memcmp(c.one, c.out + (size_t)mid * out_dim, sizeof *c.one * out_dim) == 0,
              "AMX form (%s) %dx%dx%d: row %d alone at 1 thread differs from its batch's", path, n,
              in_dim, out_dim, mid);
    }
    gemm_bf16_weights_changed(c.w, nw * sizeof(float)); /* the cache's packings of W go */
    gemm_bf16_weights_changed(w16, nw * sizeof *w16);
    free(w16), free(x16), free(w_rounded), free(x_rounded);
    linear_case_free(&c);
}

/* test_packed_matmul_bf16's shapes, with fp32 and bf16 weights; the path gemm_bf16 had before
 * is restored. */
static void test_packed_matmul_amx(void) {
    const int shapes[][3] = {{1, 37, 19},     {6, 64, 16},     {64, 512, 40},
                             {15, 2100, 150}, {70, 1101, 150}, {530, 300, 70}};
    GemmBf16Path before = gemm_bf16_path();
    srand(15);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int bf16 = 0; bf16 < 2; bf16++)
            check_packed_matmul_amx(shapes[s][0], shapes[s][1], shapes[s][2], bf16);
    gemm_bf16_force(before);
}

/* lane_sum.h's order written out from its invariants: value j into lane j % 16, each lane in
 * index order, then lane l + w onto lane l for w = 8, 4, 2, 1. */
static float sum_in_lane_order(const float *x, int n) {
    float lane[16] = {0};
    for (int j = 0; j < n; j++)
        lane[j % 16] += x[j];
    for (int w = 8; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

/* The log-sum-exp's fp32 block sums (fused_logprob_rows.h) in lane_sum.h's order, bit for bit,
 * so that a Release build and the sanitizer build (no -march=native, -O0) compute the same
 * log-probs: a compiler-chosen order (omp simd reduction) differed between them in the last bit,
 * and under bf16 autocast one such bit flipped a bf16 gradient and moved a QLoRA step's
 * grad_norm by 6.8e-4 (issue 29). Lengths around the 16 lanes and the 256-value blocks; the sums
 * also near the double-precision ones, so the order written here is a sum at all. */
static void test_lse_order(void) {
    const int lengths[] = {1, 15, 16, 17, 255, 256, 257, 1000, 4096};
    float *z = malloc(4096 * sizeof *z), *e = malloc(4096 * sizeof *e);
    float *ez = malloc(4096 * sizeof *ez);
    srand(29);
    for (int i = 0; i < 4096; i++)
        z[i] = (float)rand() / (float)RAND_MAX * 16 - 8;
    int off_order = 0, off_value = 0;
    for (size_t c = 0; c < sizeof lengths / sizeof *lengths; c++) {
        int n = lengths[c];
        float m = -INFINITY;
        for (int j = 0; j < n; j++)
            m = z[j] > m ? z[j] : m;
        double want = 0, want_ez = 0, want_z = 0, exact = 0;
        for (int j0 = 0; j0 < n; j0 += 256) {
            int len = n - j0 < 256 ? n - j0 : 256;
            for (int j = j0; j < j0 + len; j++) {
                e[j] = fast_expf(z[j] - m);
                ez[j] = e[j] * (z[j] - m);
                exact += exp((double)z[j] - m);
            }
            want += sum_in_lane_order(e + j0, len);
            want_ez += sum_in_lane_order(ez + j0, len);
            want_z += sum_in_lane_order(z + j0, len);
        }
        RunningLse plain = {.max = -INFINITY}, stats = {.max = -INFINITY};
        lse_update(&plain, z, n);
        lse_update_stats(&stats, z, n, 0);
        bool same =
            plain.sum == want && stats.sum == want && stats.ez == want_ez && stats.zsum == want_z;
        off_order += !same;
        off_value += !harness_close(plain.sum, exact, 1e-6, 0);
        if (!same)
            fprintf(stderr,
                    "n %d: sum %.17g (lane order %.17g), stats %.17g %.17g %.17g "
                    "(lane order %.17g %.17g)\n",
                    n, plain.sum, want, stats.sum, stats.ez, stats.zsum, want_ez, want_z);
    }
    CHECK(off_order == 0, "%d of 9 lengths: the log-sum-exp's sums not in lane_sum.h's order",
          off_order);
    CHECK(off_value == 0, "%d of 9 lengths: the sum of exponentials off the double one", off_value);
    free(z);
    free(e);
    free(ez);
}

int main(void) {
    test_packed_matmul();
    test_packed_matmul_amx();
    test_packed_matmul_bf16();
    test_matmul_few_rows();
    test_matmul_bf16();
    test_attention();
    test_attention_over_cache();
    test_attention_cached_prefixed();
    test_attention_tail_exact();
    test_fast_exp();
    test_fused_logprob();
    test_lse_order();
    return harness_finish("test_kernels");
}
