/* DPO and its loss variants, as TRL 1.9's DPOTrainer computes them (trl-methods.md §1.4): per
 * pair, the policy and reference sums of completion log-probs give the log-ratios
 * h_c = π_c − ref_c and h_r = π_r − ref_r; each loss type maps them to a per-pair loss; the
 * micro-batch loss is Σ_k w_k · mean_pairs(loss_k). rl: ipo is DPO with the ipo loss.
 *
 * Only the reverse-KL scores (s = h) are implemented: TRL's f_divergence_type, ld_alpha and
 * use_weighting have no option here. Loss types that do not read a pair on its own:
 *   aot, aot_unpaired  sort across the micro-batch (the gradient follows the permutation);
 *   sft                token-mean NLL over every chosen completion token of the micro-batch.
 * legacy_compat restores what TRL <= 0.28 did with the same options: sigmoid with
 * label_smoothing is conservative DPO, rpo_alpha adds rpo_alpha · sft, exo_pair with
 * label_smoothing 0 uses 1e-3 (trl-methods.md §10). Not reproduced from TRL <= 0.28: its rpo NLL
 * also skipped completion tokens whose id is 0 (cross_entropy's ignore_index=0 on labels it had
 * zeroed outside the completion), and bco_pair's running mean of rewards kept across steps. */
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
    double label_smoothing; /* 0; read by robust, exo_pair (must be > 0), aot, aot_unpaired
                               (and by sigmoid with legacy_compat: cDPO) */
    double discopop_tau;    /* 0.05 */
    bool legacy_compat;     /* TRL <= 0.28: sigmoid with label smoothing is cDPO */
    double rpo_alpha;       /* legacy_compat only: + rpo_alpha · NLL(chosen); 0: off */
    DpoLossType types[DPO_MAX_LOSSES];
    double weights[DPO_MAX_LOSSES];
    int n_types;
} DpoOptions;

/* "sigmoid", "hinge", ... -> the type. Returns 0, or -1 with an error naming the accepted names
 * (TRL 1.9's: the legacy name aot_pair is not one; it is aot_unpaired). */
int dpo_loss_type_parse(const char *name, DpoLossType *out);

/* The loss type's name as TRL spells it. */
const char *dpo_loss_type_name(DpoLossType type);

/* Whether the options make a loss TRL can compute: 1..DPO_MAX_LOSSES types; exo_pair needs
 * 0 < label_smoothing < 1 (TRL rejects 0; outside (0,1) its logs are NaN); robust cannot take
 * label_smoothing 0.5 (TRL divides by 1 − 2ε); ipo and sppo_hard divide by beta, discopop by
 * discopop_tau; rpo_alpha needs legacy_compat (TRL 1.9 has no rpo_alpha: loss_type
 * [sigmoid, sft] with weights [1, α] is its replacement). Returns 0, or -1 with an error. */
int dpo_options_check(const DpoOptions *opt);

/* The micro-batch loss, its gradient (d_chosen, d_rejected; d_seq_chosen is zeroed) and TRL's
 * metrics (rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins, logps/chosen,
 * logps/rejected; with legacy_compat and rpo_alpha also nll_loss, as TRL <= 0.28 logged it).
 * b->ref_* are required, b->n >= 1. Returns 0, or -1 with an error (dpo_options_check's, or an
 * sft term on a micro-batch without chosen completion tokens); out is then unspecified. */
int dpo_loss(const DpoOptions *opt, const PrefBatch *b, PrefLossOutput *out);

#endif
