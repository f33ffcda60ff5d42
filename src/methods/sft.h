/* Supervised fine-tuning loss on per-token log-probs (design.md: a method only sees logp).
 * The loss of a gradient-accumulation window is the mean negative log-likelihood over every
 * label token of the window, as HF's Trainer computes it when the model takes
 * num_items_in_batch: each micro-batch contributes -Σ logp / N_window, N_window being the label
 * tokens of the whole window.
 *
 * Invariants:
 *  1. label_mask is (rows, t_len), row-major; position t of a row is the target predicted from
 *     positions < t, so position 0 of a row is never a target, whatever its mask says (a
 *     `type: completion` row labels its BOS). transformers' Trainer counts num_items_in_batch
 *     over labels[..., 1:] for a causal LM (ForCausalLMLoss shifts), so the count and the loss
 *     here skip column 0 alike: a label there neither adds to the loss nor to the denominator. */
#ifndef RLHF_METHODS_SFT_H
#define RLHF_METHODS_SFT_H

#include <stddef.h>
#include <stdint.h>

/* Counts the positions t >= 1 of each of the rows that carry a label (invariant 1). */
size_t sft_count_labels(const uint8_t *label_mask, size_t rows, size_t t_len);

/* For one micro-batch of rows x t_len: returns -Σ_{label, t >= 1} logp / n_window and writes
 * dlogp = -1/n_window on those label positions, 0 elsewhere (position 0 included). */
double sft_loss(const float *logp, const uint8_t *label_mask, size_t rows, size_t t_len,
                size_t n_window, float *dlogp);

#endif
