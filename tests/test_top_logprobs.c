/* Top-N log-probabilities (rollout/top_logprobs.h, GenerateOptions.top_logprobs/raw_logprobs).
 * 1. logprobs_top on rows full of ties and -inf against a qsort of the whole row (value
 *    descending, equal values by ascending id) and a log-softmax computed here in long double.
 * 2. generate() on a fixture model with more alternatives asked for than the vocabulary has:
 *    capped at the vocabulary, each step's list a permutation of it, sorted, whose probabilities
 *    sum to 1, the sampled token's log-prob its entry in the list; raw log-probs (raw_logprobs)
 *    do not depend on the temperature and processed ones do. */
#include "common/error.h"
#include "harness.h"
#include "rollout/generate.h"
#include "rollout/top_logprobs.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const float *ref_row;
static int by_value_then_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_row[x] != ref_row[y]) return ref_row[x] > ref_row[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void test_ties(void) {
    enum { V = 500 };
    static const float values[] = {1.5f, -2.0f, 0.25f, 1.5f, -INFINITY, 3.0f, 0.25f};
    float z[V];
    int32_t order[V], ids[V];
    float lps[V];
    for (int j = 0; j < V; j++)
        z[j] = values[(j * 7 + j / 11) % 7];
    long double sum = 0, max = 3.0L;
    for (int j = 0; j < V; j++)
        if (z[j] != -INFINITY) sum += expl((long double)z[j] - max);
    long double norm = max + logl(sum);
    for (int j = 0; j < V; j++)
        order[j] = j;
    ref_row = z;
    qsort(order, V, sizeof *order, by_value_then_id);
    double got_norm = logprobs_log_normalizer(z, V);
    CHECK(fabs(got_norm - (double)norm) < 1e-9, "log normalizer %.12g, want %.12Lg", got_norm,
          norm);
    static const int ns[] = {1, 3, 20, 100, V};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int n = ns[i];
        logprobs_top(z, V, got_norm, n, ids, lps);
        int bad = 0;
        for (int k = 0; k < n; k++) {
            float want = (float)((long double)z[order[k]] - norm);
            bad += ids[k] != order[k] || !(lps[k] == want || fabsf(lps[k] - want) < 1e-6f);
        }
        CHECK(bad == 0, "top %d of a row with ties: %d ranks differ from the sorted row", n, bad);
    }
}

/* generate() with top_logprobs above the vocabulary, raw or processed, at temperature t. */
static void run(const Model *m, bool raw, float temperature, Completion *out) {
    int32_t prompt[] = {3, 17, 5, 9};
    const int32_t *prompts[] = {prompt};
    int lens[] = {4};
    GenerateOptions opt = {.max_new_tokens = 5,
                           .n_per_prompt = 1,
                           .seed = 11,
                           .sampling = sampling_defaults(),
                           .top_logprobs = 1 << 20,
                           .raw_logprobs = raw};
    opt.sampling.do_sample = true;
    opt.sampling.top_k = 0;
    opt.sampling.temperature = temperature;
    CHECK(generate(m, prompts, lens, 1, &opt, out) == 0, "generate: %s", err_msg());
}

static void test_generate(void) {
    Model m;
    if (model_load(&m, harness_source_path("tests/fixtures/models/llama_tied")) != 0) {
        CHECK(false, "%s", err_msg());
        return;
    }
    int V = (int)m.cfg.vocab_size;
    Completion c[4];
    run(&m, true, 1.0f, &c[0]);
    run(&m, true, 2.0f, &c[1]);
    run(&m, false, 1.0f, &c[2]);
    run(&m, false, 2.0f, &c[3]);
    for (int r = 0; r < 4; r++) {
        CHECK(c[r].n_top == V, "run %d: %d alternatives for a vocabulary of %d", r, c[r].n_top, V);
        if (c[r].n_top != V) continue;
        for (int t = 0; t < c[r].len; t++) {
            const int32_t *ids = c[r].top_ids + (size_t)t * V;
            const float *lps = c[r].top_logprobs + (size_t)t * V;
            char *seen = calloc((size_t)V, 1);
            double mass = 0;
            int bad = 0;
            float sampled = NAN;
            for (int k = 0; k < V; k++) {
                bad += ids[k] < 0 || ids[k] >= V || seen[ids[k]]++ || (k && lps[k] > lps[k - 1]);
                mass += exp((double)lps[k]);
                if (ids[k] == c[r].ids[t]) sampled = lps[k];
            }
            free(seen);
            CHECK(bad == 0 && fabs(mass - 1) < 1e-5, "run %d step %d: %d bad ranks, mass %g", r, t,
                  bad, mass);
            CHECK(fabsf(sampled - c[r].logprobs[t]) < 1e-5f,
                  "run %d step %d: the sampled token's log-prob %g, its entry %g", r, t,
                  (double)c[r].logprobs[t], (double)sampled);
        }
    }
    /* the same first token's distribution (same prompt): raw does not follow the temperature,
     * processed does (log p_T = z / T - log sum exp(z / T)) */
    float raw1 = c[0].top_logprobs[0], raw2 = c[1].top_logprobs[0];
    float proc1 = c[2].top_logprobs[0], proc2 = c[3].top_logprobs[0];
    CHECK(fabsf(raw1 - raw2) < 1e-6f && fabsf(raw1 - proc1) < 1e-6f,
          "raw log-probs changed with the temperature: %g %g (processed at T 1: %g)", (double)raw1,
          (double)raw2, (double)proc1);
    CHECK(fabsf(proc1 - proc2) > 1e-3f, "processed log-probs at T 1 and 2 are equal: %g",
          (double)proc1);
    for (int r = 0; r < 4; r++)
        completions_free(&c[r], 1);
    model_free(&m);
}

int main(void) {
    test_ties();
    test_generate();
    return harness_finish("test_top_logprobs");
}
