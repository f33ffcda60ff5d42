/* LoRA adapters as PEFT defines them (hf-formats.md §7): for an adapted linear layer,
 * y = x W^T + b + scaling * (x A^T) B^T, A (r, in), B (out, r), scaling = alpha / r (or
 * alpha / sqrt(r) with rsLoRA). The base weights stay as they are; the adapter's parameters live
 * in one block of their own (for the optimizer), named as PEFT saves them:
 * base_model.model.<module>.lora_A.weight / lora_B.weight.
 *
 * With `enabled` false the model computes as the base alone: the reference policy of DPO/KTO/GRPO
 * when an adapter is trained. */
#ifndef RLHF_MODEL_LORA_H
#define RLHF_MODEL_LORA_H

#include "model/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    LORA_Q,
    LORA_K,
    LORA_V,
    LORA_O,
    LORA_GATE,
    LORA_UP,
    LORA_DOWN,
    LORA_N_MODULES
} LoraModule;

typedef struct {
    float *A, *B; /* (r, in), (out, r); NULL when this module has no adapter */
    int in, out;
} LoraLinear;

typedef struct {
    char name[128]; /* PEFT's tensor name */
    int64_t shape[2];
    size_t numel, offset; /* into LoraAdapter.params */
} LoraParamInfo;

typedef struct {
    int r;
    double alpha;
    bool rslora;
    float scaling;
    double dropout; /* on the adapter input, in training (0 in inference) */
    bool enabled;
    bool fused;    /* made for fused qkv_proj / gate_up_proj (Phi-3): K, V share Q's A and dropout
                      mask, UP shares GATE's; B of each is its rows of the module's B */
    bool training; /* dropout applies only while training */
    uint64_t dropout_key; /* set per micro-batch by the trainer: the masks of one forward and
                             its backward */
    int n_layers;
    LoraLinear *linears; /* [n_layers * LORA_N_MODULES] */
    float *params;       /* every A and B, contiguous */
    size_t n_params;
    LoraParamInfo *info; /* one per tensor, in module order (A then B) */
    int n_info;
    char **target_modules; /* as given (saved back to adapter_config.json) */
    int n_targets;
} LoraAdapter;

/* "self_attn.q_proj", ... */
const char *lora_module_name(LoraModule m);

/* A fresh adapter on the modules that `targets` names (entries matched as PEFT does: the module's
 * full name equals the entry or ends with "." + entry; the single entry "all-linear" means every
 * linear layer but lm_head), initialised bit for bit as PEFT's get_peft_model does after
 * transformers.set_seed(seed) and from_pretrained: A by kaiming_uniform_(a=sqrt(5)) from torch's
 * generator in PEFT's module order, B zero (so the adapter starts as a no-op). Returns 0, or -1
 * with an error: r <= 0, or targets that match no module. */
int lora_create(LoraAdapter *a, const ModelConfig *cfg, int r, double alpha, bool rslora,
                double dropout, const char *const *targets, int n_targets, uint64_t seed);

/* Reads a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) for this
 * model. Errors name the file: peft_type other than LORA, DoRA, shapes that do not fit the base,
 * a tensor the config does not describe. */
int lora_load(LoraAdapter *a, const ModelConfig *cfg, const char *dir);

/* Writes adapter_config.json and adapter_model.safetensors (F32) to dir, as PEFT does. */
int lora_save(const LoraAdapter *a, const char *dir, const char *base_model);

void lora_free(LoraAdapter *a);

/* model_rebase_params for an adapter: a->params and every A and B point into `params` (n_params
 * floats) at the same offsets; returns the array they pointed into before. */
float *lora_rebase_params(LoraAdapter *a, float *params);

/* The adapter of module m in layer l, or NULL when there is none or the adapter is disabled. */
const LoraLinear *lora_linear(const LoraAdapter *a, int layer, LoraModule m);

/* The dropout key of one module of one layer for the current micro-batch. */
uint64_t lora_dropout_key(const LoraAdapter *a, int layer, LoraModule m);

/* The dropout probability in force (0 unless training). */
float lora_dropout_p(const LoraAdapter *a);

#endif
