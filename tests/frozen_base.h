/* What the frozen-base tests (test_lora_bf16_base: a base kept in bf16; test_qlora: a base
 * quantised to NF4) share: a LoRA fixture's paths, a fixture model's reference batch, and the
 * comparison of an adapter's log-probs and gradients over the frozen base with the same adapter
 * over an fp32 copy of the values it holds. */
#ifndef RLHF_TESTS_FROZEN_BASE_H
#define RLHF_TESTS_FROZEN_BASE_H

#include "model/forward.h"
#include "model/lora.h"
#include "model/model.h"

#include <stddef.h>

/* The reference batch of tests/fixtures/models/<base>/reference.json (tokens and attention
 * mask malloc'd; the caller frees both). Exits on a missing fixture. */
TokenBatch frozen_base_batch(const char *base);

/* A LoRA fixture (tests/fixtures/lora/<adapter>): its base model's fixture name into base
 * (cap bytes), that base's directory and the adapter's directory, both absolute (4096 bytes
 * each). Exits on a missing fixture. */
void frozen_base_fixture(const char *adapter, char *base, size_t cap, char *base_dir,
                         char *adapter_dir);

/* The adapter a (attached to both models) over the frozen model against ref, an fp32 model
 * holding the values the frozen one computes with, on base's reference batch: log-probs within
 * 1e-4, each adapter tensor's gradient within 1e-5 of its largest value. kind ("bf16", "NF4")
 * names the frozen storage in failures. */
void frozen_base_check_adapter(Model *ref, Model *frozen, const LoraAdapter *a, const char *base,
                               const char *adapter, const char *kind);

#endif
