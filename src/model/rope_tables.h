/* RoPE frequency and cos/sin tables for every rope_type transformers supports on this
 * family (hf-formats.md §3.3). */
#ifndef RLHF_MODEL_ROPE_TABLES_H
#define RLHF_MODEL_ROPE_TABLES_H

#include "model/config.h"

#include <stdint.h>

/* inv_freq[hd/2] of cfg->rope and the factor that scales cos and sin (1 except for yarn and
 * longrope). `seq_len` (largest position + 1) matters only for the dynamic type, whose base grows
 * once a batch reaches past max_position_embeddings, and for longrope, which switches from its
 * short to its long factors once a batch reaches past original_max_position_embeddings. */
void rope_inv_freq(const ModelConfig *cfg, int seq_len, float *inv_freq, float *attention_factor);

/* How many table sets rope_build_rows writes: 1, or 2 for Gemma 3 (cfg->local_rope): the
 * full-attention layers' tables, then the sliding layers' (rope_local) right after them. A
 * caller allocates sets * rows * hd/2 floats per table. */
int rope_table_sets(const ModelConfig *cfg);

/* cos/sin tables (n_positions, hd/2) for positions 0..n_positions-1, computed in fp32 as
 * transformers does: angle = float(pos) * inv_freq; rope_table_sets(cfg) of them, one after the
 * other. */
void rope_build_tables(const ModelConfig *cfg, int n_positions, float *cos_table, float *sin_table);

/* The same values for the n given positions only: row r holds position positions[r] (r itself
 * when positions is NULL), in each of the rope_table_sets(cfg) sets (set s at s * n * hd/2).
 * seq_len as for rope_inv_freq. For decoding, where a step's few rows
 * sit far along their sequences: a table from position 0 costs every step 0.06 ms at 192
 * positions and 0.27 ms at 768 (head_dim 64), ~1% of a batch-1 token of the 135M shape. */
void rope_build_rows(const ModelConfig *cfg, int seq_len, const int32_t *positions, int n,
                     float *cos_rows, float *sin_rows);

#endif
