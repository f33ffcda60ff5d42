/* DPO and its loss variants, as TRL's DPOTrainer (v1.x) computes them (trl-methods.md §1.4):
 * per pair, the policy and reference sums of completion log-probs give the log-ratios
 * h_c = π_c − ref_c and h_r = π_r − ref_r; each loss type maps them to a per-pair loss; the
 * micro-batch loss is Σ_k w_k · mean_pairs(loss_k). rl: ipo is DPO with the ipo loss. */
#ifndef RLHF_METHODS_DPO_H
#define RLHF_METHODS_DPO_H

#include "methods/pref_loss.h"

#include <stdbool.h>

typedef enum {
    DPO_SIGMOID,
    DPO_HINGE,
    DPO_IPO,
    DPO_EXO_PAIR,
    DPO_NCA_PAIR,
    DPO_ROBUST,
    DPO_BCO_PAIR,
    DPO_SPPO_HARD,
    DPO_AOT,
    DPO_AOT_UNPAIRED,
    DPO_APO_ZERO,
    DPO_APO_DOWN,
    DPO_DISCOPOP,
    DPO_SFT,
    DPO_SIGMOID_NORM,
    DPO_N_LOSS_TYPES
} DpoLossType;

#define DPO_MAX_LOSSES 8

typedef struct {
    double beta;            /* 0.1 */
    double label_smoothing; /* 0; read by robust, exo_pair, aot, aot_unpaired (and sigmoid with
                               legacy_compat: cDPO) */
    double discopop_tau;    /* 0.05 */
    bool legacy_compat;     /* TRL <= 0.28: sigmoid with label smoothing is cDPO */
    double rpo_alpha;       /* legacy_compat only: + rpo_alpha · NLL(chosen); 0: off */
    DpoLossType types[DPO_MAX_LOSSES];
    double weights[DPO_MAX_LOSSES];
    int n_types;
} DpoOptions;

/* "sigmoid", "hinge", ... -> the type. Returns 0, or -1 for an unknown name. */
int dpo_loss_type_parse(const char *name, DpoLossType *out);

/* The micro-batch loss, its gradient and TRL's metrics (rewards/chosen, rewards/rejected,
 * rewards/accuracies, rewards/margins, logps/chosen, logps/rejected). b->ref_* are required.
 * Returns 0, or -1 with an error (an option the loss type cannot take). */
int dpo_loss(const DpoOptions *opt, const PrefBatch *b, PrefLossOutput *out);

#endif
