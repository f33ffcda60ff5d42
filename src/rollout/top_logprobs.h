/* The log-probabilities a server reports next to each token (vLLM's SamplingParams.logprobs):
 * the log-softmax of one row of logits, and the row's N most likely ids under it. */
#ifndef RLHF_ROLLOUT_TOP_LOGPROBS_H
#define RLHF_ROLLOUT_TOP_LOGPROBS_H

#include <stdint.h>

/* log sum_j exp(z[j]) over z[0..vocab), in double with the maximum taken out; -inf entries (ids
 * a processor masked) add nothing. The log-softmax of id j is z[j] - this. */
double logprobs_log_normalizer(const float *z, int vocab);

/* The n (1 <= n <= vocab) largest entries of z[0..vocab) as ids[0..n) and their log-softmax
 * values lps[0..n) (z[id] - log_normalizer), largest first; equal values in ascending id order,
 * so the answer does not depend on how the row was scanned. O(vocab * n) at worst, about
 * O(vocab) for the small n a request may ask for (at most 20). */
void logprobs_top(const float *z, int vocab, double log_normalizer, int n, int32_t *ids,
                  float *lps);

#endif
