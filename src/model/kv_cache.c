#include "model/kv_cache.h"

#include "common/error.h"
#include "model/rope_tables.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Asks the kernel to back the whole pages of [p, p + bytes) with transparent huge pages (THP in
 * "madvise" mode, Debian's default, gives them only where asked). The cache is written a row at
 * a time as the sequences grow, so with 4 KiB pages every (layer, slot) faults in a fresh page
 * every few steps: 720 faults a decode step at 64 rows of SmolLM2-135M. Advice only: without it
 * (another OS, THP off) nothing changes but the count. */
static void advise_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t to = ((uintptr_t)p + bytes) & ~(page - 1);
    if (to > from) (void)madvise((void *)from, to - from, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

int kv_cache_init(KvCache *kv, const Backend *be, const ModelConfig *cfg, int n_slots,
                  int max_len) {
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    kv->n_layers = cfg->n_layers;
    kv->n_slots = n_slots;
    kv->max_len = max_len;
    kv->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    size_t n = (size_t)kv->n_layers * n_slots * max_len * kv->kv_dim;
    kv->k = be->alloc(be, n * sizeof(float), "KV cache (keys)");
    kv->v = kv->k ? be->alloc(be, n * sizeof(float), "KV cache (values)") : NULL;
    if (!kv->v) {
        be->free(be, kv->k);
        memset(kv, 0, sizeof *kv);
        return -1;
    }
    if (be->host_memory) {
        advise_huge_pages(kv->k, n * sizeof(float));
        advise_huge_pages(kv->v, n * sizeof(float));
    }
    kv->len = xcalloc((size_t)n_slots, sizeof *kv->len);
    kv->share_prefixes = be->attention_cached_prefixed != NULL;
    kv->prefix_slot = xcalloc((size_t)n_slots, sizeof *kv->prefix_slot);
    kv->prefix_len = xcalloc((size_t)n_slots, sizeof *kv->prefix_len);
    return 0;
}

void kv_cache_free(KvCache *kv) {
    if (kv->be) {
        kv->be->free(kv->be, kv->k);
        kv->be->free(kv->be, kv->v);
        kv->be->free(kv->be, kv->rope_cos);
        kv->be->free(kv->be, kv->rope_sin);
        kv->be->free(kv->be, kv->step_block);
    }
    free(kv->len);
    free(kv->prefix_slot);
    free(kv->prefix_len);
    memset(kv, 0, sizeof *kv);
}

void *kv_cache_step_block(KvCache *kv, size_t bytes) {
    if (kv->step_block && bytes <= kv->step_bytes && bytes >= kv->step_bytes / 2)
        return kv->step_block;
    kv->be->free(kv->be, kv->step_block);
    kv->step_bytes = 0;
    kv->step_block = kv->be->alloc(kv->be, bytes, "decode activations");
    if (kv->step_block) kv->step_bytes = bytes;
    return kv->step_block;
}

/* Positions [t0, t1) of slot `from`'s own rows copied to the same positions of slot `to`. */
static void copy_rows(KvCache *kv, int from, int to, int t0, int t1) {
    size_t bytes = (size_t)(t1 - t0) * kv->kv_dim * sizeof(float);
    const Backend *be = kv->be;
    for (int l = 0; l < kv->n_layers && t1 > t0; l++) {
        be->copy(be, kv_cache_row(kv, kv->k, l, to, t0), kv_cache_row(kv, kv->k, l, from, t0),
                 bytes, BACKEND_DEVICE_TO_DEVICE);
        be->copy(be, kv_cache_row(kv, kv->v, l, to, t0), kv_cache_row(kv, kv->v, l, from, t0),
                 bytes, BACKEND_DEVICE_TO_DEVICE);
    }
}

void kv_cache_reset_slot(KvCache *kv, int slot) {
    for (int b = 0; b < kv->n_slots; b++) /* its lent rows become the borrowers' own first */
        if (kv->prefix_len[b] > 0 && kv->prefix_slot[b] == slot) {
            copy_rows(kv, slot, b, 0, kv->prefix_len[b]);
            kv->prefix_len[b] = 0;
        }
    kv->prefix_len[slot] = 0;
    kv->len[slot] = 0;
}

void kv_cache_copy_prefix(KvCache *kv, int from, int to, int n) {
    int lent = kv->prefix_len[from];
    if (kv->share_prefixes && n > 0 && (lent == 0 || n <= lent)) {
        kv->prefix_slot[to] = lent ? kv->prefix_slot[from] : from; /* the owner's, one level */
        kv->prefix_len[to] = n;
    } else { /* from's borrowed rows from their owner, the rest from its own */
        int below = lent < n ? lent : n;
        copy_rows(kv, lent ? kv->prefix_slot[from] : from, to, 0, below);
        copy_rows(kv, from, to, below, n);
        kv->prefix_len[to] = 0;
    }
    kv->len[to] = n;
}

bool kv_cache_lends(const KvCache *kv) {
    for (int s = 0; s < kv->n_slots; s++)
        if (kv->prefix_len[s] > 0) return true;
    return false;
}

bool kv_cache_rope_fixed(const ModelConfig *cfg) {
    for (int set = 0; set < rope_table_sets(cfg); set++) {
        RopeType t = (set ? &cfg->rope_local : &cfg->rope)->type;
        if (t == ROPE_DYNAMIC || t == ROPE_LONGROPE) return false;
    }
    return true;
}

int kv_cache_rope_tables(KvCache *kv, const ModelConfig *cfg, const float **cos_t,
                         const float **sin_t) {
    if (!kv_cache_rope_fixed(cfg))
        return err_set("generation: this model's RoPE tables depend on the batch's length");
    if (!kv->rope_cos) {
        const Backend *be = kv->be;
        size_t bytes =
            (size_t)rope_table_sets(cfg) * kv->max_len * (cfg->rotary_dim / 2) * sizeof(float);
        float *c = be->alloc(be, bytes, "RoPE tables"),
              *s = c ? be->alloc(be, bytes, "RoPE tables") : NULL;
        if (!s) {
            be->free(be, c);
            return -1;
        }
        float *hc = xmalloc(bytes), *hs = xmalloc(bytes);
        rope_build_rows(cfg, kv->max_len, NULL, kv->max_len, hc, hs); /* seq_len unused here */
        be->copy(be, c, hc, bytes, BACKEND_HOST_TO_DEVICE);
        be->copy(be, s, hs, bytes, BACKEND_HOST_TO_DEVICE);
        free(hc), free(hs);
        kv->rope_cos = c, kv->rope_sin = s;
    }
    *cos_t = kv->rope_cos, *sin_t = kv->rope_sin;
    return 0;
}
