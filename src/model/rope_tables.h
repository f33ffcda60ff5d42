/* RoPE frequency and cos/sin tables for every rope_type transformers supports on this
 * family (hf-formats.md §3.3). */
#ifndef RLHF_MODEL_ROPE_TABLES_H
#define RLHF_MODEL_ROPE_TABLES_H

#include "model/config.h"

/* inv_freq[hd/2] and the factor that scales cos and sin (1 except for yarn).
 * `seq_len` (largest position + 1) matters only for the dynamic type, whose base grows
 * once a batch reaches past max_position_embeddings. */
void rope_inv_freq(const ModelConfig *cfg, int seq_len, float *inv_freq, float *attention_factor);

/* cos/sin tables (n_positions, hd/2) for positions 0..n_positions-1, computed in fp32 as
 * transformers does: angle = float(pos) * inv_freq. */
void rope_build_tables(const ModelConfig *cfg, int n_positions, float *cos_table, float *sin_table);

#endif
