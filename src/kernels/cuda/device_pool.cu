// device_pool.h: two arrays of blocks, the live ones and the cached ones. Frees mostly come in
// the reverse order of allocation (a layer's buffers), so the live array is searched from its end.
#include "kernels/cuda/device_pool.h"

#include "kernels/cuda/cuda_device.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    void *ptr;
    size_t bytes; // the rounded size it was allocated with
} PoolBlock;

typedef struct {
    PoolBlock *at;
    size_t n, cap;
} BlockList;

struct DevicePool {
    BlockList live, cached;
    size_t live_bytes, cached_bytes;
    size_t peak_live, peak_reserved; // invariant 5
};

static bool list_push(BlockList *l, PoolBlock b) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        PoolBlock *at = (PoolBlock *)realloc(l->at, cap * sizeof *at);
        if (!at) return false;
        l->at = at, l->cap = cap;
    }
    l->at[l->n++] = b;
    return true;
}

static PoolBlock list_take(BlockList *l, size_t i) { // order is not kept
    PoolBlock b = l->at[i];
    l->at[i] = l->at[--l->n];
    return b;
}

extern "C" DevicePool *device_pool_new(void) {
    return (DevicePool *)calloc(1, sizeof(DevicePool));
}

// The smallest cached block that serves `bytes` under invariant 2, or -1.
static long best_fit(const DevicePool *pool, size_t bytes) {
    long best = -1;
    for (size_t i = 0; i < pool->cached.n; i++) {
        size_t have = pool->cached.at[i].bytes;
        if (have >= bytes && have / 2 <= bytes && (best < 0 || have < pool->cached.at[best].bytes))
            best = (long)i;
    }
    return best;
}

extern "C" void *device_pool_alloc(DevicePool *pool, size_t bytes, const char **why) {
    size_t rounded = (bytes + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN;
    if (rounded == 0) rounded = POOL_GRAIN;
    PoolBlock b = {NULL, rounded};
    long i = best_fit(pool, rounded);
    if (i >= 0) {
        b = list_take(&pool->cached, (size_t)i);
        pool->cached_bytes -= b.bytes;
#ifdef RLHF_CUDA_EMU
        memset(b.ptr, 0xff, b.bytes); // invariant 4
#endif
    } else {
        cudaError_t rc = cudaMalloc(&b.ptr, rounded);
        if (rc != cudaSuccess) { // invariant 1: the cache back to the device, then once more
            (void)cudaGetLastError();
            device_pool_release(pool);
            rc = cudaMalloc(&b.ptr, rounded);
        }
        if (rc != cudaSuccess) {
            (void)cudaGetLastError();
            *why = cudaGetErrorString(rc);
            return NULL;
        }
    }
    if (!list_push(&pool->live, b)) {
        cudaFree(b.ptr);
        *why = "out of host memory for the allocator's list";
        return NULL;
    }
    pool->live_bytes += b.bytes;
    if (pool->live_bytes > pool->peak_live) pool->peak_live = pool->live_bytes;
    size_t reserved = pool->live_bytes + pool->cached_bytes;
    if (reserved > pool->peak_reserved) pool->peak_reserved = reserved;
    return b.ptr;
}

extern "C" int device_pool_free(DevicePool *pool, void *p) {
    if (!p) return 0;
    for (size_t i = pool->live.n; i-- > 0;)
        if (pool->live.at[i].ptr == p) {
            PoolBlock b = list_take(&pool->live, i);
            pool->live_bytes -= b.bytes;
            if (list_push(&pool->cached, b))
                pool->cached_bytes += b.bytes;
            else
                cudaFree(b.ptr); // no room to remember it: give it back now
            return 0;
        }
    return -1;
}

extern "C" size_t device_pool_block_bytes(const DevicePool *pool, const void *p) {
    for (size_t i = pool->live.n; p && i-- > 0;)
        if (pool->live.at[i].ptr == p) return pool->live.at[i].bytes;
    return 0;
}

extern "C" void device_pool_release(DevicePool *pool) {
    for (size_t i = 0; i < pool->cached.n; i++)
        cudaFree(pool->cached.at[i].ptr);
    pool->cached.n = 0, pool->cached_bytes = 0;
}

extern "C" size_t device_pool_cached_bytes(const DevicePool *pool) {
    return pool->cached_bytes;
}

extern "C" size_t device_pool_live_bytes(const DevicePool *pool) {
    return pool->live_bytes;
}

extern "C" size_t device_pool_peak_live_bytes(const DevicePool *pool) {
    return pool->peak_live;
}

extern "C" size_t device_pool_peak_reserved_bytes(const DevicePool *pool) {
    return pool->peak_reserved;
}

extern "C" void device_pool_reset_peak(DevicePool *pool) {
    pool->peak_live = pool->live_bytes;
    pool->peak_reserved = pool->live_bytes + pool->cached_bytes;
}

extern "C" void device_pool_free_all(DevicePool *pool) {
    if (!pool) return;
    device_pool_release(pool);
    for (size_t i = 0; i < pool->live.n; i++)
        cudaFree(pool->live.at[i].ptr);
    free(pool->live.at), free(pool->cached.at);
    free(pool);
}
