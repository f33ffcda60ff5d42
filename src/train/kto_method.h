/* KTO (rl: kto) as a TrainMethod, step for step TRL 1.9's KTOTrainer (trl-methods.md §2):
 * for each micro-batch of rows (kto_batch.h) it sums the policy's per-token log-probs over each
 * completion, runs the KL rows through the policy forward only (TRL computes them under no_grad:
 * no tape, no backward), gets the reference's sums of both (a switched-off adapter, the adapter
 * as loaded, a frozen model, or values precomputed once), calls kto_loss, and spreads the loss's
 * gradient back over the completion tokens. The micro-batch loss is divided by the window's
 * micro-batch count, as HF's Trainer does for TRL's KTO (model_accepts_loss_kwargs = False).
 *
 * Metrics are TRL's: per micro-batch, `kl`, `entropy` (token-weighted over the completion
 * tokens), `num_tokens` (the running total of attention-mask tokens of the completion rows),
 * `logits/chosen` and `logits/rejected` (token-weighted mean logit over desirable / undesirable
 * completions, only when that kind has tokens), and kto_loss's rewards/logps (each only when its
 * kind is present; rewards/margins only when both are). A log line carries each key's mean over
 * the micro-batches that logged it since the previous line; a key no micro-batch logged is
 * absent, as in TRL's log. */
#ifndef RLHF_TRAIN_KTO_METHOD_H
#define RLHF_TRAIN_KTO_METHOD_H

#include "config/train_config.h"
#include "methods/kto.h"
#include "model/reference_policy.h"
#include "train/kto_batch.h"
#include "train/step_metrics.h"

#include <jansson.h>

typedef struct {
    KtoOptions kto;
    bool with_kl;                /* loss type kto: KL rows are built and scored */
    Model *policy;               /* the model trained (its adapter attached), for the KL rows */
    const ReferencePolicy *ref;  /* NULL when precomputed */
    const double *pre_ref;       /* per dataset row when precomputed; else NULL */
    const double *pre_ref_kl;    /* the same for each row's KL row (with_kl) */
    const KtoMicroBatch *window; /* the micro-batches of the step being run */
    int n_window;
    StepMetrics metrics; /* since the last log line */
} KtoMethod;

/* Options from the config: rl_beta (cfg->beta), kto_desirable_weight, kto_undesirable_weight,
 * and the loss type from trl.loss_type (kto or apo_zero_unpaired; default kto). Enforces TRL's
 * rule that the KL estimate needs micro_batch_size > 1. Returns 0, or -1 with an error naming
 * the key. */
int kto_method_init(KtoMethod *km, const TrainConfig *cfg);

/* The TrainMethod view; set km->policy and km->ref (or the precomputed arrays) once, and
 * km->window / n_window before each trainer_step. */
TrainMethod kto_method_train_method(KtoMethod *km);

/* Adds the mean of each metric since the last call to entry (prefix "eval_" or ""), and starts
 * over. Over several ranks, the mean over every rank's micro-batches, on rank 0; collective. */
void kto_method_flush_metrics(KtoMethod *km, json_t *entry, const char *prefix);

/* The reference's summed completion log-probs of each row of b (ref[n]) and, when b has KL rows
 * and ref_kl is not NULL, of each KL row (ref_kl[n]). Returns 0, or -1 with an error. */
int kto_reference_sums(const ReferencePolicy *ref, const KtoMicroBatch *b, double *ref_sums,
                       double *ref_kl);

#endif
