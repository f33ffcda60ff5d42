/* What the frozen-base tests (test_lora_bf16_base: a base kept in bf16; test_qlora: a base
 * quantised to NF4) share: a fixture model's reference batch, and the LoRA adapter's gradients
 * of the mean token NLL over it. */
#ifndef RLHF_TESTS_FROZEN_BASE_H
#define RLHF_TESTS_FROZEN_BASE_H

#include "model/forward.h"
#include "model/lora.h"
#include "model/model.h"

/* The reference batch of tests/fixtures/models/<base>/reference.json (tokens and attention
 * mask malloc'd; the caller frees both). Exits on a missing fixture. */
TokenBatch frozen_base_batch(const char *base);

/* The adapter's gradients of the mean token NLL of b under m (a attached to m), a calloc'd
 * array of a->n_params; logp (cells of b) receives the log-probs. On a frozen base (kept in
 * bf16 or NF4) it also checks that a gradient for the base itself is refused, naming `frozen`. */
float *frozen_base_adapter_grads(Model *m, const LoraAdapter *a, const TokenBatch *b, float *logp);

#endif
