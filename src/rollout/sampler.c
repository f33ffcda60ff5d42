#include "rollout/sampler.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

SamplingParams sampling_defaults(void) {
    return (SamplingParams){false, 1.0f, 50, 1.0f, 0.0f, 1.0f};
}

int sampling_params_check(const SamplingParams *p) {
    if (p->do_sample && !(p->temperature > 0))
        return err_set("temperature must be positive when sampling (use greedy for 0)");
    if (p->top_k < 0) return err_set("top_k must not be negative");
    if (!(p->top_p > 0 && p->top_p <= 1)) return err_set("top_p must be in (0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return err_set("min_p must be in [0, 1]");
    if (!(p->repetition_penalty > 0)) return err_set("repetition_penalty must be positive");
    return 0;
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sampler_rng_seed(SamplerRng *rng, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix(&x);
}

double sampler_rng_uniform(SamplerRng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

/* Sorting ids by logit, for top-k / top-p (descending; equal logits by id). qsort_r keeps the
 * logits out of global state, so samplers on several threads do not interfere. */
static int by_logit_desc(const void *a, const void *b, void *keys) {
    const float *z = keys;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (z[x] != z[y]) return z[x] > z[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void softmax(const float *z, float *p, int n) {
    float max = -INFINITY;
    for (int j = 0; j < n; j++)
        max = z[j] > max ? z[j] : max;
    double sum = 0;
    for (int j = 0; j < n; j++) {
        p[j] = z[j] == -INFINITY ? 0.0f : expf(z[j] - max);
        sum += p[j];
    }
    for (int j = 0; j < n; j++)
        p[j] = (float)(p[j] / sum);
}

void sampler_process(float *z, int vocab, const SamplingParams *p, const int32_t *history,
                     int n_history, float *work, int32_t *order) {
    if (p->repetition_penalty != 1.0f) {
        /* each distinct id once: gather all, then scatter (HF's gather/where/scatter) */
        uint8_t *seen = calloc((size_t)vocab, 1);
        for (int i = 0; i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= vocab || seen[id]) continue;
            seen[id] = 1;
            z[id] = z[id] < 0 ? z[id] * p->repetition_penalty : z[id] / p->repetition_penalty;
        }
        free(seen);
    }
    if (!p->do_sample) return;
    if (p->temperature != 1.0f)
        for (int j = 0; j < vocab; j++)
            z[j] /= p->temperature;
    bool need_sort = (p->top_k > 0 && p->top_k < vocab) || p->top_p < 1.0f;
    if (need_sort) {
        for (int j = 0; j < vocab; j++)
            order[j] = j;
        qsort_r(order, (size_t)vocab, sizeof *order, by_logit_desc, z);
    }
    if (p->top_k > 0 && p->top_k < vocab) {
        /* keep every logit >= the k-th largest (ties at the boundary stay, as torch.topk's
         * threshold compare keeps them) */
        float kth = z[order[p->top_k - 1]];
        for (int j = 0; j < vocab; j++)
            if (z[j] < kth) z[j] = -INFINITY;
    }
    if (p->top_p < 1.0f) {
        /* ascending order: drop the low tail whose cumulative mass is <= 1 - top_p; the most
         * likely token always stays */
        float *prob = work;
        softmax(z, prob, vocab);
        double cum = 0;
        for (int r = vocab - 1; r >= 1; r--) { /* order[] is descending; walk it backwards */
            int32_t id = order[r];
            cum += prob[id];
            if (cum <= 1.0 - p->top_p) z[id] = -INFINITY;
        }
    }
    if (p->min_p > 0) {
        float *prob = work;
        softmax(z, prob, vocab);
        float top = 0;
        int32_t top_id = 0;
        for (int j = 0; j < vocab; j++)
            if (prob[j] > top) top = prob[j], top_id = j;
        float threshold = p->min_p * top;
        for (int j = 0; j < vocab; j++)
            if (prob[j] < threshold && j != top_id) z[j] = -INFINITY;
    }
}

int32_t sampler_next(float *z, int vocab, const SamplingParams *p, const int32_t *history,
                     int n_history, SamplerRng *rng, float *work, int32_t *order, float *logprob) {
    sampler_process(z, vocab, p, history, n_history, work, order);
    float *prob = work + vocab;
    softmax(z, prob, vocab);
    int32_t chosen = 0;
    if (!p->do_sample) {
        for (int j = 1; j < vocab; j++)
            if (z[j] > z[chosen]) chosen = j;
    } else {
        double u = sampler_rng_uniform(rng), cum = 0;
        chosen = -1;
        for (int j = 0; j < vocab; j++) {
            if (prob[j] <= 0) continue;
            cum += prob[j];
            chosen = j;
            if (u < cum) break;
        }
    }
    *logprob = logf(prob[chosen]);
    return chosen;
}
