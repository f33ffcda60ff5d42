/* The reference policy of DPO, IPO, KTO and GRPO with beta > 0: the frozen model the trained
 * policy is compared with (axolotl-config.md §2).
 *
 * When an adapter is trained, the reference is the same network with the adapter switched off
 * (TRL's and Axolotl's default): no second copy of the weights exists. Otherwise (full
 * fine-tuning, or rl_adapter_ref_model: true) it is a separate, frozen model. Methods only ask
 * for log-probs; they never see which of the two it is. */
#ifndef RLHF_MODEL_REFERENCE_POLICY_H
#define RLHF_MODEL_REFERENCE_POLICY_H

#include "model/forward.h"
#include "model/model.h"

/* Invariants:
 *  1. model is never NULL once made; at most one of adapter and initial is set.
 *  2. What the reference owns (a frozen model or an initial adapter it loaded: owned_model,
 *     owned_initial) is freed by reference_policy_close and by nothing else; model or initial
 *     then point at it. A ReferencePolicy made from the policy's own network owns nothing. */
typedef struct {
    Model *model;               /* the network the reference log-probs come from */
    LoraAdapter *adapter;       /* switched off around each call; NULL for a separate model */
    const LoraAdapter *initial; /* put in its place around each call instead; NULL: none */
    Model *owned_model;         /* reference_policy_open_model's frozen copy (= model), or NULL */
    LoraAdapter *owned_initial; /* reference_policy_open_initial_adapter's (= initial), or NULL */
} ReferencePolicy;

/* The base of `policy` with its adapter (policy->lora, which must be `adapter`) switched off. */
void reference_policy_from_adapter(ReferencePolicy *ref, Model *policy, LoraAdapter *adapter);

/* The base of `policy` with a frozen copy of the adapter as it was before training: TRL's "ref"
 * adapter when training continues from an existing one (lora_model_dir). */
void reference_policy_from_initial_adapter(ReferencePolicy *ref, Model *policy,
                                           const LoraAdapter *initial);

/* A separate frozen model (its weights are not touched). */
void reference_policy_from_model(ReferencePolicy *ref, Model *frozen);

/* Loads the model in model_dir as a separate frozen reference owned by ref (invariant 2).
 * Returns 0, or -1 with an error naming the directory, and nothing held. */
int reference_policy_open_model(ReferencePolicy *ref, const char *model_dir);

/* Loads the adapter in adapter_dir as the frozen initial adapter of `policy` (whose config it
 * must fit), owned by ref (invariant 2). Returns 0, or -1 with an error, and nothing held. */
int reference_policy_open_initial_adapter(ReferencePolicy *ref, Model *policy,
                                          const char *adapter_dir);

/* Frees what ref owns and zeroes it. Safe on a zeroed ReferencePolicy, on one that owns nothing
 * and twice. */
void reference_policy_close(ReferencePolicy *ref);

/* Per-token log-probs under the reference, as model_token_logprobs gives them. The model's
 * adapter (its enabled flag, or which adapter is attached) is restored before returning,
 * whatever happens. Returns 0, or -1 with an
 * error. */
int reference_token_logprobs(const ReferencePolicy *ref, const TokenBatch *b,
                             const uint8_t *target_mask, float *logp);

#endif
