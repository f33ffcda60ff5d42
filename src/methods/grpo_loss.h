/* GRPO's per-token loss and its gradient for one micro-batch (trl-methods.md §5.7), as TRL 1.9's
 * GRPOTrainer._compute_loss computes it for loss types grpo, bnpo, dr_grpo and dapo:
 *
 *   ratio r = exp(ℓ − ℓ_old) per token, or exp(mean over the row's tokens of ℓ − ℓ_old) per
 *   sequence (GSPO); policy term −min(min(r, δ)·A, clamp(r, 1−ε, 1+ε_high)·A), zeroed outside the
 *   entropy mask; + β·k3 KL to the reference (times r with the bias correction); then each loss
 *   type's normalisation of the masked sum.
 *
 * Rows are completions; every array is (rows, width), aligned on completion tokens. The
 * gradient follows torch's rules at the kinks: clamp passes it on its closed interval, and
 * min() of two equal values sends half to each. */
#ifndef RLHF_METHODS_GRPO_LOSS_H
#define RLHF_METHODS_GRPO_LOSS_H

#include <stdbool.h>
#include <stdint.h>

/* TRL's loss_type: how the masked sum of per-token losses is normalised. */
typedef enum { GRPO_LOSS_GRPO, GRPO_LOSS_BNPO, GRPO_LOSS_DR_GRPO, GRPO_LOSS_DAPO } GrpoLossType;

/* The settings the loss reads: its own, so that methods/ needs no configuration reader
 * (config/grpo_config.h fills one from a GrpoConfig with grpo_loss_options_from_config). */
typedef struct {
    GrpoLossType loss_type;
    double epsilon, epsilon_high; /* ε, ε_high: the clip range [1 − ε, 1 + ε_high] */
    double delta;                 /* δ, the two-sided clip's upper bound; NAN: none */
    double beta;                  /* β, the KL coefficient; 0: no reference log-probs read */
    bool sequence_level_is;       /* one ratio per sequence (GSPO) instead of per token */
    bool use_bias_correction_kl;  /* the KL term times the ratio */
    double top_entropy_quantile;  /* ρ: the share of tokens kept by entropy; 1: every token */
    int max_completion_length;    /* dr_grpo's normaliser */
} GrpoLossOptions;

typedef struct {
    int rows, width;
    const float *logp;       /* ℓ: the policy's log-probs (temperature-scaled) */
    const float *old_logp;   /* ℓ_old; NULL: ℓ itself, detached (ratio 1) */
    const float *ref_logp;   /* ℓ_ref; read only when beta != 0 */
    const float *entropy;    /* per token, for the entropy mask and the metric */
    const float *advantages; /* (rows) */
    const uint8_t *mask;     /* the loss mask */
    /* normalisers: gradient accumulation steps (1 in evaluation), and for dapo the loss-mask
     * tokens of the whole generation batch */
    int accumulation_steps;
    double generation_batch_tokens;
} GrpoMicroBatch;

/* The metrics TRL appends once per micro-batch (NaN where TRL's value is NaN). */
typedef struct {
    double kl, entropy;
    double clip_low_mean, clip_high_mean, clip_region_mean, clip_low_min, clip_high_max;
} GrpoLossMetrics;

/* Writes dloss/dℓ to dlogp (every cell of rows × width) and the micro-batch's metrics to
 * *metrics, and returns the micro-batch loss. Never fails. */
double grpo_loss(const GrpoLossOptions *opt, const GrpoMicroBatch *mb, float *dlogp,
                 GrpoLossMetrics *metrics);

/* torch.quantile's linear interpolation at q in [0, 1] of n values (sorted in place). */
double grpo_quantile(float *values, int n, double q);

#endif
