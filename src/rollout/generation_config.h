/* What a model directory says about generation (hf-formats.md §6): sampling defaults from
 * generation_config.json, and the end-of-sequence ids, the union of config.json's and
 * generation_config.json's eos_token_id (an int or a list) and the tokenizer's eos_token. */
#ifndef RLHF_ROLLOUT_GENERATION_CONFIG_H
#define RLHF_ROLLOUT_GENERATION_CONFIG_H

#include "rollout/sampler.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>

typedef struct {
    SamplingParams sampling; /* HF defaults, then generation_config.json's values */
    int max_new_tokens;      /* generation_config.json's max_new_tokens, else 0 (unset) */
    int32_t eos_ids[16];
    int n_eos;
} GenerationDefaults;

/* Reads DIR/config.json and DIR/generation_config.json (absent: HF defaults); tok may be NULL.
 * Returns 0, or -1 with an error naming the file and key. */
int generation_defaults_load(GenerationDefaults *g, const char *model_dir, const Tokenizer *tok,
                             const char *tokenizer_dir);

#endif
