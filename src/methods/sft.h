/* Supervised fine-tuning loss on per-token log-probs (design.md: a method only sees logp).
 * The loss of a gradient-accumulation window is the mean negative log-likelihood over every
 * label token of the window, as HF's Trainer computes it when the model takes
 * num_items_in_batch: each micro-batch contributes -Σ logp / N_window, N_window being the label
 * tokens of the whole window. */
#ifndef RLHF_METHODS_SFT_H
#define RLHF_METHODS_SFT_H

#include <stddef.h>
#include <stdint.h>

/* Counts the positions that carry a label (label_mask set). */
size_t sft_count_labels(const uint8_t *label_mask, size_t n);

/* For one micro-batch: returns -Σ_{label} logp / n_window and writes dlogp = -1/n_window on
 * label positions, 0 elsewhere. */
double sft_loss(const float *logp, const uint8_t *label_mask, size_t n, size_t n_window,
                float *dlogp);

#endif
