#include "rollout/sampler.h"

#include "common/error.h"
#include "common/rng.h"
#include "common/torch_exponential.h"
#include "kernels/cpu/fast_exp.h"

#include <math.h>
#include <stdbool.h>
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

void sampler_rng_seed(SamplerRng *rng, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        rng->s[i] = rng_splitmix64_next(&x);
}

double sampler_rng_uniform(SamplerRng *rng) {
    return rng_unit_double(rng_xoshiro256ss_next(rng->s));
}

/* A logit as an unsigned key that sorts in the opposite order: larger logits first, -inf last;
 * -0 counts as +0, as the comparison of the two does. */
static uint32_t descending_key(float z) {
    if (z == 0.0f) z = 0.0f;
    uint32_t b;
    memcpy(&b, &z, sizeof b);
    return (b & 0x80000000u) ? b : ~b & 0x7FFFFFFFu;
}

/* order[0..V) = the ids by logit, descending, equal logits by id (for top-k / top-p). A stable
 * radix sort, a byte of the key per pass over ids that start in increasing order, so ties keep
 * increasing ids. qsort of a 150k vocabulary took 27 ms per token and sequence: longer than the
 * 0.5B model's forward for 8 sequences. `more` holds 3*V ints of scratch. */
static void sort_by_logit(const float *z, int vocab, int32_t *order, int32_t *more) {
    int32_t *ids = order, *spare = more;
    uint32_t *keys = (uint32_t *)(more + vocab),
             *keys_spare = (uint32_t *)(more + 2 * (size_t)vocab);
    for (int j = 0; j < vocab; j++)
        ids[j] = j, keys[j] = descending_key(z[j]);
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (int j = 0; j < vocab; j++)
            count[((keys[j] >> shift) & 0xFF) + 1]++;
        if (count[((keys[0] >> shift) & 0xFF) + 1] == (size_t)vocab) continue; /* one bucket */
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (int j = 0; j < vocab; j++) {
            size_t at = count[(keys[j] >> shift) & 0xFF]++;
            spare[at] = ids[j], keys_spare[at] = keys[j];
        }
        int32_t *t = ids;
        ids = spare, spare = t;
        uint32_t *tk = keys;
        keys = keys_spare, keys_spare = tk;
    }
    if (ids != order) memcpy(order, ids, (size_t)vocab * sizeof *order);
}

/* The exponentials are fast_expf's (vectorised; relative error below 3e-7, as libm's expf),
 * summed apart in double: over a 150k vocabulary for every sequence at every decode step,
 * libm's scalar expf was 5% of batch-64 decoding. */
static float max_logit(const float *z, int n) {
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int j = 0; j < n; j++)
        max = z[j] > max ? z[j] : max;
    return max;
}

/* e[j] = exp(z[j] - max z) (0 for -inf); returns the float the softmax scales them by, 1 / sum.
 * softmax's probabilities are e[j] * that, so a caller that reads them once can scale as it reads
 * (sampler_next_exponential) and get the same floats. */
static float softmax_unscaled(const float *z, float *e, int n) {
    float max = max_logit(z, n);
#pragma omp simd
    for (int j = 0; j < n; j++)
        e[j] = z[j] == -INFINITY ? 0.0f : fast_expf(z[j] - max);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++)
        sum += e[j];
    return (float)(1.0 / sum);
}

static void softmax(const float *z, float *p, int n) {
    float inv = softmax_unscaled(z, p, n);
#pragma omp simd
    for (int j = 0; j < n; j++)
        p[j] *= inv;
}

/* The lowest index of the largest of z[0..n): a vectorised max, then the first block of 64 that
 * holds it (torch.argmax's tie rule). A compare-and-keep-index loop stays scalar, and over a 150k
 * vocabulary for every sequence at every greedy decode step it cost more than the exponentials. */
static int32_t argmax(const float *z, int n) {
    float max = max_logit(z, n);
    int start = 0;
    for (; start + 64 <= n; start += 64) {
        bool found = false;
#pragma omp simd reduction(| : found)
        for (int j = start; j < start + 64; j++)
            found |= z[j] == max;
        if (found) break;
    }
    for (int j = start; j < n; j++)
        if (z[j] == max) return j;
    return 0; /* every logit NaN */
}

/* log of the sum of exp(z[j] - max) over z[0..n): exponentials as softmax's, summed in double. */
static double log_sum_exp(const float *z, int n, float max) {
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++)
        sum += z[j] == -INFINITY ? 0.0f : fast_expf(z[j] - max);
    return log(sum);
}

/* The k-th largest logit (1 <= k <= V, duplicates counted) without sorting: a radix select,
 * narrowing to the key byte by byte from the top. */
