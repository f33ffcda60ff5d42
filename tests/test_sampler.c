/* The sampler against transformers' logits processors (tests/fixtures/generate/sampling.json,
 * made by tools/reference/make_sampling_fixtures.py): the processed distribution equals
 * transformers' for every setting, and 20000 seeded draws follow it (chi-square at p = 0.001). The
 * choice from torch's draws (sampler_next_exponential) against the rule it implements, on
 * probabilities made equal so that the rule's answer is known exactly. */
#include "common/error.h"
#include "common/json_util.h"
#include "common/torch_exponential.h"
#include "harness.h"
#include "rollout/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DRAWS 20000

static float num(json_t *o, const char *k, float fallback) {
    json_t *v = json_object_get(o, k);
    return v ? (float)json_number_value(v) : fallback;
}

/* Upper critical value of chi-square with df degrees of freedom at p = 0.001 (Wilson-Hilferty). */
static double chi2_critical(int df) {
    double z = 3.090, a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* Reference order for the ties test: logit descending, equal logits by id (how HF's stable
 * sort of the logits ranks them). */
static const float *ref_logits;
static int by_logit_then_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_logits[x] != ref_logits[y]) return ref_logits[x] > ref_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* top-k and top-p on logits full of ties (a few distinct values, +0 and -0, -inf), against a
 * direct implementation of HF's rules over a qsort'ed order: the fixture's logits have no
 * ties, and the sampler's sort and selection treat them by key bits. */
static void test_ties(void) {
    enum { V = 3000 };
    const float values[] = {1.5f, -2.0f, 0.0f, -0.0f, 3.25f, -INFINITY, 0.5f, -7.0f};
    float *logits = malloc(V * sizeof *logits), *z = malloc(V * sizeof *z);
    float *work = malloc(2 * V * sizeof *work);
    int32_t *order = malloc(4 * V * sizeof *order), *ref = malloc(V * sizeof *ref);
    srand(5);
    for (int j = 0; j < V; j++)
        logits[j] = values[rand() % 8];
    ref_logits = logits;
    for (int j = 0; j < V; j++)
        ref[j] = j;
    qsort(ref, V, sizeof *ref, by_logit_then_id);
    const int ks[] = {1, 7, 375, 376, 2999};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        SamplingParams p = {true, 1.0f, ks[i], 1.0f, 0.0f, 1.0f};
        memcpy(z, logits, V * sizeof *z);
        sampler_process(z, V, &p, NULL, 0, work, order);
        float kth = logits[ref[ks[i] - 1]];
        int bad = 0;
        for (int j = 0; j < V; j++)
            bad += (z[j] == -INFINITY) != (logits[j] < kth || logits[j] == -INFINITY);
        CHECK(bad == 0, "top_k %d with ties: %d ids kept or dropped wrongly", ks[i], bad);
    }
    /* and a top_p whose cut falls inside the run of zeros (+0 and -0 mixed): the run must be
     * ranked by id alone. tail[r] = the mass of ranks r.. */
    double *tail = calloc(V + 1, sizeof *tail), top_max = logits[ref[0]], total = 0;
    for (int j = 0; j < V; j++)
        total += logits[j] == -INFINITY ? 0 : exp(logits[j] - top_max);
    for (int r = V - 1; r >= 0; r--)
        tail[r] =
            tail[r + 1] + (logits[ref[r]] == -INFINITY ? 0 : exp(logits[ref[r]] - top_max) / total);
    int zero_first = 0, zero_n = 0;
    while (logits[ref[zero_first]] != 0.0f)
        zero_first++;
    while (zero_first + zero_n < V && logits[ref[zero_first + zero_n]] == 0.0f)
        zero_n++;
    int mid = zero_first + zero_n / 2;
    float in_zeros = (float)(1.0 - (tail[mid] + tail[mid + 1]) / 2);
    free(tail);
    const float tops[] = {0.3f, 0.9f, 0.999f, in_zeros};
    for (size_t i = 0; i < sizeof tops / sizeof *tops; i++) {
        SamplingParams p = {true, 1.0f, 0, tops[i], 0.0f, 1.0f};
        memcpy(z, logits, V * sizeof *z);
        sampler_process(z, V, &p, NULL, 0, work, order);
        /* HF: ascending order, drop while the tail's mass <= 1 - top_p, keep the top one */
        double max = logits[ref[0]], sum = 0, cum = 0;
        for (int j = 0; j < V; j++)
            sum += logits[j] == -INFINITY ? 0 : exp(logits[j] - max);
        bool *drop = calloc(V, sizeof *drop);
        for (int r = V - 1; r >= 1; r--) {
            cum += logits[ref[r]] == -INFINITY ? 0 : exp(logits[ref[r]] - max) / sum;
            drop[ref[r]] = cum <= 1.0 - tops[i];
        }
        int bad = 0;
        for (int j = 0; j < V; j++)
            bad += (z[j] == -INFINITY) != (drop[j] || logits[j] == -INFINITY);
        CHECK(bad == 0, "top_p %.3f with ties: %d ids kept or dropped wrongly", tops[i], bad);
        free(drop);
    }
    free(logits), free(z), free(work), free(order), free(ref);
}

