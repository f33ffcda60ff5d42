/* What every preference loss (DPO and its variants, IPO, ORPO, CPO/SimPO) sees and gives back
 * for one micro-batch of n pairs (design.md: a method sees log-probs only).
 *
 * The trainer sums per-token log-probs into per-sequence values; the loss returns the
 * micro-batch loss as TRL computes it and its gradient with respect to those sums, which the
 * trainer spreads back over the tokens:
 *   dL/dlogp_t = d_chosen[i]        for every completion token t of pair i's chosen sequence
 *              + d_seq_chosen[i]    for every token t >= 1 of that sequence, prompt included
 *   (and d_rejected[i] for the rejected sequence's completion tokens).
 * Metrics carry TRL's key names; the trainer averages each over the micro-batches between two
 * log lines, as TRL does. */
#ifndef RLHF_METHODS_PREF_LOSS_H
#define RLHF_METHODS_PREF_LOSS_H

#include <stddef.h>

typedef struct {
    int n;                                     /* pairs */
    const double *logp_chosen, *logp_rejected; /* Σ completion-token logp under the policy */
    const int *len_chosen, *len_rejected;      /* completion tokens (after truncation) */
    const double *ref_chosen, *ref_rejected;   /* the same sums under the reference; NULL for
                                                  methods without one (ORPO, CPO/SimPO) */
    const double *seq_logp_chosen; /* Σ logp over every token of the chosen sequence (prompt
                                      included; the first token has none): ORPO's NLL */
    const int *seq_len_chosen;     /* the count of those tokens */
} PrefBatch;

#define PREF_MAX_METRICS 24

typedef struct {
    const char *name[PREF_MAX_METRICS]; /* TRL's keys: "rewards/chosen", ... (static strings) */
    double value[PREF_MAX_METRICS];
    int n;
} PrefMetrics;

typedef struct {
    double loss;      /* the micro-batch loss */
    double *d_chosen; /* [n] dL/d logp_chosen[i] (caller-allocated) */
    double *d_rejected;
    double *d_seq_chosen; /* [n] dL/d seq_logp_chosen[i]; all zero for most losses */
    PrefMetrics metrics;
} PrefLossOutput;

/* Appends a metric (name must outlive the output: a string literal). */
void pref_metrics_add(PrefMetrics *m, const char *name, double value);

#endif
