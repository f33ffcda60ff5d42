/* Completion log-likelihoods: the sum over completion tokens of log p(token | everything
 * before it), for many prompt/completion pairs, batched with right padding. */
#ifndef RLHF_MODEL_SEQUENCE_SCORES_H
#define RLHF_MODEL_SEQUENCE_SCORES_H

#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* One sequence to score: the prompt's tokens then the completion's, in ids (borrowed). Only the
 * completion's tokens are scored; the prompt conditions them. */
typedef struct {
    const int32_t *ids;
    int prompt_len;     /* >= 1: the first completion token needs a token before it */
    int completion_len; /* >= 1 */
} SequenceToScore;

typedef struct {
    double logp; /* sum of completion-token log-probs */
    int tokens;  /* completion length */
} SequenceScore;

/* Scores seqs[0 .. n) in batches of `batch_size`, in order; scores[i] (caller-allocated, n of
 * them) belongs to seqs[i]. A score equals transformers' for that sequence alone, whatever the
 * batch size. Returns 0, or -1 with an error; when a batch failed, *failed (when not NULL) is
 * the index of its first sequence, and n otherwise (a bad batch size). */
int sequence_scores(const Model *m, const SequenceToScore *seqs, size_t n, int batch_size,
                    SequenceScore *scores, size_t *failed);

#endif
