/* The CUDA backend's caching allocator (src/kernels/cuda/device_pool.h) on cuda-emu: each of its
 * invariants as an observable fact — a freed block comes back for a request it fits (and not for
 * one more than twice smaller or larger than it), poisoned as a fresh cudaMalloc block is; the
 * smallest fitting block is taken; an unknown pointer is refused and changes nothing; release and
 * the byte counts agree with what is held; the high-water marks (invariant 5) are the largest
 * live and live-plus-cached sums of a known pattern, computed here from the sizes as they round.
 * Label gpu-emu. */
#include "harness.h"
#include "kernels/cuda/device_pool.h"

#include <stdint.h>
#include <string.h>

/* Whether every byte of p[0..n) is 0xff (cuda-emu's poison). */
static bool poisoned(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff) return false;
    return true;
}

/* Raises the marks kept beside the pool to the sums as a call left them. */
static void track(size_t live, size_t cached, size_t *peak_live, size_t *peak_reserved) {
    if (live > *peak_live) *peak_live = live;
    if (live + cached > *peak_reserved) *peak_reserved = live + cached;
}

int main(void) {
    DevicePool *pool = device_pool_new();
    CHECK(pool != NULL, "pool");
    const char *why = "";

    /* a freed block serves the next request it fits, poisoned again (invariants 1, 2, 4) */
    char *a = device_pool_alloc(pool, 4000, &why);
    CHECK(a != NULL, "alloc: %s", why);
    CHECK(device_pool_live_bytes(pool) == 4096, "4000 bytes round to 4096: %zu",
          device_pool_live_bytes(pool));
    memset(a, 7, 4000);
    CHECK(device_pool_free(pool, a) == 0, "free");
    CHECK(device_pool_cached_bytes(pool) == 4096 && device_pool_live_bytes(pool) == 0,
          "cached %zu live %zu", device_pool_cached_bytes(pool), device_pool_live_bytes(pool));
    char *b = device_pool_alloc(pool, 3000, &why);
    CHECK(b == a, "a 3000-byte request reuses the cached 4096-byte block");
    CHECK(poisoned(b, 4096), "a reused block is poisoned like a fresh one");
    CHECK(device_pool_cached_bytes(pool) == 0, "the cache is empty again");

    /* not for a request under half its size, nor over it */
    CHECK(device_pool_free(pool, b) == 0, "free");
    char *small = device_pool_alloc(pool, 1000, &why);
    CHECK(small != NULL && small != a, "a 1000-byte request does not take a 4096-byte block");
    char *big = device_pool_alloc(pool, 5000, &why);
    CHECK(big != NULL && big != a, "a 5000-byte request does not take a 4096-byte block");

    /* the smallest fitting block first */
    char *large = device_pool_alloc(pool, 6000, &why);
    CHECK(device_pool_free(pool, large) == 0 && device_pool_free(pool, big) == 0, "free");
    char *fit = device_pool_alloc(pool, 4500, &why); /* fits 5120 and 6144, not 4096 */
    CHECK(fit == big, "4500 bytes take the 5120-byte block, not the 6144-byte one");

    /* an unknown pointer changes nothing */
    size_t live = device_pool_live_bytes(pool), cached = device_pool_cached_bytes(pool);
    char stack_byte;
    CHECK(device_pool_free(pool, &stack_byte) == -1, "an unknown pointer is refused");
    CHECK(device_pool_free(pool, a) == -1, "a cached (already freed) block is refused");
    CHECK(device_pool_live_bytes(pool) == live && device_pool_cached_bytes(pool) == cached,
          "counts unchanged");
    CHECK(device_pool_free(pool, NULL) == 0, "NULL is ignored");

    /* release gives the cache back and keeps live blocks */
    CHECK(cached == 4096 + 6144, "cached: the 4096 and 6144 blocks (%zu)", cached);
    device_pool_release(pool);
    CHECK(device_pool_cached_bytes(pool) == 0 && device_pool_live_bytes(pool) == live,
          "release: cached %zu live %zu", device_pool_cached_bytes(pool),
          device_pool_live_bytes(pool));
    char *fresh = device_pool_alloc(pool, 1000, &why);
    CHECK(fresh != NULL && poisoned(fresh, 1000), "a fresh block after release");

    device_pool_free_all(pool); /* small, fit and fresh are still live: given back too */

    /* the high-water marks over a known pattern (invariant 5): the sums as each call leaves
     * them, in blocks of POOL_GRAIN, tracked here beside the pool */
    pool = device_pool_new();
    size_t live_now = 0, cached_now = 0, peak_live = 0, peak_reserved = 0;
#define GRAINS(n) (((n) + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN)
    char *p1 = device_pool_alloc(pool, 1000, &why); /* new */
    live_now += GRAINS(1000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    char *p2 = device_pool_alloc(pool, 3000, &why); /* new */
    live_now += GRAINS(3000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    CHECK(device_pool_free(pool, p1) == 0, "free");
    live_now -= GRAINS(1000);
    cached_now += GRAINS(1000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    char *p3 = device_pool_alloc(pool, 8000, &why); /* new: nothing cached fits */
    live_now += GRAINS(8000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    CHECK(device_pool_free(pool, p2) == 0 && device_pool_free(pool, p3) == 0, "free");
    live_now -= GRAINS(3000) + GRAINS(8000);
    cached_now += GRAINS(3000) + GRAINS(8000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    char *p4 = device_pool_alloc(pool, 600, &why); /* reuses p1's block */
    CHECK(p4 == p1, "600 bytes reuse the cached 1024-byte block");
    live_now += GRAINS(1000);
    cached_now -= GRAINS(1000);
    track(live_now, cached_now, &peak_live, &peak_reserved);
    CHECK(peak_live == 1024 + 3072 + 8192 - 1024 && peak_reserved == 1024 + 3072 + 8192,
          "the pattern's own sums: %zu live, %zu reserved", peak_live, peak_reserved);
    CHECK(device_pool_peak_live_bytes(pool) == peak_live, "peak live %zu, expected %zu",
          device_pool_peak_live_bytes(pool), peak_live);
    CHECK(device_pool_peak_reserved_bytes(pool) == peak_reserved, "peak reserved %zu, expected %zu",
          device_pool_peak_reserved_bytes(pool), peak_reserved);
    /* release shrinks what is held, not the marks; a reset starts them from what is held */
    device_pool_release(pool);
    CHECK(device_pool_peak_reserved_bytes(pool) == peak_reserved, "release keeps the mark");
    device_pool_reset_peak(pool);
    CHECK(device_pool_peak_live_bytes(pool) == GRAINS(1000) &&
              device_pool_peak_reserved_bytes(pool) == GRAINS(1000),
          "after reset: peak live %zu reserved %zu, only p4 held",
          device_pool_peak_live_bytes(pool), device_pool_peak_reserved_bytes(pool));
    device_pool_free_all(pool);
    return harness_finish("test_device_pool");
}
