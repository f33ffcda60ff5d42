/* CPO, SimPO and AlphaPO, as TRL 1.9's experimental CPOTrainer computes them (trl-methods.md
 * §4): no reference model. Per pair the policy's completion log-prob P is the sum (sigmoid,
 * hinge) or the per-token average (ipo, simpo); with alpha ≠ 0 it is reshaped to
 * g = (1 − e^{−α·P})/α (AlphaPO), else g = P; z = g_c − g_r and
 *   sigmoid  −(1−ε)·logσ(βz) − ε·logσ(−βz)
 *   hinge    max(0, 1 − βz)                    (label_smoothing not read)
 *   ipo      (z − 1/(2β))²                     (label_smoothing not read)
 *   simpo    the sigmoid form at z − γ/β, γ = simpo_gamma
 * L = mean_pairs(loss) + cpo_alpha · NLL, NLL the token-mean cross-entropy over every chosen
 * completion token of the micro-batch (−Σ π_c / Σ |y_c|, not computed when cpo_alpha is 0).
 * Everything lands in d_chosen / d_rejected. */
#ifndef RLHF_METHODS_CPO_H
#define RLHF_METHODS_CPO_H

#include "methods/pref_loss.h"

typedef enum { CPO_SIGMOID, CPO_HINGE, CPO_IPO, CPO_SIMPO } CpoLossType;

typedef struct {
    CpoLossType loss_type;  /* sigmoid */
    double beta;            /* 0.1 */
    double label_smoothing; /* 0 */
    double cpo_alpha;       /* 1.0 (TRL's default: CPO; 0 for pure SimPO) */
    double simpo_gamma;     /* 0.5 */
    double alpha;           /* 0 (AlphaPO's reward shape) */
} CpoOptions;

/* Sets opt->loss_type from TRL's name: sigmoid, hinge, ipo, simpo, or alphapo, which is CPOConfig's
 * sugar for simpo with cpo_alpha = 0 (it overrides opt->cpo_alpha, as TRL does). Returns 0, or -1
 * with an error (kto_pair, which TRL removed from CPO, has its own message). */
int cpo_loss_type_parse(const char *name, CpoOptions *opt);

/* Whether the options make a loss TRL can compute (beta ≠ 0 for ipo and simpo, which divide by
 * it; finite numbers). Returns 0, or -1 with an error. */
int cpo_options_check(const CpoOptions *opt);

/* The loss, its gradient (d_seq_chosen zeroed) and TRL's metrics: rewards/chosen (mean β·g_c),
 * rewards/rejected, rewards/accuracies, rewards/margins, logps/rejected, logps/chosen (summed or
 * averaged as the loss type reads them), nll_loss (0 when cpo_alpha is 0). b->ref_* are not
 * read. Returns 0, or -1 with an error: the options, n < 1, an empty completion where the
 * loss type averages, no chosen completion tokens for the NLL. */
int cpo_loss(const CpoOptions *opt, const PrefBatch *b, PrefLossOutput *out);

#endif
