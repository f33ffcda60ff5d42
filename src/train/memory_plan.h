/* The start-up memory plan: before any weight is loaded, what one training process will hold at
 * its peak, part by part, from config.json and the run's settings, against the memory the
 * machine has free. A run that cannot fit is refused with the numbers and the settings that
 * shrink it, instead of being killed by the kernel halfway through its first step.
 *
 * The parts follow what the code allocates (fp32 unless said):
 *  - weights: every parameter in fp32 (bf16/fp16 files are widened at load), plus the adapter;
 *    a frozen base (adapter with bf16, or QLoRA) in bf16 / NF4, its untied embedding of a bf16
 *    checkpoint counted as one micro-batch's rows (model/embed_map.c leaves it in the file);
 *  - gradients: one fp32 value per trained parameter (the whole model, or the adapter);
 *  - optimizer: AdamW's two fp32 moments per trained parameter; 8-bit AdamW one byte each plus
 *    a scale per 256-value block, except tensors of fewer than 4096 values and the embedding,
 *    which keep fp32 moments (as bitsandbytes under Trainer);
 *  - reference: a frozen copy of the weights where the method needs a reference and no adapter
 *    can stand in for it (DPO, IPO, KTO, GRPO with beta != 0), in bf16 when bf16 is on;
 *  - activations: the training tape of one micro-batch (model/activations.h: every layer's
 *    kept buffers, or only each layer's input plus one layer's worth with
 *    gradient_checkpointing), the backward's scratch and the lm_head's logit chunks. A
 *    micro-batch is micro_batch_size rows of sequence_len tokens; a preference pair is two rows
 *    (chosen and rejected), a KTO row two (its own and the KL row); GRPO's rows are prompt
 *    (at most sequence_len) plus max_completion_length;
 *  - rollout (GRPO): the KV cache of one generation batch and the packed copy of the weights
 *    the decoder makes when 6 or more sequences decode together.
 * These are upper bounds for the data (full-length rows) and leave out the process itself
 * (libraries, the interpreter, the dataset): the figure is what grows with the model. */
#ifndef RLHF_TRAIN_MEMORY_PLAN_H
#define RLHF_TRAIN_MEMORY_PLAN_H

#include "config/train_config.h"
#include "model/config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint64_t n_params;         /* the model's parameters */
    uint64_t n_trained;        /* trained parameters: n_params, or the adapter's */
    uint64_t tokens_per_micro; /* tokens of one training micro-batch (upper bound) */
    double weights, gradients, optimizer, reference, activations, rollout; /* bytes */
    /* bf16: true: the rounded copies one autocast product holds while it runs (the lm_head's
     * backward, or the widest linear's): backend_autocast.c; 0 without bf16 */
    double autocast;
    double total;     /* their sum */
    double available; /* bytes free to this process now; < 0 when unknown */
} MemoryPlan;

/* The plan of cfg over the model mc (config.json only). Never fails. */
MemoryPlan memory_plan_make(const TrainConfig *cfg, const ModelConfig *mc);

/* The model's parameter count from its config (every tensor model.c loads). */
uint64_t memory_plan_model_params(const ModelConfig *mc);

/* The LoRA adapter's parameter count for cfg's r and target modules on mc (lora.c's layout). */
uint64_t memory_plan_lora_params(const TrainConfig *cfg, const ModelConfig *mc);

/* Bytes this process can still take: MemAvailable, or the cgroup's limit less its usage when
 * that is lower. -1 when neither can be read. A test hook (common/test_hooks.h) may set it. */
double memory_available_bytes(void);

/* Prints the plan: one line, "memory plan: 2.1 GB (weights 0.5, gradients 0.5, ...) of 20.3 GB
 * free". */
void memory_plan_print(const MemoryPlan *p, FILE *log);

/* 0 when the plan fits in the memory available (or that is unknown); else -1 with an error
 * giving the numbers and the settings of cfg that would shrink the largest parts. */
int memory_plan_check(const MemoryPlan *p, const TrainConfig *cfg);

#endif
