/* The reference policy a run's config asks for (trl-methods.md §1.3), for DPO/IPO, KTO and GRPO
 * with beta != 0. */
#ifndef RLHF_TRAIN_REFERENCE_H
#define RLHF_TRAIN_REFERENCE_H

#include "config/train_config.h"
#include "model/reference_policy.h"

#include <stdio.h>

/* With an adapter (lora, attached to m here), the same network with the adapter switched off
 * (no second copy), or, continuing from lora_model_dir, with a frozen copy of that adapter as it
 * was loaded (TRL's "ref" adapter); without one (or with rl_adapter_ref_model) a frozen copy of
 * base_model, kept in bf16 with bf16: true, and in the training device's memory when the run
 * computes on one (cfg->train_device). One line on `log` says which. What *ref loads it owns:
 * train_reference_close frees it. Returns 0, or -1 with an error, and nothing held. */
int train_reference_open(ReferencePolicy *ref, const TrainConfig *cfg, Model *m, LoraAdapter *lora,
                         FILE *log);

/* Frees what train_reference_open made (a copy it moved to the training device included). */
void train_reference_close(ReferencePolicy *ref);

/* TRL's SyncRefModelCallback (TR-DPO): every parameter of the reference becomes
 * alpha * policy + (1 - alpha) * reference, in fp32 as torch's mul_(1 - alpha).add_(p, alpha)
 * computes it. Only a reference that is a model of its own in fp32 (a frozen copy): with an
 * adapter TRL has no separate reference to move either, and one kept in bf16 is refused too.
 * Returns 0, or -1 with an error saying which. */
int train_reference_sync(ReferencePolicy *ref, const Model *policy, double alpha);

/* Whether train_reference_sync can move ref towards a policy with policy_adapter (NULL: full
 * fine-tuning): 0, or -1 with its error. */
int train_reference_can_sync(const ReferencePolicy *ref, const LoraAdapter *policy_adapter);

#endif
