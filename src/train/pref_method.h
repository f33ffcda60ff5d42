/* The preference methods (DPO, IPO; ORPO, CPO/SimPO and KTO to come) as a TrainMethod: for each
 * micro-batch of pairs it sums the per-token log-probs into per-sequence values, gets the
 * reference's (a switched-off adapter, a frozen model, or values precomputed once), calls the
 * loss, and spreads the loss's gradient back over the tokens. The micro-batch loss is divided by
 * the window's micro-batch count, as HF's Trainer does for TRL's preference trainers.
 *
 * Metrics follow TRL: each micro-batch contributes one value per key; a log line carries the
 * mean of each key over the micro-batches since the previous line (num_tokens: the running
 * total of attention-mask tokens trained on). */
#ifndef RLHF_TRAIN_PREF_METHOD_H
#define RLHF_TRAIN_PREF_METHOD_H

#include "config/train_config.h"
#include "methods/dpo.h"
#include "model/reference_policy.h"
#include "train/pref_batch.h"

#include <jansson.h>

#define PREF_MAX_KEYS 32

typedef struct {
    RlMethod rl;
    DpoOptions dpo;
    const ReferencePolicy *ref;   /* NULL: no reference needed, or precomputed */
    const double *pre_ref_chosen; /* per dataset pair when precomputed; else NULL */
    const double *pre_ref_rejected;
    const PrefMicroBatch *window; /* the micro-batches of the step being run */
    int n_window;
    /* metric sums since the last log line */
    const char *key[PREF_MAX_KEYS];
    double sum[PREF_MAX_KEYS];
    int count[PREF_MAX_KEYS];
    int n_keys;
    double num_tokens; /* attention-mask tokens trained on so far */
} PrefMethod;

/* Options from the config (loss types, beta, label smoothing, ...). Returns 0, or -1 with an
 * error naming the key. */
int pref_method_init(PrefMethod *pm, const TrainConfig *cfg);

/* The TrainMethod view; set pm->window / n_window before each trainer_step. */
TrainMethod pref_method_train_method(PrefMethod *pm);

/* Adds the mean of each metric since the last call to entry (prefix "eval_" or ""), and starts
 * over. */
void pref_method_flush_metrics(PrefMethod *pm, json_t *entry, const char *prefix);

/* The reference's summed completion log-probs of each pair of the micro-batch. Returns 0, or -1
 * with an error. */
int pref_reference_sums(const ReferencePolicy *ref, const PrefMicroBatch *pmb, double *chosen,
                        double *rejected);

#endif
