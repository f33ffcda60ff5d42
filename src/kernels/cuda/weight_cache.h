/* The CUDA backend's bf16 copies of fp32 weights under bf16 autocast (backend_cuda.h invariant
 * 6), the device's counterpart of kernels/cpu/gemm_bf16_cache.c: each linear's W (and each
 * vocabulary chunk of the lm_head) was narrowed into scratch in every forward and again in every
 * backward, per micro-batch; one narrowing per optimizer step does. torch's autocast keeps the
 * same cache (the bf16 casts of leaf weights, for the length of the autocast region). A W stored
 * in bf16 (a frozen base, a bf16 reference) never comes here: it is used as it is.
 *
 * Invariants:
 *  1. An entry is the bf16 rounding (nearest even, cuda_bf16_narrow) of the numel fp32 values at
 *     [src, src + 4 numel) as they were when it was narrowed; it lives in a block of the
 *     backend's pool, so it counts in the pool's bytes and high-water marks.
 *  2. Every way the backend writes memory that may hold weights drops the entries overlapping
 *     what it writes: the AdamW update (after each optimizer step), copy into device memory (a
 *     checkpoint, a reference or a model uploaded), memset, and free (the pool hands the block
 *     out again, as other weights or activations). No other op of the table writes weights: they
 *     write activations, gradients and scratch only (backend.h), so an entry is never stale.
 *  3. Entries are looked up by (src, numel) exactly: the lm_head's chunks are entries of their
 *     own, each dropped with the whole lm_head by invariant 2 (overlap, not equality).
 *  4. Under memory pressure the cache gives way: a narrowing or a backend alloc (between ops)
 *     that the device cannot serve drops every entry and tries once more
 *     (weight_cache_drop_all; the pool then releases the blocks to the device). Scratch, taken
 *     inside an op that may hold a copy, does not.
 *  5. A dropped entry's block goes back to the pool at once: every op runs on the one stream in
 *     call order (backend_cuda.h invariant 1), so a product queued before the drop reads it
 *     before anything queued after can reuse it.
 * Not thread-safe: one cache per backend, used from one thread, as the pool. */
#ifndef RLHF_KERNELS_CUDA_WEIGHT_CACHE_H
#define RLHF_KERNELS_CUDA_WEIGHT_CACHE_H

#include "kernels/cuda/device_pool.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct WeightCache WeightCache;

/* An empty cache over pool (which outlives it), or NULL when out of host memory. */
WeightCache *weight_cache_new(DevicePool *pool);
/* The bf16 copy of the numel fp32 values at w (device memory): the cached entry, or one narrowed
 * now (invariant 1). NULL with *why set when the pool or the launch fails (nothing cached then); a
 * first failure drops every entry and tries again (invariant 4). */
const uint16_t *weight_cache_bf16(WeightCache *c, const float *w, size_t numel, const char **why);
/* Drops every entry, their blocks back to the pool: what an allocation the device cannot serve
 * tries before it fails (the copies are narrowed again when next used). Returns the bytes
 * dropped. */
size_t weight_cache_drop_all(WeightCache *c);
/* Drops every entry whose source overlaps [begin, begin + bytes) (invariant 2). */
void weight_cache_written(WeightCache *c, const void *begin, size_t bytes);
/* How many narrowings the cache has made (misses) and served from an entry (hits), and the bytes
 * its entries hold now: what shows that a step narrows each weight once. */
size_t weight_cache_misses(const WeightCache *c);
size_t weight_cache_hits(const WeightCache *c);
size_t weight_cache_bytes(const WeightCache *c);
/* Drops every entry and frees the cache; NULL is ignored. */
void weight_cache_free(WeightCache *c);

#ifdef __cplusplus
}
#endif

#endif
