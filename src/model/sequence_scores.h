/* Completion log-likelihoods: the sum over completion tokens of log p(token | everything
 * before it), for many prompt/completion pairs, batched with right padding. */
#ifndef RLHF_MODEL_SEQUENCE_SCORES_H
#define RLHF_MODEL_SEQUENCE_SCORES_H

#include "data/prompt_completion.h"
#include "model/model.h"

typedef struct {
    double logp; /* sum of completion-token log-probs */
    int tokens;  /* completion length */
} SequenceScore;

/* Scores set->items in batches of `batch_size` (in file order); scores[i] belongs to item i.
 * A score equals transformers' for that sequence alone, whatever the batch size.
 * Returns 0, or -1 with an error. */
int sequence_scores(const Model *m, const PromptCompletionSet *set, int batch_size,
                    SequenceScore *scores);

#endif
