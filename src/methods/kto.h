/* KTO on unpaired rows, as TRL 1.9's KTOTrainer computes it (trl-methods.md §2.3): each row is a
 * completion labelled desirable or undesirable, with h = π − ref its summed completion log-ratio.
 *   kto:               desirable 1 − σ(β(h − kl)), undesirable 1 − σ(β(kl − h)), where
 *                      kl = max(0, mean over the KL rows of π_KL − ref_KL) is detached;
 *   apo_zero_unpaired: desirable 1 − σ(βh), undesirable σ(βh) (no KL rows).
 * Row losses are scaled by desirable_weight / undesirable_weight and averaged over all rows
 * (NaN rows skipped, as torch's nanmean does).
 *
 * The KL rows are the batch's prompts paired with other rows' completions (the data side builds
 * them); their policy sums carry no gradient, so the trainer runs them without backward. With
 * several processes TRL averages the per-process KL means before clamping: compute
 * kto_kl_mean() on each process, average, and call kto_loss_with_kl(). */
#ifndef RLHF_METHODS_KTO_H
#define RLHF_METHODS_KTO_H

#include "methods/pref_loss.h"

#include <stdbool.h>

typedef enum { KTO_LOSS_KTO, KTO_LOSS_APO_ZERO_UNPAIRED } KtoLossType;

typedef struct {
    KtoLossType loss_type;     /* kto */
    double beta;               /* 0.1 */
    double desirable_weight;   /* 1.0 */
    double undesirable_weight; /* 1.0 */
} KtoOptions;

typedef struct {
    int n;                 /* rows */
    const double *logp;    /* [n] Σ completion-token logp under the policy */
    const int *len;        /* [n] completion tokens (the trainer spreads d_logp over them) */
    const double *ref;     /* [n] the same sums under the reference */
    const bool *desirable; /* [n] the row's label */
    const double *kl_logp; /* [n] KL rows under the policy (no gradient); kto only */
    const double *kl_ref;  /* [n] KL rows under the reference; kto only */
} KtoBatch;

typedef struct {
    double loss;
    double *d_logp; /* [n] dL/d logp[i] (caller-allocated) */
    PrefMetrics metrics;
} KtoLossOutput;

/* "kto" / "apo_zero_unpaired" -> the type. Returns 0, or -1 with an error. */
int kto_loss_type_parse(const char *name, KtoLossType *out);

/* mean_i(kl_logp[i] − kl_ref[i]) over the batch's KL rows, unclamped (0 when n is 0). */
double kto_kl_mean(const KtoBatch *b);

/* The micro-batch loss, d_logp and TRL's metrics: kl, then rewards/chosen and logps/chosen when
 * the batch has desirable rows, rewards/rejected and logps/rejected when it has undesirable
 * ones, rewards/margins when it has both (each a sum over that kind's rows divided by their
 * count). kl is the batch's own KL mean (kto) or 0 (apo_zero_unpaired). Returns 0, or -1 with
 * an error: n < 1, kto without KL rows. */
int kto_loss(const KtoOptions *opt, const KtoBatch *b, KtoLossOutput *out);

/* The same with the KL mean given (before the clamp at 0): the cross-process mean of
 * kto_kl_mean(). Ignored for apo_zero_unpaired. */
int kto_loss_with_kl(const KtoOptions *opt, const KtoBatch *b, double kl_mean, KtoLossOutput *out);

#endif