/* sampler_next_exponential's choice, the first id with the largest p / q (torch.multinomial's
 * argmax on the CPU), on logits whose probabilities are all equal: every kept logit 0, so every
 * kept p is the same float, and the choice is the first kept id of the smallest q, whatever block
 * of the vectorised scan it falls in. A masked id (p 0) never wins, even with the smallest q; a
 * kept id with q 0 (p / 0 = inf) wins over any finite ratio; a NaN ratio (p 0 over q 0) counts
 * for nothing, except at id 0, where the scan starts (and keeps 0). */
static void test_exponential_choice(void) {
    enum { V = 3000 };
    float *z = malloc(V * sizeof *z), *q = malloc(V * sizeof *q);
    float *work = malloc(2 * V * sizeof *work);
    int32_t *order = malloc(4 * V * sizeof *order);
    SamplingParams plain = {true, 1.0f, 0, 1.0f, 0.0f, 1.0f};
    struct {
        const char *what;
        int masked[3], qmin[3], qzero[3], want; /* each list ends at -1 */
    } cases[] = {
        {"ties across blocks go to the first", {100, -1}, {1900, 700, 100}, {-1}, 700},
        {"a tie inside a block goes to the first", {-1}, {1291, 1290, -1}, {-1}, 1290},
        {"the last id", {-1}, {2999, -1}, {-1}, 2999},
        {"q 0 on a kept id wins", {5, -1}, {700, -1}, {2600, 2500, -1}, 2500},
        {"a NaN ratio past id 0 counts for nothing", {5, -1}, {1900, -1}, {5, -1}, 1900},
        {"a NaN ratio at id 0 keeps 0", {0, -1}, {1900, -1}, {0, -1}, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        srand(9 + (unsigned)c);
        int kept = V;
        for (int j = 0; j < V; j++)
            z[j] = 0.0f, q[j] = 0.5f + 4.0f * (float)rand() / (float)RAND_MAX;
        for (int i = 0; i < 3 && cases[c].masked[i] >= 0; i++)
            z[cases[c].masked[i]] = -INFINITY, kept--;
        for (int i = 0; i < 3 && cases[c].qmin[i] >= 0; i++)
            q[cases[c].qmin[i]] = 0.125f;
        for (int i = 0; i < 3 && cases[c].qzero[i] >= 0; i++)
            q[cases[c].qzero[i]] = 0.0f;
        bool masked = z[cases[c].want] == -INFINITY;
        float lp;
        int32_t got = sampler_next_exponential(z, V, &plain, NULL, 0, q, work, order, &lp);
        CHECK(got == cases[c].want, "%s: chose %d, want %d", cases[c].what, got, cases[c].want);
        double want_lp = masked ? -INFINITY : -log((double)kept);
        CHECK(masked ? lp == -INFINITY : fabs(lp - want_lp) < 1e-6, "%s: log-prob %.9g, want %.9g",
              cases[c].what, lp, want_lp);
    }
    free(z), free(q), free(work), free(order);
}

static bool same_generator(const TorchGenerator *a, const TorchGenerator *b) {
    return a->left == b->left && a->next == b->next && !memcmp(a->state, b->state, sizeof a->state);
}

/* sampler_next_exponential_drawn, which turns only the draws that could win into floats, against
 * sampler_next_exponential on the row's draws all made first (torch_exponential_f32_serial from
 * a copy of the generator): the same id, the same log-prob bits and the generator left at the same
 * place, row after row of one stream. The distributions: flat (every ratio's order is the draws'),
 * random logits at two temperatures, top-k and top-p masks (and id 0 masked), and near-ties
 * built from the row's own draws (logit j = log q_j, plus noise of a few ulps: every ratio within
 * rounding of the others, where a skip bound too tight would drop the winner). V past several
 * of the sampler's blocks of draws and not a multiple of them. */
static void test_exponential_drawn(void) {
    enum { V = 5003, ROWS = 40 };
    float *z = malloc(V * sizeof *z), *z2 = malloc(V * sizeof *z2), *q = malloc(V * sizeof *q);
    float *work = malloc(2 * V * sizeof *work);
    int32_t *order = malloc(4 * V * sizeof *order);
    SamplingParams plain = {true, 1.0f, 0, 1.0f, 0.0f, 1.0f};
    SamplingParams topk = {true, 0.7f, 50, 1.0f, 0.0f, 1.0f};
    SamplingParams topp = {true, 1.0f, 0, 0.9f, 0.0f, 1.0f};
    enum { FLAT, WIDE, PEAKED, TOPK, TOPP, NEAR_TIES, KINDS };
    static const char *names[KINDS] = {"flat", "wide", "peaked", "top-k", "top-p", "near ties"};
    TorchGenerator g;
    torch_generator_seed(&g, 1234);
    uint64_t rs = 77;
    for (int kind = 0; kind < KINDS; kind++) {
        int mismatches = 0;
        for (int row = 0; row < ROWS; row++) {
            TorchGenerator eager = g;
            torch_exponential_f32_serial(&eager, q, V); /* this row's draws, all of them */
            const SamplingParams *p = kind == TOPK ? &topk : kind == TOPP ? &topp : &plain;
            for (int j = 0; j < V; j++) {
                float x = harness_frand(&rs);
                z[j] = kind == FLAT        ? 0.0f
                       : kind == WIDE      ? 2.0f * x
                       : kind == PEAKED    ? 12.0f * x
                       : kind == NEAR_TIES ? (float)log((double)q[j]) * (1.0f + 4e-7f * x)
                                           : 3.0f * x;
            }
            if (kind == TOPK) z[0] = -20.0f; /* id 0 masked: the scan starts from a ratio 0 */
            memcpy(z2, z, V * sizeof *z);
            float want_lp, got_lp;
            int32_t want = sampler_next_exponential(z, V, p, NULL, 0, q, work, order, &want_lp);
            int32_t got =
                sampler_next_exponential_drawn(z2, V, p, NULL, 0, &g, work, order, &got_lp);
            bool same = got == want && !memcmp(&got_lp, &want_lp, sizeof got_lp) &&
                        same_generator(&g, &eager);
            mismatches += !same;
            if (!same) g = eager; /* go on from where the stream should be */
        }
        CHECK(mismatches == 0, "drawn choice (%s): %d of %d rows differ from the eager draws",
              names[kind], mismatches, ROWS);
    }
    /* greedy: the argmax, and the row's draws passed over */
    TorchGenerator eager = g;
    torch_exponential_skip(&eager, V);
    SamplingParams greedy = plain;
    greedy.do_sample = false;
    for (int j = 0; j < V; j++)
        z[j] = harness_frand(&rs);
    memcpy(z2, z, V * sizeof *z);
    float want_lp, got_lp;
    int32_t want = sampler_next_exponential(z, V, &greedy, NULL, 0, q, work, order, &want_lp);
    int32_t got = sampler_next_exponential_drawn(z2, V, &greedy, NULL, 0, &g, work, order, &got_lp);
    CHECK(got == want && got_lp == want_lp && same_generator(&g, &eager),
          "drawn choice (greedy): id %d vs %d, or the generator not past the row", got, want);
    free(z), free(z2), free(q), free(work), free(order);
}

int main(void) {
    test_ties();
    test_exponential_choice();
    test_exponential_drawn();
    json_t *fx;
    if (json_load_path(harness_source_path("tests/fixtures/generate/sampling.json"), &fx) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    json_t *jl = json_object_get(fx, "logits"), *jh = json_object_get(fx, "history");
    int V = (int)json_array_size(jl), nh = (int)json_array_size(jh);
    float *logits = malloc(V * sizeof *logits), *z = malloc(V * sizeof *z),
          *work = malloc(2 * V * sizeof *work);
    int32_t *order = malloc(4 * V * sizeof *order), *hist = malloc(nh * sizeof *hist);
    for (int j = 0; j < V; j++)
        logits[j] = (float)json_number_value(json_array_get(jl, j));
    for (int i = 0; i < nh; i++)
        hist[i] = (int32_t)json_integer_value(json_array_get(jh, i));
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(fx, "cases"), ci, c) {
        json_t *st = json_object_get(c, "settings"), *jp = json_object_get(c, "probs");
        SamplingParams p = {true,
                            num(st, "temperature", 1),
                            (int)num(st, "top_k", 0),
                            num(st, "top_p", 1),
                            num(st, "min_p", 0),
                            num(st, "repetition_penalty", 1)};
        CHECK(sampling_params_check(&p) == 0, "%s", err_msg());
        memcpy(z, logits, V * sizeof *z);
        sampler_process(z, V, &p, hist, nh, work, order);
        double maxz = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            maxz = fmax(maxz, z[j]);
        for (int j = 0; j < V; j++)
            sum += z[j] == -INFINITY ? 0 : exp(z[j] - maxz);
        int bad = 0;
        double *want = malloc(V * sizeof *want);
        for (int j = 0; j < V; j++) {
            want[j] = json_number_value(json_array_get(jp, j));
            double got = z[j] == -INFINITY ? 0 : exp(z[j] - maxz) / sum;
            if (fabs(got - want[j]) > 1e-5 + 1e-4 * want[j]) bad++;
        }
        CHECK(bad == 0, "case %zu: %d of %d probabilities differ from transformers'", ci, bad, V);

        /* draws: one generator stream per draw, as one per sequence */
        int *count = calloc(V, sizeof *count);
        for (int d = 0; d < DRAWS; d++) {
            SamplerRng rng;
            sampler_rng_seed(&rng, 1234, (uint64_t)d);
            memcpy(z, logits, V * sizeof *z);
            float lp;
            int32_t t = sampler_next(z, V, &p, hist, nh, &rng, work, order, &lp);
            count[t]++;
            if (want[t] == 0) bad++;
        }
        CHECK(bad == 0, "case %zu: a token outside the support was drawn", ci);
        /* bins with expected count >= 5; the rest pooled */
        double chi2 = 0, pooled_obs = 0, pooled_exp = 0;
        int bins = 0;
        for (int j = 0; j < V; j++) {
            double e = want[j] * DRAWS;
            if (e >= 5) {
                chi2 += (count[j] - e) * (count[j] - e) / e;
                bins++;
            } else {
                pooled_obs += count[j], pooled_exp += e;
            }
        }
        if (pooled_exp >= 5)
            chi2 += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp, bins++;
        int df = bins - 1;
        CHECK(df < 1 || chi2 < chi2_critical(df),
              "case %zu: chi-square %.1f over %d degrees of freedom "
              "(critical %.1f)",
              ci, chi2, df, chi2_critical(df));
        printf("case %zu: chi-square %.1f, df %d, critical %.1f\n", ci, chi2, df,
               chi2_critical(df));
        free(count);
        free(want);
    }
    /* greedy: the argmax of the penalised logits; bad parameters are refused */
    SamplingParams greedy = sampling_defaults();
    greedy.repetition_penalty = 1.3f;
    SamplerRng rng;
    sampler_rng_seed(&rng, 1, 0);
    memcpy(z, logits, V * sizeof *z);
    float lp;
    int32_t g = sampler_next(z, V, &greedy, hist, nh, &rng, work, order, &lp);
    /* against the penalised logits in double: their first argmax and its log-softmax */
    double *pen = malloc(V * sizeof *pen);
    for (int j = 0; j < V; j++)
        pen[j] = logits[j];
    for (int i = 0; i < nh; i++) {
        int32_t id = hist[i];
        bool again = false;
        for (int e = 0; e < i; e++)
            again |= hist[e] == id;
        if (!again) pen[id] = pen[id] < 0 ? pen[id] * 1.3 : pen[id] / 1.3;
    }
    int best = 0;
    for (int j = 1; j < V; j++)
        if (pen[j] > pen[best]) best = j;
    double sum = 0;
    for (int j = 0; j < V; j++)
        sum += exp(pen[j] - pen[best]);
    CHECK(g == best, "greedy token %d, the argmax of the penalised logits is %d", g, best);
    CHECK(fabs(lp + log(sum)) < 1e-5 + 1e-4 * log(sum), "greedy log-prob %.7f, want %.7f", lp,
          -log(sum));
    /* ties go to the lowest id, as torch.argmax's */
    for (int j = 0; j < V; j++)
        z[j] = j == 70 || j == 130 ? 3.0f : 0.0f;
    SamplingParams plain = sampling_defaults();
    g = sampler_next(z, V, &plain, NULL, 0, &rng, work, order, &lp);
    CHECK(g == 70, "a tie between ids 70 and 130 went to %d", g);
    free(pen);
    SamplingParams bad = sampling_defaults();
    bad.do_sample = true;
    bad.temperature = 0;
    CHECK(sampling_params_check(&bad) != 0 && strstr(err_msg(), "temperature"), "temperature 0: %s",
          err_msg());
    bad = sampling_defaults();
    bad.top_p = 1.5f;
    CHECK(sampling_params_check(&bad) != 0 && strstr(err_msg(), "top_p"), "top_p: %s", err_msg());
    free(logits), free(z), free(work), free(order), free(hist);
    json_decref(fx);
    return harness_finish("test_sampler");
}
