#include "model/forward_cached.h"

#include "common/error.h"
#include "model/decoder_layer.h"
#include "model/rope_tables.h"

#include <stdlib.h>
#include <string.h>

/* One call's rows: where each goes in the cache, and the activations of a layer. The hooks'
 * context. */
typedef struct {
    int n;                   /* new rows in this call */
    int32_t *slot, *pos;     /* [n] host: slot and position of each row */
    const int32_t *slot_dev; /* the same as the backend reads them */
    const int32_t *pos_dev;
    /* [n] host, where the cache lends prompts (kv_cache.h invariant 7), else NULL: each row's
     * slot's prefix_slot and prefix_len */
    int32_t *prefix_slot, *prefix_len;
    void *owned[2];
    LayerActs a;  /* x_in == x_mid (the residual, in place), act == gate */
    float *block; /* backend memory behind a */
    KvCache *kv;
    const PackedModel *packed;
} CachedRows;

/* The activations of n rows, then the last row of each of n_chunks chunks (*last), in the
 * cache's step block (kv_cache.h invariant 6). */
static int rows_alloc(CachedRows *b, const ModelConfig *c, int n, int n_chunks, float **last) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t rows = (size_t)n;
    size_t acts = rows * (3 * H + 2 * qd + 2 * kvd + 2 * I);
    b->block = kv_cache_step_block(b->kv, (acts + (size_t)n_chunks * H) * sizeof(float));
    if (!b->block) return -1;
    *last = b->block + acts;
    LayerActs *a = &b->a;
    float *p = b->block;
    a->x_in = a->x_mid = p, p += rows * H;
    a->xn = p, p += rows * H;
    a->proj = p, p += rows * H;
    a->q = a->q_pre = p, p += rows * qd;
    a->att = p, p += rows * qd;
    a->k = a->k_pre = p, p += rows * kvd;
    a->v = p, p += rows * kvd;
    a->gate = a->act = p, p += rows * I; /* SwiGLU in place: act is silu(gate) * up */
    a->up = p;
    a->attn_out = a->mlp_out = a->proj; /* Gemma 2's block-output norms, in place */
    b->n = n;
    b->slot = xmalloc(rows * sizeof *b->slot);
    b->pos = xmalloc(rows * sizeof *b->pos);
    return 0;
}

static void rows_free(const Backend *be, CachedRows *b) {
    free(b->prefix_slot);
    free(b->prefix_len);
    be->free(be, b->owned[0]);
    be->free(be, b->owned[1]);
    free(b->slot);
    free(b->pos);
}

/* The cached forward's hooks (decoder_layer.h): products from the packed copy when there is one
 * (the backend decides whether it pays for this many rows); attention over the cache, after this
 * call's K and V rows are written into it. */
static void cached_linear(const DecoderHooks *h, const Model *m, int l, LoraModule mod, float *out,
                          const float *in, int n) {
    const CachedRows *b = h->ctx;
    const Backend *be = model_backend(m);
    WeightRef w;
    const float *bias;
    int in_dim, out_dim;
    layer_linear(m, l, mod, &w, &bias, &in_dim, &out_dim);
    be->linear(be, out, in, w, packed_model_matrix(b->packed, l, (PackedMatrix)mod), bias, n,
               in_dim, out_dim);
}

