/* ORPO, as TRL 1.9's experimental ORPOTrainer computes it (trl-methods.md §3): no reference
 * model. Per pair the average completion log-probs P_c = π_c/|y_c|, P_r = π_r/|y_r| give the
 * log odds ratio
 *   lo = (P_c − P_r) − (log(1 − e^{P_c}) − log(1 − e^{P_r})),
 * and the micro-batch loss is
 *   L = NLL − mean_pairs(β · logσ(lo)),
 * NLL being the token-mean cross-entropy over every token of the chosen sequences, prompt
 * included (each sequence's first token has no prediction): −Σ_i seq_logp_chosen[i] /
 * Σ_i seq_len_chosen[i]. Its gradient goes to d_seq_chosen, the odds-ratio term's to d_chosen
 * and d_rejected. TRL casts the average log-probs to float32 for the odds ratio; this runs in
 * double (the two agree to ~1e-7). */
#ifndef RLHF_METHODS_ORPO_H
#define RLHF_METHODS_ORPO_H

#include "methods/pref_loss.h"

typedef struct {
    double beta; /* 0.1 (the paper's λ; Axolotl's orpo_alpha) */
} OrpoOptions;

/* The loss, its gradient and TRL's metrics: rewards/chosen (mean β·P_c), rewards/rejected,
 * rewards/accuracies, rewards/margins, logps/rejected, logps/chosen (average log-probs),
 * nll_loss, log_odds_ratio (mean logσ(lo)), log_odds_chosen (mean lo). b->ref_* are not read;
 * b->seq_logp_chosen and b->seq_len_chosen are. Returns 0, or -1 with an error: n < 1, a
 * completion without tokens (TRL would divide by 0), no chosen tokens at all for the NLL. */
int orpo_loss(const OrpoOptions *opt, const PrefBatch *b, PrefLossOutput *out);

#endif
