/* The sampler against transformers' logits processors (tests/fixtures/generate/sampling.json,
 * made by tools/reference/make_sampling_fixtures.py): the processed distribution equals
 * transformers' for every setting, and 20000 seeded draws follow it (chi-square at p = 0.001). */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "rollout/sampler.h"

#include <math.h>
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

int main(void) {
    json_t *fx;
    if (json_load_path(harness_source_path("tests/fixtures/generate/sampling.json"), &fx) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    json_t *jl = json_object_get(fx, "logits"), *jh = json_object_get(fx, "history");
    int V = (int)json_array_size(jl), nh = (int)json_array_size(jh);
    float *logits = malloc(V * sizeof *logits), *z = malloc(V * sizeof *z),
          *work = malloc(2 * V * sizeof *work);
    int32_t *order = malloc(V * sizeof *order), *hist = malloc(nh * sizeof *hist);
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
    CHECK(g >= 0 && g < V && lp <= 0, "greedy token %d", g);
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
