/* The backward pass: from dL/dlogp of the selected target tokens to the gradient of every
 * parameter (design.md: methods give dL/dlogp, the model turns it into parameter gradients).
 * Backward runs the layers in reverse, reading the activations a ForwardTape kept. */
#ifndef RLHF_MODEL_BACKWARD_H
#define RLHF_MODEL_BACKWARD_H

#include "model/activations.h"

/* logp (B*T) as model_token_logprobs gives it, from a tape's final hidden states. Returns 0, or
 * -1 with an error when memory runs out. */
int model_tape_logprobs(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                        float *logp);

/* The same, with the statistics of the logits that predict each selected position (stats[i]
 * for the logits at i-1; zero elsewhere): TRL's entropy, mean-logit and token-accuracy metrics. */
int model_tape_logprobs_stats(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                              float *logp, LogitStats *stats);

/* Accumulates into grads (m->n_params floats, laid out like m->params; NULL when the base is
 * frozen) and lora_grads (the adapter's n_params, laid out like its parameters; NULL when there
 * is none to train) the gradient of
 * L = Σ dlogp[i] · logp[i] over the positions target_mask selects (as in
 * model_token_logprobs; dlogp elsewhere is ignored). With tied embeddings the lm_head and the
 * embedding share one gradient. Returns 0, or -1 with an error when memory runs out. */
int model_backward(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                   const float *dlogp, float *grads, float *lora_grads);

#endif
