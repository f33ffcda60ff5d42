/* Trained weights (or an adapter) against a reference run's safetensors file, with the rule the
 * training parity tests share: every entry within 1e-4 of its tensor's largest, but for at most
 * 2 entries per tensor, which must be within 1e-3. Why the 2: an entry whose gradient sits below
 * fp32 rounding (|g| ~ 1e-6 of the tensor's largest) gets its AdamW step direction from the
 * rounding, in TRL as here. Measured on pref_train's ipo case: one such entry of layer 1's
 * k_proj; TRL itself moves it by 1.8e-5 of the scale between 1 and 2 threads. */
#ifndef RLHF_TESTS_TRAINED_WEIGHTS_H
#define RLHF_TESTS_TRAINED_WEIGHTS_H

#include "model/model.h"

/* Checks every trained tensor of m (or of lora when given) against `path`, reporting under
 * `name`; *worst receives the largest difference relative to its tensor's largest entry. */
void trained_weights_check(const char *name, const char *path, const Model *m,
                           const LoraAdapter *lora, double *worst);

/* The largest difference between the weights of two saved model directories; *scale (may be
 * NULL) receives the first one's largest weight. */
double saved_weights_gap(const char *a_dir, const char *b_dir, double *scale);

/* Every tensor of safetensors file b against a's tensor of the same name (an adapter, a model,
 * an optimizer state): the largest |a - b|, *scale the largest |b|, *worst_tensor (may be NULL)
 * the largest difference relative to its own tensor's largest |b|. Unequal tensor counts, or a
 * tensor missing from a or of another size, fail a CHECK naming `what`; the rest are still
 * compared. INFINITY when either
 * file does not open. */
double safetensors_files_gap(const char *what, const char *a_path, const char *b_path,
                             double *scale, double *worst_tensor);

#endif
