#include "train/reference.h"

#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"
#include "train/train_device.h"

#include <stdlib.h>

/* A frozen copy computed where the policy trains (train_device.h): its weights moved into be's
 * memory, the host arrays freed (a reference never reads them on the host). A reference kept in
 * bf16 (bf16: true) moves as it is, half the bytes, its products reading the bf16 weights
 * directly (backend_cuda.h invariant 7). */
static int reference_to_device(Model *r, const Backend *be) {
    if (r->params16) {
        size_t n_small = model_bf16_small_count(r);
        uint16_t *half = be->alloc(be, r->n_params * sizeof *half, "the reference model's weights");
        float *small = half ? be->alloc(be, (n_small ? n_small : 1) * sizeof *small,
                                        "the reference model's norms and biases")
                            : NULL;
        if (!small) {
            be->free(be, half);
            return -1;
        }
        be->copy(be, half, r->params16, r->n_params * sizeof *half, BACKEND_HOST_TO_DEVICE);
        be->copy(be, small, r->params_small, n_small * sizeof *small, BACKEND_HOST_TO_DEVICE);
        uint16_t *old_half;
        float *old_small;
        model_rebase_bf16(r, half, small, &old_half, &old_small);
        free(old_half), free(old_small);
        r->backend = be;
        return 0;
    }
    float *dev = be->alloc(be, r->n_params * sizeof(float), "the reference model's weights");
    if (!dev) return -1;
    be->copy(be, dev, r->params, r->n_params * sizeof(float), BACKEND_HOST_TO_DEVICE);
    free(model_rebase_params(r, dev));
    r->backend = be;
    return 0;
}

/* Back to host arrays (their values unused: the model is freed next), the device copies freed. */
static void reference_off_device(Model *r) {
    const Backend *be = r->backend;
    if (!be || be->host_memory) return;
    if (r->params16) {
        size_t n_small = model_bf16_small_count(r);
        uint16_t *dev_half;
        float *dev_small;
        model_rebase_bf16(r, xmalloc(r->n_params * sizeof(uint16_t)),
                          xmalloc((n_small ? n_small : 1) * sizeof(float)), &dev_half, &dev_small);
        be->free(be, dev_half), be->free(be, dev_small);
    } else {
        be->free(be, model_rebase_params(r, xmalloc(r->n_params * sizeof(float))));
    }
    r->backend = NULL;
}

void train_reference_close(ReferencePolicy *ref) {
    if (ref->owned_model) reference_off_device(ref->owned_model);
    reference_policy_close(ref);
}

int train_reference_open(ReferencePolicy *ref, const TrainConfig *cfg, Model *m, LoraAdapter *lora,
                         FILE *log) {
    if (!lora || cfg->rl_adapter_ref_model) {
        if (reference_policy_open_model(ref, cfg->base_model) != 0) return -1;
        if (cfg->bf16 && model_store_bf16(ref->owned_model) != 0) {
            reference_policy_close(ref);
            return err_prefix("bf16: true: the reference model");
        }
        /* torch runs the reference under the same autocast as the policy (its q_proj's output
         * is bf16 in a TRL bf16=True step: tools/reference/make_autocast_fixtures.py) */
        if (cfg->bf16) ref->owned_model->backend = backend_cpu_autocast();
        const Backend *device = cfg->train_device ? cfg->train_device->be : NULL;
        if (device && reference_to_device(ref->owned_model, device) != 0) {
            reference_policy_close(ref);
            return err_prefix("the reference model on the %s backend", device->name);
        }
        /* its bf16 weights never change: their packings for the autocast products are made
         * once, not on every forward (2 bytes a parameter; model_free ends it) */
        if (cfg->bf16 && !device)
            gemm_bf16_keep_packed(ref->owned_model->params16,
                                  ref->owned_model->n_params * sizeof *ref->owned_model->params16);
        fprintf(log, "reference: a frozen copy of %s%s\n", cfg->base_model,
                cfg->bf16 ? ", its weights kept in bf16, computed under bf16 autocast (bf16: true)"
                          : "");
    } else if (cfg->lora_model_dir) {
        m->lora = lora;
        if (reference_policy_open_initial_adapter(ref, m, cfg->lora_model_dir) != 0) return -1;
        fprintf(log, "reference: the base model with the adapter of %s as loaded\n",
                cfg->lora_model_dir);
    } else {
        m->lora = lora;
        reference_policy_from_adapter(ref, m, lora);
        fprintf(log, "reference: the base model with the adapter switched off\n");
    }
    return 0;
}

int train_reference_can_sync(const ReferencePolicy *ref, const LoraAdapter *policy_adapter) {
    if (policy_adapter || !ref->owned_model || ref->adapter || ref->initial)
        return err_set("sync_ref_model: with an adapter the reference is the base model with the "
                       "adapter switched off, not a model of its own: there is nothing to "
                       "synchronize (TRL raises NotImplementedError for PEFT models)");
    if (ref->owned_model->params16)
        return err_set("sync_ref_model: a reference kept in bf16 (bf16: true) is not supported by "
                       "rlhf.c yet");
    return 0;
}

int train_reference_sync(ReferencePolicy *ref, const Model *policy, double alpha) {
    if (train_reference_can_sync(ref, policy->lora) != 0) return -1;
    Model *r = ref->owned_model;
    if (r->n_params != policy->n_params)
        return err_set("sync_ref_model: the reference has %zu parameters, the policy %zu",
                       r->n_params, policy->n_params);
    float keep = (float)(1.0 - alpha), mix = (float)alpha;
    for (size_t i = 0; i < r->n_params; i++)
        r->params[i] = r->params[i] * keep + mix * policy->params[i];
    gemm_bf16_weights_changed(r->params, r->n_params * sizeof *r->params);
    return 0;
}
