/* A caching allocator for the CUDA backend's memory (backend_cuda.cu's alloc and free), as
 * PyTorch's CUDA allocator caches: cudaFree waits for the whole device and cudaMalloc costs
 * microseconds to milliseconds, and the model allocates and frees its per-call buffers (a layer's
 * tape, a decoding step's rows, scratch for the layout) many times a step. Measured on an H200:
 * decoding one token made about ten of each.
 *
 * Invariants:
 *  1. Every block handed out is cudaMalloc memory of at least the asked size (rounded up to
 *     POOL_GRAIN bytes); a freed block goes to the cache, not back to the device, until
 *     device_pool_release, device_pool_free_all or an allocation the device cannot serve (which
 *     releases the cache and tries once more).
 *  2. A cached block is reused for a request of at most its size and at least half of it (bounds
 *     the waste), the smallest such block first.
 *  3. Reuse needs no wait: every op of the backend runs on the one default stream in call order
 *     (backend_cuda.h invariant 1), so work queued on a block before its free runs before work
 *     queued after its reuse.
 *  4. Under cuda-emu a block is poisoned (0xff bytes) when it is reused, as cudaMalloc poisons a
 *     fresh one there (cuda_emu.h rule 7): code that relies on what a buffer held before it was
 *     freed fails the same way with the cache as without it.
 *  5. peak_live >= live and peak_reserved >= live + cached at every return: both are raised in
 *     alloc, the only call that makes either sum grow (free moves bytes from live to cached,
 *     release and free_all shrink the cache).
 * Not thread-safe: one pool per backend, used from one thread. */
#ifndef RLHF_KERNELS_CUDA_DEVICE_POOL_H
#define RLHF_KERNELS_CUDA_DEVICE_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POOL_GRAIN 512

typedef struct DevicePool DevicePool;

/* An empty pool, or NULL when out of host memory. */
DevicePool *device_pool_new(void);
/* At least bytes of device memory (invariant 1), or NULL with *why set to the CUDA error's text. */
void *device_pool_alloc(DevicePool *pool, size_t bytes, const char **why);
/* Returns p (from device_pool_alloc of this pool; NULL is ignored) to the cache. Returns 0, or -1
 * when p is not a live block of this pool (nothing changes then). */
int device_pool_free(DevicePool *pool, void *p);
/* The size a live block p of this pool was allocated with (rounded), or 0 when p is not one. */
size_t device_pool_block_bytes(const DevicePool *pool, const void *p);
/* Gives every cached block back to the device (live blocks stay). */
void device_pool_release(DevicePool *pool);
/* Bytes held in the cache, and in live blocks. */
size_t device_pool_cached_bytes(const DevicePool *pool);
size_t device_pool_live_bytes(const DevicePool *pool);
/* The high-water marks since the pool was made or device_pool_reset_peak (invariant 5): the most
 * bytes ever live at once (what torch.cuda.max_memory_allocated counts) and the most ever held
 * from the device, live plus cached (torch.cuda.max_memory_reserved). */
size_t device_pool_peak_live_bytes(const DevicePool *pool);
size_t device_pool_peak_reserved_bytes(const DevicePool *pool);
/* Starts both high-water marks again from what is held now. */
void device_pool_reset_peak(DevicePool *pool);
/* Gives back every block, live or cached, and frees the pool; NULL is ignored. */
void device_pool_free_all(DevicePool *pool);

#ifdef __cplusplus
}
#endif

#endif
