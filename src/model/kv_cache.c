#include "model/kv_cache.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

int kv_cache_init(KvCache *kv, const ModelConfig *cfg, int n_slots, int max_len) {
    memset(kv, 0, sizeof *kv);
    kv->n_layers = cfg->n_layers;
    kv->n_slots = n_slots;
    kv->max_len = max_len;
    kv->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    size_t n = (size_t)kv->n_layers * n_slots * max_len * kv->kv_dim;
    kv->k = xmalloc_checked(n * sizeof(float), "KV cache (keys)");
    kv->v = kv->k ? xmalloc_checked(n * sizeof(float), "KV cache (values)") : NULL;
    if (!kv->v) {
        free(kv->k);
        memset(kv, 0, sizeof *kv);
        return -1;
    }
    kv->len = xcalloc((size_t)n_slots, sizeof *kv->len);
    return 0;
}

void kv_cache_free(KvCache *kv) {
    free(kv->k);
    free(kv->v);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

void kv_cache_reset_slot(KvCache *kv, int slot) {
    kv->len[slot] = 0;
}

void kv_cache_copy_prefix(KvCache *kv, int from, int to, int n) {
    size_t bytes = (size_t)n * kv->kv_dim * sizeof(float);
    for (int l = 0; l < kv->n_layers; l++) {
        memcpy(kv_cache_row(kv, kv->k, l, to, 0), kv_cache_row(kv, kv->k, l, from, 0), bytes);
        memcpy(kv_cache_row(kv, kv->v, l, to, 0), kv_cache_row(kv, kv->v, l, from, 0), bytes);
    }
    kv->len[to] = n;
}