static float kth_largest(const float *z, int vocab, int k) {
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        int count[256] = {0};
        for (int j = 0; j < vocab; j++) {
            uint32_t key = descending_key(z[j]);
            if ((key & mask) == prefix) count[(key >> shift) & 0xFF]++;
        }
        int d = 0;
        while (k > count[d])
            k -= count[d++];
        prefix |= (uint32_t)d << shift, mask |= 0xFFu << shift;
    }
    for (int j = 0;; j++)
        if (descending_key(z[j]) == prefix) return z[j];
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
    bool top_k = p->top_k > 0 && p->top_k < vocab, top_p = p->top_p < 1.0f;
    if (top_p) sort_by_logit(z, vocab, order, order + vocab);
    if (top_k) {
        /* keep every logit >= the k-th largest (ties at the boundary stay, as torch.topk's
         * threshold compare keeps them) */
        float kth = top_p ? z[order[p->top_k - 1]] : kth_largest(z, vocab, p->top_k);
        for (int j = 0; j < vocab; j++)
            if (z[j] < kth) z[j] = -INFINITY;
    }
    if (top_p) {
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

/* Greedy decoding's choice, the first maximum of the processed logits z. log p(chosen) =
 * z_chosen - max - log sum exp(z - max), and z_chosen is the max: no probabilities need writing. */
static int32_t greedy_choice(const float *z, int vocab, float *logprob) {
    int32_t chosen = argmax(z, vocab);
    *logprob = (float)-log_sum_exp(z, vocab, z[chosen]);
    return chosen;
}

int32_t sampler_next(float *z, int vocab, const SamplingParams *p, const int32_t *history,
                     int n_history, SamplerRng *rng, float *work, int32_t *order, float *logprob) {
    sampler_process(z, vocab, p, history, n_history, work, order);
    if (!p->do_sample) return greedy_choice(z, vocab, logprob);
    float *prob = work + vocab;
    softmax(z, prob, vocab);
    /* u scaled by the probabilities' own sum: rounded, it can fall short of 1, and a draw past it
     * would otherwise run off the end onto the last id with any mass */
    double total = 0;
#pragma omp simd reduction(+ : total)
    for (int j = 0; j < vocab; j++)
        total += prob[j];
    double u = sampler_rng_uniform(rng) * total, cum = 0;
    int32_t chosen = -1;
    for (int j = 0; j < vocab; j++) {
        if (prob[j] <= 0) continue;
        cum += prob[j];
        chosen = j;
        if (u < cum) break;
    }
    *logprob = logf(prob[chosen]);
    return chosen;
}

/* torch.argmax of p / q with p[j] = e[j] * inv, the probabilities as softmax rounds them: the
 * first of equal maxima, a NaN ratio (p 0 over q 0) never the maximum, except that a NaN at 0
 * keeps 0 (what a scalar "r > best" scan from r[0] gives); a masked id (p 0) never wins over a
 * kept one. A block of ARGMAX_BLOCK ratios at a time, vectorised: its maximum, and only where
 * that beats the best so far, its first index holding it. Over a 150k vocabulary for 64 rows a
 * decode step the scalar divide-and-compare scan took longer than the softmax itself. */
#define ARGMAX_BLOCK 64

/* The block step of the p / q scans: when the largest of r[0..m) (a NaN never counts) is above
 * *best, it becomes *best and *chosen the first id start + j holding it. */
static void block_best(const float *r, int m, int start, float *best, int32_t *chosen) {
    float block_max = -INFINITY;
#pragma omp simd reduction(max : block_max)
    for (int j = 0; j < m; j++)
        block_max = r[j] > block_max ? r[j] : block_max;
    if (!(block_max > *best)) return;
    *best = block_max;
    for (int j = 0; j < m; j++)
        if (r[j] == block_max) {
            *chosen = start + j;
            return;
        }
}

static int32_t argmax_ratio(const float *e, float inv, const float *q, int n) {
    float best = e[0] * inv / q[0];
    if (isnan(best)) return 0;
    int32_t chosen = 0;
    float r[ARGMAX_BLOCK];
    for (int start = 0; start < n; start += ARGMAX_BLOCK) {
        int m = n - start < ARGMAX_BLOCK ? n - start : ARGMAX_BLOCK;
#pragma omp simd
        for (int j = 0; j < m; j++)
            r[j] = e[start + j] * inv / q[start + j];
        block_best(r, m, start, &best, &chosen);
    }
    return chosen;
}

/* Draws made at a time by argmax_ratio_drawn: their words (8 KiB) stay in L1. */
#define DRAW_BLOCK 1024
/* argmax_ratio_drawn's skip bound: q >= u (1 - 2^-23), the float u's and the products' roundings
 * are inside it with room. NOT_BELOW_BEST: the smallest best it is applied at, so that bound * u
 * (u >= 2^-52 where not 0) stays a normal float and every rounding is relative. */
#define SKIP_MARGIN    (1.0f - 0x1.0p-18f)
#define NOT_BELOW_BEST 0x1.0p-60f

/* A float no larger than u (1 + 2^-23), u = torch_exponential_u(w): the high word's 21 bits
 * (exact) and the low word's top 31 (each rounded once), in float arithmetic that vectorises. */
static inline float draw_u_float(const uint32_t *w) {
    return (float)(int32_t)(w[0] & ((1u << 21) - 1)) * 0x1.0p-21f +
           (float)(int32_t)(w[1] >> 1) * 0x1.0p-52f;
}

/* argmax_ratio(e, inv, q, n) with q[j] the next n draws of g (g left past all n), without making
 * most of them. Draw j is q_j = (float)-log1p(-u_j) >= u_j (1 - 2^-23) (libm's log1p within an
 * ulp of -log1p(-u) >= u, then rounded to float), so p_j / q_j rounded is below
 * p_j / (u_j (1 - 2^-19)) (1 - 2^-23)^-1 (1 + 2^-24). Invariants:
 *   1. a draw is made (log1p) only for a candidate: p_j > 0 and not p_j < best SKIP_MARGIN u_j
 *      (draw_u_float's u_j, products in float), best the largest ratio before j's block of
 *      ARGMAX_BLOCK (best >= NOT_BELOW_BEST; below it every p_j > 0 is a candidate). A skipped
 *      j has a ratio below that best, or p_j 0 (ratio 0 or NaN): argmax_ratio's scan would not
 *      have chosen it, as best only grows, a later equal ratio never wins, a NaN never counts;
 *   2. id 0 is always made, as argmax_ratio starts from it (a NaN there keeps 0);
 *   3. every draw's words are made, in order, a block at a time: g ends where the row's draws
 *      end, and the candidates' floats equal torch_exponential_f32_serial's.
 * For a flat distribution of V ids about ln V ids after the first block are candidates; a peaked
 * one has fewer. */
static int32_t argmax_ratio_drawn(const float *e, float inv, TorchGenerator *g, int n) {
    uint32_t w[2 * DRAW_BLOCK];
    float r[ARGMAX_BLOCK], q[ARGMAX_BLOCK];
    int32_t candidate[ARGMAX_BLOCK];
    float best = 0.0f;
    int32_t chosen = 0;
    bool nan_at_0 = false;
    for (int b0 = 0; b0 < n; b0 += DRAW_BLOCK) {
        int bn = n - b0 < DRAW_BLOCK ? n - b0 : DRAW_BLOCK;
        torch_exponential_words(g, w, (size_t)bn);
        if (b0 == 0) {
            float q0;
            torch_exponential_from_words(w, &q0, 1, DRAW_PATH_SCALAR);
            best = e[0] * inv / q0;
            nan_at_0 = isnan(best);
        }
        if (nan_at_0) continue; /* argmax_ratio returns 0; the words are still made (3) */
        for (int s = 0; s < bn; s += ARGMAX_BLOCK) {
            int start = b0 + s, m = bn - s < ARGMAX_BLOCK ? bn - s : ARGMAX_BLOCK;
            const uint32_t *ws = w + 2 * s;
            float bound = best >= NOT_BELOW_BEST ? best * SKIP_MARGIN : 0.0f;
            int count = 0;
#pragma omp simd reduction(+ : count)
            for (int j = 0; j < m; j++) {
                float p = e[start + j] * inv;
                int32_t c = (p > 0.0f) & !(p < bound * draw_u_float(ws + 2 * j));
                candidate[j] = c;
                count += c;
            }
            if (count == 0) continue;
            if (count > ARGMAX_BLOCK / 8) /* the first blocks: vectorised, as the serial draws */
                torch_exponential_from_words(ws, q, (size_t)m, DRAW_PATH_BEST);
            else
                for (int j = 0; j < m; j++)
                    if (candidate[j])
                        torch_exponential_from_words(ws + 2 * j, &q[j], 1, DRAW_PATH_SCALAR);
            for (int j = 0; j < m; j++)
                r[j] = candidate[j] ? e[start + j] * inv / q[j] : -INFINITY;
            block_best(r, m, start, &best, &chosen);
        }
    }
    return nan_at_0 ? 0 : chosen;
}

int32_t sampler_next_exponential(float *z, int vocab, const SamplingParams *p,
                                 const int32_t *history, int n_history, const float *q, float *work,
                                 int32_t *order, float *logprob) {
    sampler_process(z, vocab, p, history, n_history, work, order);
    if (!p->do_sample) return greedy_choice(z, vocab, logprob);
    float *e = work + vocab;
    float inv = softmax_unscaled(z, e, vocab);
    int32_t chosen = argmax_ratio(e, inv, q, vocab);
    *logprob = logf(e[chosen] * inv);
    return chosen;
}

int32_t sampler_next_exponential_drawn(float *z, int vocab, const SamplingParams *p,
                                       const int32_t *history, int n_history, TorchGenerator *g,
                                       float *work, int32_t *order, float *logprob) {
    sampler_process(z, vocab, p, history, n_history, work, order);
    if (!p->do_sample) {
        torch_exponential_skip(g, (uint64_t)vocab);
        return greedy_choice(z, vocab, logprob);
    }
    float *e = work + vocab;
    float inv = softmax_unscaled(z, e, vocab);
    int32_t chosen = argmax_ratio_drawn(e, inv, g, vocab);
    *logprob = logf(e[chosen] * inv);
    return chosen;
}
