/* Next-token choice as transformers' generate() makes it: the repetition penalty, then (when
 * sampling) temperature, top-k, top-p and min-p, in that order and with HF's rules for ties and
 * for what is always kept; then a draw from the softmax of what is left, or the argmax.
 *
 * Each sequence has its own random generator, seeded from (seed, sequence number), and draws one
 * number per token: a sequence's text depends only on its seed and its own logits, never on which
 * other sequences share the batch or on the thread count. sampler_next_exponential instead takes
 * the draws transformers' generate() makes from torch's generator (rollout/generate.h). */
#ifndef RLHF_ROLLOUT_SAMPLER_H
#define RLHF_ROLLOUT_SAMPLER_H

#include "common/torch_generator.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool do_sample;           /* false: greedy (the penalty still applies) */
    float temperature;        /* 1: none; must be > 0 when sampling */
    int top_k;                /* 0: none */
    float top_p;              /* 1: none */
    float min_p;              /* 0: none */
    float repetition_penalty; /* 1: none */
} SamplingParams;

/* HF GenerationConfig defaults: do_sample false, temperature 1, top_k 50, top_p 1. */
SamplingParams sampling_defaults(void);

/* Returns 0, or -1 with an error naming the bad parameter. */
int sampling_params_check(const SamplingParams *p);

typedef struct {
    uint64_t s[4]; /* xoshiro256** */
} SamplerRng;

void sampler_rng_seed(SamplerRng *rng, uint64_t seed, uint64_t stream);
double sampler_rng_uniform(SamplerRng *rng); /* [0, 1) */

/* Applies the processors to logits[V] in place (masked entries become -inf), given the tokens
 * seen so far (prompt and generated; each distinct id penalised once). Scratch: `work` needs
 * 2*V floats, `order` 4*V ints. */
void sampler_process(float *logits, int vocab, const SamplingParams *p, const int32_t *history,
                     int n_history, float *work, int32_t *order);

/* Processes, then picks the next token; *logprob receives its log-probability under the
 * processed distribution (what TRL's rollouts report as the sampling log-prob). */
int32_t sampler_next(float *logits, int vocab, const SamplingParams *p, const int32_t *history,
                     int n_history, SamplerRng *rng, float *work, int32_t *order, float *logprob);

/* sampler_next with the draw torch.multinomial(probs, 1) makes on the CPU in transformers'
 * generate(): the processed distribution's probabilities p (float32), and the first id with the
 * largest p / q[id] in float32, q[vocab] being the row's exponential_() draws
 * (common/torch_generator.h) the caller took from torch's generator. Greedy (do_sample false)
 * takes the argmax and reads no q, as transformers then draws nothing. */
int32_t sampler_next_exponential(float *logits, int vocab, const SamplingParams *p,
                                 const int32_t *history, int n_history, const float *q, float *work,
                                 int32_t *order, float *logprob);

/* sampler_next_exponential with q the next `vocab` exponential_() draws of g (the row's), made
 * as they are needed: the same choice and log-prob, and g left past the row's draws (as
 * torch_exponential_f32_serial of vocab leaves it) whatever is chosen, greedy included. Only the
 * draws that could beat the best ratio found before them are turned into floats (sampler.c's
 * argmax_ratio_drawn): the rest cost their words, not a log1p each. */
int32_t sampler_next_exponential_drawn(float *logits, int vocab, const SamplingParams *p,
                                       const int32_t *history, int n_history, TorchGenerator *g,
                                       float *work, int32_t *order, float *logprob);

#endif
