#include "model/reference_policy.h"

void reference_policy_from_adapter(ReferencePolicy *ref, const Model *policy,
                                   LoraAdapter *adapter) {
    ref->model = policy;
    ref->adapter = adapter;
}

void reference_policy_from_model(ReferencePolicy *ref, const Model *frozen) {
    ref->model = frozen;
    ref->adapter = NULL;
}

int reference_token_logprobs(const ReferencePolicy *ref, const TokenBatch *b,
                             const uint8_t *target_mask, float *logp) {
    if (!ref->adapter) return model_token_logprobs(ref->model, b, target_mask, logp);
    bool was_enabled = ref->adapter->enabled;
    ref->adapter->enabled = false;
    int rc = model_token_logprobs(ref->model, b, target_mask, logp);
    ref->adapter->enabled = was_enabled;
    return rc;
}
