/* Where a batch's tokens are computed. A TokenBatch is B rows of T cells, padded; the forward
 * runs on `rows`: one per real cell, padding dropped, and a prefix that a row shares with an
 * earlier one (the prompt of a preference pair's rejected response, of a GRPO group's second to
 * last completion) computed once, in the earlier row's rows. Attention then runs over segments
 * (kernels.h AttnSegment): a row's own rows, after the shared prefix's; a packed row
 * (TokenBatch.packed) is one segment per sequence it holds.
 *
 * Sharing changes no value a model computes, only how often: every row's hidden states are
 * those of the row computed alone. */
#ifndef RLHF_MODEL_TOKEN_LAYOUT_H
#define RLHF_MODEL_TOKEN_LAYOUT_H

#include "kernels/tensor_types.h"
#include "model/forward.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LAYOUT_NO_ROW ((size_t)-1)

typedef struct {
    size_t n;           /* rows computed */
    size_t *row_of;     /* (B*T): the row that computes cell (b, t); LAYOUT_NO_ROW: padding */
    int32_t *tokens;    /* (n) */
    int32_t *positions; /* (n) position ids (RoPE) */
    int32_t *seq_index; /* (n) the cell's t: what a sliding window counts */
    AttnSegment *segs;  /* one per row of the batch that has cells of its own (per sequence of
                           a packed row) */
    int n_segs;
    size_t shared_cells; /* cells computed in another row's rows */
} TokenLayout;

/* Shared prefixes shorter than this many real cells are computed again: too little work saved
 * to be worth splitting the attention. */
#define LAYOUT_MIN_SHARED 16

/* Lays out b. With `share` (ignored for a packed batch), row r computes its longest prefix of
 * cells equal (the same padding, and where real the same token and position) to those of an
 * earlier row that shares nothing itself, when that prefix holds at least LAYOUT_MIN_SHARED real
 * cells. */
void token_layout_build(TokenLayout *lay, const TokenBatch *b, bool share);
void token_layout_free(TokenLayout *lay);

/* The cells whose token is scored: (b, t) with t >= 1, real, selected by target_mask (NULL: every
 * real cell), and with a real cell before it. where[j] receives the cell, from[j] the row whose
 * hidden state predicts it (that of cell t - 1; rows may repeat when a prefix is shared). Returns
 * their count. */
size_t token_layout_targets(const TokenLayout *lay, const TokenBatch *b, const uint8_t *target_mask,
                            size_t *where, size_t *from);

#endif
