/* The paired preference methods (DPO and its loss types, IPO, ORPO, CPO/SimPO) as a
 * TrainMethod: for each micro-batch of pairs it sums the per-token log-probs into per-sequence
 * values, gets the reference's for DPO/IPO (a switched-off adapter, a frozen model, or values
 * precomputed once; ORPO and CPO have none), calls the loss, and spreads the loss's gradient
 * back over the tokens. The micro-batch loss is divided by
 * the window's micro-batch count, as HF's Trainer does for TRL's preference trainers.
 *
 * Metrics follow TRL: each micro-batch contributes one value per key; a log line carries the
 * mean of each key over the micro-batches since the previous line (num_tokens: the running
 * total of attention-mask tokens trained on). logits/chosen and logits/rejected are the mean
 * logit over the positions that predict a completion token, for every method, as DPOTrainer
 * reports them; TRL's experimental ORPO/CPO trainers average every position of the padded batch
 * instead, padding included, which makes the figure depend on how much padding a batch has.
 * entropy, num_tokens and mean_token_accuracy (DPOTrainer's) are logged for every method too. */
#ifndef RLHF_TRAIN_PREF_METHOD_H
#define RLHF_TRAIN_PREF_METHOD_H

#include "config/train_config.h"
#include "methods/cpo.h"
#include "methods/dpo.h"
#include "methods/orpo.h"
#include "model/reference_policy.h"
#include "train/pref_batch.h"
#include "train/step_metrics.h"

#include <jansson.h>

typedef struct {
    RlMethod rl;
    DpoOptions dpo;               /* dpo, ipo */
    OrpoOptions orpo;             /* orpo */
    CpoOptions cpo;               /* simpo, cpo */
    const ReferencePolicy *ref;   /* NULL: no reference needed, or precomputed */
    const double *pre_ref_chosen; /* per dataset pair when precomputed; else NULL */
    const double *pre_ref_rejected;
    const PrefMicroBatch *window; /* the micro-batches of the step being run */
    int n_window;
    StepMetrics metrics; /* since the last log line */
} PrefMethod;

/* Options from the config (loss types, beta, label smoothing, ...). Returns 0, or -1 with an
 * error naming the key. */
int pref_method_init(PrefMethod *pm, const TrainConfig *cfg);

/* Whether the method compares with a reference policy (DPO, IPO). */
bool pref_method_needs_reference(const PrefMethod *pm);
/* Whether the loss reads every position's log-prob, prompt included (ORPO's NLL): the batch's
 * label mask must then cover every real token but the first of each row. */
bool pref_method_all_positions(const PrefMethod *pm);
/* The TrainMethod view; set pm->window / n_window before each trainer_step. */
TrainMethod pref_method_train_method(PrefMethod *pm);

/* Adds the mean of each metric since the last call to entry (prefix "eval_" or ""), and starts
 * over. Over several ranks, the mean over every rank's micro-batches, on rank 0; collective. */
void pref_method_flush_metrics(PrefMethod *pm, json_t *entry, const char *prefix);

/* The reference's summed completion log-probs of each pair of the micro-batch. Returns 0, or -1
 * with an error. */
int pref_reference_sums(const ReferencePolicy *ref, const PrefMicroBatch *pmb, double *chosen,
                        double *rejected);

#endif