static void cached_attention(const DecoderHooks *h, const Model *m, int l, LayerActs *a, int n,
                             int window) {
    const CachedRows *b = h->ctx;
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    KvCache *kv = b->kv;
    size_t kvd = (size_t)kv->kv_dim;
    if (be->kv_cache_write) /* one op for all the rows (a device: one launch, not 2n copies) */
        be->kv_cache_write(be, kv_cache_row(kv, kv->k, l, 0, 0), kv_cache_row(kv, kv->v, l, 0, 0),
                           a->k, a->v, b->slot_dev, b->pos_dev, n, kv->max_len, (int)kvd);
    for (int r = 0; !be->kv_cache_write && r < n; r++) {
        be->copy(be, kv_cache_row(kv, kv->k, l, b->slot[r], b->pos[r]), a->k + (size_t)r * kvd,
                 kvd * sizeof(float), BACKEND_DEVICE_TO_DEVICE);
        be->copy(be, kv_cache_row(kv, kv->v, l, b->slot[r], b->pos[r]), a->v + (size_t)r * kvd,
                 kvd * sizeof(float), BACKEND_DEVICE_TO_DEVICE);
    }
    if (b->prefix_len) /* some rows read their prompt from the slot that prefilled it */
        be->attention_cached_prefixed(
            be, a->att, a->q, kv_cache_row(kv, kv->k, l, 0, 0), kv_cache_row(kv, kv->v, l, 0, 0),
            b->slot, b->pos, b->prefix_slot, b->prefix_len, n, kv->max_len, c->n_heads,
            c->n_kv_heads, c->head_dim, window,
            model_attn_scores(m)); /* the plain op's 1/sqrt(hd), no cap, unless the model's own */
    else if (model_scores_own(m))
        be->attention_cached_scored(be, a->att, a->q, kv_cache_row(kv, kv->k, l, 0, 0),
                                    kv_cache_row(kv, kv->v, l, 0, 0), b->slot_dev, b->pos_dev, n,
                                    kv->max_len, c->n_heads, c->n_kv_heads, c->head_dim, window,
                                    model_attn_scores(m));
    else
        be->attention_cached(be, a->att, a->q, kv_cache_row(kv, kv->k, l, 0, 0),
                             kv_cache_row(kv, kv->v, l, 0, 0), b->slot_dev, b->pos_dev, n,
                             kv->max_len, c->n_heads, c->n_kv_heads, c->head_dim, window);
}

_Static_assert((int)PACKED_Q == (int)LORA_Q && (int)PACKED_K == (int)LORA_K &&
                   (int)PACKED_V == (int)LORA_V && (int)PACKED_O == (int)LORA_O &&
                   (int)PACKED_GATE == (int)LORA_GATE && (int)PACKED_UP == (int)LORA_UP &&
                   (int)PACKED_DOWN == (int)LORA_DOWN,
               "a layer's packed matrices are numbered as its linear modules");

