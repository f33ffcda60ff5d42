/* The key/value cache of incremental decoding.
 *
 * Invariants:
 *  1. A slot holds one sequence: len[s] positions, 0..len[s]-1, each with the K (after RoPE and,
 *     for Qwen3, the k norm) and V of every layer, exactly as the full forward computes them.
 *  2. Positions are appended in order and never rewritten; kv_cache_reset_slot empties a slot
 *     for the next sequence (continuous batching) without touching the others.
 *  3. len[s] <= max_len: appending past it is refused by the caller (model_forward_cached).
 *  4. rope_len_floor only raises the seq_len that RoPE types following the batch's length
 *     (dynamic NTK, longrope) are computed with: the rows of a forward see
 *     max(rope_len_floor, largest position + 1 among them). 0 after kv_cache_init.
 *  5. rope_cos/rope_sin, once built, hold exactly the values rope_build_rows gives each
 *     position (the same function builds them), for RoPE types whose tables do not depend on
 *     the batch's length only (not dynamic NTK, not longrope): a decoding step gathers its rows
 *     from them on the backend instead of building and copying them from the host.
 *  6. step_block (step_bytes of be's memory, NULL before the first forward) is the last
 *     forward's activations, handed to the next: the decode steps of a generation, each the same
 *     number of rows, write into memory already mapped (no page faults a step).
 *  7. Shared prompts (where share_prefixes: the backend's attention_cached_prefixed reads them):
 *     prefix_len[s] > 0 means slot s's positions 0..prefix_len[s]-1 are those of slot
 *     prefix_slot[s] (its own rows there unused), with prefix_len[prefix_slot[s]] == 0 (the
 *     owner holds them itself), prefix_len[s] <= len[s] and <= len[prefix_slot[s]]. Those rows
 *     of the owner are never rewritten while lent: resetting the owner first copies them into
 *     each slot that borrows them. prefix_len[s] == 0: s holds all its rows. */
#ifndef RLHF_MODEL_KV_CACHE_H
#define RLHF_MODEL_KV_CACHE_H

#include "kernels/backend.h"
#include "model/config.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int n_layers, n_slots, max_len, kv_dim;
    float *k, *v; /* (L, slots, max_len, nkv*hd), backend memory */
    int *len;     /* [slots], host */
    /* Set by the decoding loop before each forward: the longest sequence of its batch counting
     * those that stopped, which transformers' generate keeps feeding (invariant 4). */
    int rope_len_floor;
    const Backend *be; /* where k and v live: the model's backend */
    /* RoPE's cos and sin of positions 0..max_len-1 (rope_build_rows' sets, set s at
     * s * max_len * rotary_dim/2) in be's memory, built by the first kv_cache_rope_tables call;
     * NULL before (invariant 5). */
    float *rope_cos, *rope_sin;
    void *step_block; /* invariant 6 */
    size_t step_bytes;
    bool share_prefixes;           /* invariant 7: be->attention_cached_prefixed is there */
    int *prefix_slot, *prefix_len; /* [slots], host; invariant 7 */
} KvCache;

/* A cache for n_slots sequences of up to max_len positions in be's memory (that of the model it
 * serves, model_backend). Returns 0, or -1 with an error when the cache does not fit in memory. */
int kv_cache_init(KvCache *kv, const Backend *be, const ModelConfig *cfg, int n_slots, int max_len);
void kv_cache_free(KvCache *kv);
void kv_cache_reset_slot(KvCache *kv, int slot);

/* At least `bytes` of be's memory for one forward's activations (invariant 6), valid until the
 * next call or kv_cache_free; its contents are whatever the last forward left. The block is
 * replaced when too small, or more than twice as large as asked (a prefill's block is given back
 * at the first decode step). NULL with an error when out of memory. */
void *kv_cache_step_block(KvCache *kv, size_t bytes);

/* Gives the empty slot `to` positions 0..n-1 of slot `from` (every layer; n <= len[from]) and
 * sets len[to] = n: a shared prompt is prefilled once. Lent (invariant 7) where share_prefixes
 * and `from`'s rows 0..n-1 lie in one slot, else copied. */
void kv_cache_copy_prefix(KvCache *kv, int from, int to, int n);

/* Whether any slot reads rows of another (invariant 7): the forward then needs
 * attention_cached_prefixed. */
bool kv_cache_lends(const KvCache *kv);

/* Whether cfg's RoPE tables are the same whatever the batch's length (invariant 5). */
bool kv_cache_rope_fixed(const ModelConfig *cfg);

/* The cos and sin tables of invariant 5 for cfg (the model the cache serves), built in the
 * backend's memory on the first call. Returns 0, or -1 with an error (no memory, or a RoPE
 * type that depends on the length: kv_cache_rope_fixed false). */
int kv_cache_rope_tables(KvCache *kv, const ModelConfig *cfg, const float **cos_t,
                         const float **sin_t);

/* Row `pos` of layer l, slot s, in the K or V array. */
static inline float *kv_cache_row(const KvCache *kv, float *base, int l, int s, int pos) {
    return base + (((size_t)l * kv->n_slots + s) * kv->max_len + pos) * kv->kv_dim;
}

#endif
