// weight_cache.h: a short array of entries (a model has a few hundred weights and lm_head
// chunks), searched linearly; a drop swaps the last entry into the hole.
#include "kernels/cuda/weight_cache.h"

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"

#include <stdlib.h>

typedef struct {
    const float *src;
    size_t numel;
    uint16_t *bf16; // a block of the pool
} CacheEntry;

struct WeightCache {
    DevicePool *pool;
    CacheEntry *at;
    size_t n, cap;
    size_t misses, hits, bytes;
};

extern "C" WeightCache *weight_cache_new(DevicePool *pool) {
    WeightCache *c = (WeightCache *)calloc(1, sizeof *c);
    if (c) c->pool = pool;
    return c;
}

static void drop(WeightCache *c, size_t i) {
    device_pool_free(c->pool, c->at[i].bf16); // invariant 5
    c->bytes -= c->at[i].numel * sizeof(uint16_t);
    c->at[i] = c->at[--c->n];
}

extern "C" const uint16_t *weight_cache_bf16(WeightCache *c, const float *w, size_t numel,
                                             const char **why) {
    for (size_t i = 0; i < c->n; i++)
        if (c->at[i].src == w && c->at[i].numel == numel) { // invariant 3
            c->hits++;
            return c->at[i].bf16;
        }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        CacheEntry *at = (CacheEntry *)realloc(c->at, cap * sizeof *at);
        if (!at) {
            *why = "out of host memory for the weight cache's list";
            return NULL;
        }
        c->at = at, c->cap = cap;
    }
    uint16_t *b = (uint16_t *)device_pool_alloc(c->pool, numel * sizeof(uint16_t), why);
    if (!b && weight_cache_drop_all(c) > 0) // invariant 4
        b = (uint16_t *)device_pool_alloc(c->pool, numel * sizeof(uint16_t), why);
    if (!b) return NULL;
    int rc = cuda_bf16_narrow(b, w, numel, NULL);
    if (rc != 0) {
        device_pool_free(c->pool, b);
        *why = cudaGetErrorString((cudaError_t)rc);
        return NULL;
    }
    c->at[c->n++] = (CacheEntry){w, numel, b};
    c->misses++;
    c->bytes += numel * sizeof(uint16_t);
    return b;
}

extern "C" size_t weight_cache_drop_all(WeightCache *c) {
    size_t bytes = c->bytes;
    while (c->n > 0)
        drop(c, c->n - 1);
    return bytes;
}

extern "C" void weight_cache_written(WeightCache *c, const void *begin, size_t bytes) {
    if (!c || !begin || !bytes) return;
    const char *lo = (const char *)begin, *hi = lo + bytes;
    for (size_t i = c->n; i-- > 0;) {
        const char *s = (const char *)c->at[i].src;
        if (s < hi && lo < s + c->at[i].numel * sizeof(float)) drop(c, i);
    }
}

extern "C" size_t weight_cache_misses(const WeightCache *c) {
    return c->misses;
}

extern "C" size_t weight_cache_hits(const WeightCache *c) {
    return c->hits;
}

extern "C" size_t weight_cache_bytes(const WeightCache *c) {
    return c->bytes;
}

extern "C" void weight_cache_free(WeightCache *c) {
    if (!c) return;
    weight_cache_drop_all(c);
    free(c->at);
    free(c);
}
