#include "model/reference_policy.h"

void reference_policy_from_adapter(ReferencePolicy *ref, Model *policy, LoraAdapter *adapter) {
    *ref = (ReferencePolicy){policy, adapter, NULL};
}

void reference_policy_from_initial_adapter(ReferencePolicy *ref, Model *policy,
                                           const LoraAdapter *initial) {
    *ref = (ReferencePolicy){policy, NULL, initial};
}

void reference_policy_from_model(ReferencePolicy *ref, Model *frozen) {
    *ref = (ReferencePolicy){frozen, NULL, NULL};
}

int reference_token_logprobs(const ReferencePolicy *ref, const TokenBatch *b,
                             const uint8_t *target_mask, float *logp) {
    if (ref->initial) {
        const LoraAdapter *trained = ref->model->lora;
        ref->model->lora = ref->initial;
        int rc = model_token_logprobs(ref->model, b, target_mask, logp);
        ref->model->lora = trained;
        return rc;
    }
    if (!ref->adapter) return model_token_logprobs(ref->model, b, target_mask, logp);
    bool was_enabled = ref->adapter->enabled;
    ref->adapter->enabled = false;
    int rc = model_token_logprobs(ref->model, b, target_mask, logp);
    ref->adapter->enabled = was_enabled;
    return rc;
}
