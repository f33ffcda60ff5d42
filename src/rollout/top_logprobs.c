/* Top-N log-probabilities of a row of logits (rollout/top_logprobs.h). */
#include "rollout/top_logprobs.h"

#include <math.h>

double logprobs_log_normalizer(const float *z, int vocab) {
    float max = -INFINITY;
    for (int j = 0; j < vocab; j++)
        if (z[j] > max) max = z[j];
    if (max == -INFINITY) return -INFINITY;
    double sum = 0;
    for (int j = 0; j < vocab; j++)
        if (z[j] != -INFINITY) sum += exp((double)z[j] - (double)max);
    return (double)max + log(sum);
}

void logprobs_top(const float *z, int vocab, double log_normalizer, int n, int32_t *ids,
                  float *lps) {
    /* ids[0..have) holds the best so far, sorted; an id enters when it beats the last kept one
     * (a scan in ascending id order: an equal value never displaces an earlier id) */
    int have = 0;
    for (int j = 0; j < vocab; j++) {
        if (have == n && !(z[j] > z[ids[n - 1]])) continue;
        int at = have < n ? have++ : n - 1;
        while (at > 0 && z[j] > z[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = j;
    }
    for (int k = 0; k < n; k++)
        lps[k] = (float)((double)z[ids[k]] - log_normalizer);
}