int model_forward_cached(const Model *m, const PackedModel *packed, KvCache *kv,
                         const CachedChunk *chunks, int n_chunks, float *logits) {
    const ModelConfig *c = &m->cfg;
    int n = 0, max_pos = 0;
    if (model_check_backend_ops(m) != 0) return -1;
    for (int j = 0; j < n_chunks; j++) {
        const CachedChunk *ch = &chunks[j];
        if (ch->slot < 0 || ch->slot >= kv->n_slots || ch->n_tokens < 1)
            return err_set("generation: bad chunk %d (slot %d, %d tokens)", j, ch->slot,
                           ch->n_tokens);
        if (kv->len[ch->slot] + ch->n_tokens > kv->max_len)
            return err_set(
                "generation: sequence of %d tokens is longer than the %d the cache holds",
                kv->len[ch->slot] + ch->n_tokens, kv->max_len);
        for (int i = 0; i < ch->n_tokens; i++)
            if (ch->tokens[i] < 0 || ch->tokens[i] >= c->vocab_size)
                return err_set("generation: token id %d is outside the vocabulary [0, %d)",
                               ch->tokens[i], c->vocab_size);
        n += ch->n_tokens;
        if (kv->len[ch->slot] + ch->n_tokens > max_pos) max_pos = kv->len[ch->slot] + ch->n_tokens;
    }
    const Backend *be = model_backend(m);
    CachedRows b = {.kv = kv, .packed = packed};
    float *last = NULL;
    if (rows_alloc(&b, c, n, n_chunks, &last) != 0) return -1;
    size_t H = (size_t)c->hidden_size;
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    int r = 0;
    for (int j = 0; j < n_chunks; j++) {
        for (int i = 0; i < chunks[j].n_tokens; i++, r++) {
            b.slot[r] = chunks[j].slot;
            b.pos[r] = kv->len[chunks[j].slot] + i;
            ids[r] = chunks[j].tokens[i];
        }
    }
    if (kv_cache_lends(kv)) { /* only a backend with attention_cached_prefixed lends */
        b.prefix_slot = xmalloc((size_t)n * sizeof *b.prefix_slot);
        b.prefix_len = xmalloc((size_t)n * sizeof *b.prefix_len);
        for (int i = 0; i < n; i++)
            b.prefix_slot[i] = kv->prefix_slot[b.slot[i]],
            b.prefix_len[i] = kv->prefix_len[b.slot[i]];
    }
    int half = c->rotary_dim / 2;
    size_t table = (size_t)n * half;
    int sets = rope_table_sets(c);
    size_t table_bytes = (size_t)sets * table * sizeof(float);
    void *owned[4] = {0};
    size_t ints = (size_t)n * sizeof(int32_t);
    const int32_t *ids_dev = backend_mirror(be, ids, ints, "token ids", &owned[0]);
    b.slot_dev = backend_mirror(be, b.slot, ints, "cache slots", &b.owned[0]);
    b.pos_dev = backend_mirror(be, b.pos, ints, "positions", &b.owned[1]);
    const float *cos_dev = NULL, *sin_dev = NULL;
    float *cos_t = NULL, *sin_t = NULL;
    const float *all_cos, *all_sin;
    if (!be->host_memory && kv_cache_rope_fixed(c) && b.pos_dev &&
        kv_cache_rope_tables(kv, c, &all_cos, &all_sin) == 0) {
        /* a device: this step's rows gathered there from the cache's tables of every position
         * (kv_cache.h invariant 5), nothing built or copied from the host */
        float *gc = be->alloc(be, table_bytes, "RoPE tables");
        float *gs = gc ? be->alloc(be, table_bytes, "RoPE tables") : NULL;
        owned[1] = gc, owned[2] = gs;
        for (int set = 0; gs && set < sets; set++) {
            size_t from = (size_t)set * kv->max_len * half;
            be->rows_gather(be, gc + set * table, all_cos + from, b.pos_dev, n, half);
            be->rows_gather(be, gs + set * table, all_sin + from, b.pos_dev, n, half);
        }
        cos_dev = gc, sin_dev = gs;
    } else {
        cos_t = xmalloc(table_bytes), sin_t = xmalloc(table_bytes);
        if (kv->rope_len_floor > max_pos) max_pos = kv->rope_len_floor; /* kv_cache.h inv. 4 */
        rope_build_rows(c, max_pos, b.pos, n, cos_t, sin_t);
        cos_dev = backend_mirror(be, cos_t, table_bytes, "RoPE tables", &owned[1]);
        sin_dev = backend_mirror(be, sin_t, table_bytes, "RoPE tables", &owned[2]);
    }
    float *logits_dev =
        be->host_memory ? logits
                        : be->alloc(be, (size_t)n_chunks * c->vocab_size * sizeof(float), "logits");
    owned[3] = be->host_memory ? NULL : logits_dev;
    int rc =
        ids_dev && cos_dev && sin_dev && b.slot_dev && b.pos_dev && last && logits_dev ? 0 : -1;
    if (rc == 0) {
        WeightRef embed = {.f32 = m->embed, .bf16 = m->embed16};
        be->embedding_gather(be, b.a.x_in, embed, ids_dev, n, (int)H);
        model_release_embedding(m);
        if (c->embed_scaled) be->scale(be, b.a.x_in, model_embed_scale(m), (size_t)n * H);
        /* tables built for these rows; Gemma 3's local set after the global one */
        DecoderRows rows = {n, NULL, cos_dev, sin_dev, NULL, NULL};
        if (sets > 1) rows.cos_local = cos_dev + table, rows.sin_local = sin_dev + table;
        /* no linears: its products may come from the prepacked weights, one by one */
        DecoderHooks hooks = {cached_linear, cached_attention, &b, NULL};
        for (int l = 0; l < c->n_layers; l++)
            decoder_layer_forward(m, l, &rows, &hooks, NULL, &b.a, b.a.x_in);
        /* the final norm and lm_head only for each chunk's last row */
        for (int j = 0, end = 0; j < n_chunks; j++) {
            end += chunks[j].n_tokens;
            be->copy(be, last + (size_t)j * H, b.a.x_in + (size_t)(end - 1) * H, H * sizeof(float),
                     BACKEND_DEVICE_TO_DEVICE);
        }
        model_rmsnorm(m, last, last, m->final_norm, n_chunks, (int)H);
        be->linear(be, logits_dev, last, model_lm_head(m), packed ? &packed->lm_head : NULL, NULL,
                   n_chunks, (int)H, c->vocab_size);
        if (c->final_softcap > 0)
            be->softcap(be, logits_dev, (size_t)n_chunks * c->vocab_size, c->final_softcap);
        if (!be->host_memory)
            be->copy(be, logits, logits_dev, (size_t)n_chunks * c->vocab_size * sizeof(float),
                     BACKEND_DEVICE_TO_HOST);
        for (int j = 0; j < n_chunks; j++)
            kv->len[chunks[j].slot] += chunks[j].n_tokens;
    }
    for (int i = 0; i < 4; i++)
        be->free(be, owned[i]);
    free(cos_t);
    free(sin_t);
    free(ids);
    rows_free(be, &b);
    return rc;
}
