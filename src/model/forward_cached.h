/* Incremental forward over a KV cache: new tokens for any mix of sequences (a prompt being
 * prefilled, one token being decoded) in one call. Each new token attends to its own sequence's
 * cached positions and to the new tokens before it, exactly as the full causal forward would at
 * those positions (positions continue from the slot's length, as transformers' generate counts
 * them: left padding excluded). */
#ifndef RLHF_MODEL_FORWARD_CACHED_H
#define RLHF_MODEL_FORWARD_CACHED_H

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/packed_model.h"

#include <stdint.h>

typedef struct {
    int slot;              /* the cache slot of this sequence */
    const int32_t *tokens; /* the new tokens */
    int n_tokens;          /* >= 1 */
} CachedChunk;

/* Appends the chunks' tokens to their slots and writes the logits after each chunk's last token
 * to logits (n_chunks x V). packed: m's matrices packed (packed_model_build), used for the
 * products whose row count suits them; NULL: none. Returns 0, or -1 with an error (a token id
 * outside the vocabulary, a slot that would pass max_len, out of memory); the cache is unchanged
 * on error. */
int model_forward_cached(const Model *m, const PackedModel *packed, KvCache *kv,
                         const CachedChunk *chunks, int n_chunks, float *logits);

#endif
