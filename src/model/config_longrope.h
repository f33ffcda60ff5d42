/* LongRoPE (Phi-3 / Phi-3.5 long-context checkpoints) in config.json, as transformers 5 reads it
 * (modeling_rope_utils.py: standardize_rope_params, _compute_longrope_parameters; Phi3Config). */
#ifndef RLHF_MODEL_CONFIG_LONGROPE_H
#define RLHF_MODEL_CONFIG_LONGROPE_H

#include "model/config.h"

#include <jansson.h>

/* The RoPE type a Phi-3 config.json's `type` string means to transformers: "su" and "yarn" are
 * old names of longrope; anything else is itself. */
const char *phi3_rope_type(const char *type);

/* Fills cfg->rope's longrope fields (original_max_position, short/long factors, the resolved
 * attention factor and factor) from the RoPE dict p and the top-level object root; cfg's
 * arch, head_dim and max_position_embeddings must be set. Returns 0, or -1 with an error naming
 * the key (a factor list of the wrong length or with a non-positive entry, ...); the message
 * is to be prefixed with the dict's key. */
int longrope_parse(ModelConfig *cfg, const json_t *root, const json_t *p);

#endif
