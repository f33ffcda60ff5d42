#include "model/reference_policy.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

void reference_policy_from_adapter(ReferencePolicy *ref, Model *policy, LoraAdapter *adapter) {
    *ref = (ReferencePolicy){.model = policy, .adapter = adapter};
}

void reference_policy_from_initial_adapter(ReferencePolicy *ref, Model *policy,
                                           const LoraAdapter *initial) {
    *ref = (ReferencePolicy){.model = policy, .initial = initial};
}

void reference_policy_from_model(ReferencePolicy *ref, Model *frozen) {
    *ref = (ReferencePolicy){.model = frozen};
}

int reference_policy_open_model(ReferencePolicy *ref, const char *model_dir) {
    Model *frozen = xmalloc(sizeof *frozen);
    if (model_load(frozen, model_dir) != 0) {
        free(frozen);
        return -1;
    }
    *ref = (ReferencePolicy){.model = frozen, .owned_model = frozen};
    return 0;
}

int reference_policy_open_initial_adapter(ReferencePolicy *ref, Model *policy,
                                          const char *adapter_dir) {
    LoraAdapter *initial = xcalloc(1, sizeof *initial);
    if (lora_load(initial, &policy->cfg, adapter_dir) != 0) {
        free(initial);
        return -1;
    }
    *ref = (ReferencePolicy){.model = policy, .initial = initial, .owned_initial = initial};
    return 0;
}

void reference_policy_close(ReferencePolicy *ref) {
    if (ref->owned_model) model_free(ref->owned_model);
    free(ref->owned_model);
    if (ref->owned_initial) lora_free(ref->owned_initial);
    free(ref->owned_initial);
    memset(ref, 0, sizeof *ref);
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
