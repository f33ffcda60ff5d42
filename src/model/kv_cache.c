#include "model/kv_cache.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

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
    kv->len = xcalloc((size_t)n_slots, sizeof *kv->len);
    return 0;
}

void kv_cache_free(KvCache *kv) {
    if (kv->be) {
        kv->be->free(kv->be, kv->k);
        kv->be->free(kv->be, kv->v);
    }
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

void kv_cache_reset_slot(KvCache *kv, int slot) {
    kv->len[slot] = 0;
}

void kv_cache_copy_prefix(KvCache *kv, int from, int to, int n) {
    size_t bytes = (size_t)n * kv->kv_dim * sizeof(float);
    const Backend *be = kv->be;
    for (int l = 0; l < kv->n_layers && bytes; l++) {
        be->copy(be, kv_cache_row(kv, kv->k, l, to, 0), kv_cache_row(kv, kv->k, l, from, 0), bytes,
                 BACKEND_DEVICE_TO_DEVICE);
        be->copy(be, kv_cache_row(kv, kv->v, l, to, 0), kv_cache_row(kv, kv->v, l, from, 0), bytes,
                 BACKEND_DEVICE_TO_DEVICE);
    }
    kv->len[to] = n;
}
