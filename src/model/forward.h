/* The forward pass (hf-formats.md §3.2) on the CPU in fp32, and what is read off its end:
 * per-token log-probabilities through the fused, chunked lm_head, or logits rows. */
#ifndef RLHF_MODEL_FORWARD_H
#define RLHF_MODEL_FORWARD_H

#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

/* A batch of B token sequences padded to a common length T. */
typedef struct {
    int batch;                /* B */
    int t_len;                /* T */
    const int32_t *tokens;    /* (B, T) */
    const uint8_t *attn_mask; /* (B, T): 1 real token, 0 padding; NULL: all real */
    const int32_t *positions; /* (B, T) or NULL: 0..T-1 on every row, which is what
                                 transformers uses when no position_ids are passed */
    /* Packed rows (Axolotl's sample packing): a real cell whose position is not the previous
     * cell's + 1 begins another sequence of its row, which attends only to its own cells, as
     * transformers finds packed sequences in position_ids (find_packed_sequence_indices) for
     * flash-attn varlen or a block-diagonal mask. Needs positions. A packed batch never shares a
     * prefix. A cell's token is still predicted from the cell before it, across a boundary too
     * (HF's shifted labels on the concatenated row). */
    bool packed;
    /* Compute every row in full. By default a row's prefix equal to an earlier row's (a shared
     * prompt) is computed once (token_layout.h): the same values, less work. */
    bool unshared;
} TokenBatch;

/* Runs embedding, layers and the final norm; hidden (B*T, H) receives the result.
 * Returns -1 with an error for a token id outside [0, V) or a negative position. */
int model_forward_hidden(const Model *m, const TokenBatch *b, float *hidden);

/* logp (B*T): entry (b, t) for t >= 1 is log p(tokens[b,t] | tokens[b,<t]) where the token is
 * real and target_mask (B*T, may be NULL = every real token) selects it; 0 elsewhere.
 * Only the selected positions go through the lm_head. */
int model_token_logprobs(const Model *m, const TokenBatch *b, const uint8_t *target_mask,
                         float *logp);

/* Full logits rows of sequence `seq` at positions t0..t1-1: out ((t1 - t0), V). */
int model_logits(const Model *m, const TokenBatch *b, int seq, int t0, int t1, float *out);

#endif
