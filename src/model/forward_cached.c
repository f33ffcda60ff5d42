#include "model/forward_cached.h"

#include "common/error.h"
#include "kernels/cpu/kernels.h"
#include "model/rope_tables.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n;         /* new rows in this call */
    int32_t *slot; /* [n] */
    int32_t *pos;  /* [n] position of each row in its sequence */
    float *x, *xn, *proj, *q, *k, *v, *att, *gate, *up; /* row buffers, as in the full forward */
    float *block;
} CachedBuffers;

static int buffers_alloc(CachedBuffers *b, const ModelConfig *c, int n) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t rows = (size_t)n;
    b->block = xmalloc_checked(rows * (3 * H + 2 * qd + 2 * kvd + 2 * I) * sizeof(float),
                               "decode activations");
    if (!b->block) return -1;
    float *p = b->block;
    b->x = p, p += rows * H;
    b->xn = p, p += rows * H;
    b->proj = p, p += rows * H;
    b->q = p, p += rows * qd;
    b->att = p, p += rows * qd;
    b->k = p, p += rows * kvd;
    b->v = p, p += rows * kvd;
    b->gate = p, p += rows * I;
    b->up = p;
    b->n = n;
    b->slot = xmalloc(rows * sizeof *b->slot);
    b->pos = xmalloc(rows * sizeof *b->pos);
    return 0;
}

static void buffers_free(CachedBuffers *b) {
    free(b->block);
    free(b->slot);
    free(b->pos);
}

/* Row r attends to positions [first, pos[r]] of its slot in layer l's cache (which already holds
 * this call's rows: they were written before attention). */
static void cached_attention(float *out, const float *q, const KvCache *kv, int l,
                             const CachedBuffers *b, const ModelConfig *c, int window) {
    int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, n_rep = nh / nkv;
    int max_len = kv->max_len;
#pragma omp parallel
    {
        float *scores = xmalloc((size_t)n_rep * max_len * sizeof *scores);
#pragma omp for collapse(2) schedule(static)
        for (int r = 0; r < b->n; r++) {
            for (int g = 0; g < nkv; g++) { /* query heads g * n_rep .. share kv head g */
                int pos = b->pos[r], first = 0;
                if (window > 0 && pos - window + 1 > first) first = pos - window + 1;
                size_t head = (size_t)g * hd, at = ((size_t)r * nh + (size_t)g * n_rep) * hd;
                attention_over_cache(out + at, q + at,
                                     kv_cache_row(kv, kv->k, l, b->slot[r], first) + head,
                                     kv_cache_row(kv, kv->v, l, b->slot[r], first) + head,
                                     pos - first + 1, (size_t)kv->kv_dim, hd, n_rep, scores);
            }
        }
        free(scores);
    }
}

static void residual_add(float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

static void apply_lora(const Model *m, int l, LoraModule mod, float *out, const float *in, int n) {
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (lin)
        lora_forward_add(out, in, lin->A, lin->B, n, lin->in, lin->out, m->lora->r,
                         m->lora->scaling, lora_dropout_p(m->lora),
                         lora_dropout_key(m->lora, l, mod));
}

/* out = in · W^T + bias, from the packed copy of W when there is one and n suits it. */
static void cached_linear(float *out, const float *in, WeightRef w, const PackedWeight *packed,
                          const float *bias, int n, int in_dim, int out_dim) {
    if (packed && packed_matmul_suits(n))
        packed_matmul_forward(out, in, packed, bias, n);
    else
        linear_forward(out, in, w, bias, n, in_dim, out_dim);
}

static void layer_cached(const Model *m, const PackedModel *packed, int l, KvCache *kv,
                         CachedBuffers *b, const float *cos_t, const float *sin_t) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    int n = b->n, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    float eps = (float)c->rms_norm_eps;
    rmsnorm_forward(b->xn, b->x, w->input_norm, n, H, eps);
    cached_linear(b->q, b->xn, LAYER_WEIGHT(w, wq), packed_model_matrix(packed, l, PACKED_Q), w->bq,
                  n, H, qd);
    apply_lora(m, l, LORA_Q, b->q, b->xn, n);
    cached_linear(b->k, b->xn, LAYER_WEIGHT(w, wk), packed_model_matrix(packed, l, PACKED_K), w->bk,
                  n, H, kvd);
    apply_lora(m, l, LORA_K, b->k, b->xn, n);
    cached_linear(b->v, b->xn, LAYER_WEIGHT(w, wv), packed_model_matrix(packed, l, PACKED_V), w->bv,
                  n, H, kvd);
    apply_lora(m, l, LORA_V, b->v, b->xn, n);
    if (c->qk_norm) {
        rmsnorm_forward(b->q, b->q, w->q_norm, n * c->n_heads, hd, eps);
        rmsnorm_forward(b->k, b->k, w->k_norm, n * c->n_kv_heads, hd, eps);
    }
    /* the RoPE rows were built for this call's rows, row r's at r */
    rope_forward(b->q, NULL, cos_t, sin_t, n, c->n_heads, hd);
    rope_forward(b->k, NULL, cos_t, sin_t, n, c->n_kv_heads, hd);
    for (int r = 0; r < n; r++) {
        memcpy(kv_cache_row(kv, kv->k, l, b->slot[r], b->pos[r]), b->k + (size_t)r * kvd,
               (size_t)kvd * sizeof(float));
        memcpy(kv_cache_row(kv, kv->v, l, b->slot[r], b->pos[r]), b->v + (size_t)r * kvd,
               (size_t)kvd * sizeof(float));
    }
    cached_attention(b->att, b->q, kv, l, b, c, c->layer_sliding[l] ? c->sliding_window : 0);
    cached_linear(b->proj, b->att, LAYER_WEIGHT(w, wo), packed_model_matrix(packed, l, PACKED_O),
                  w->bo, n, qd, H);
    apply_lora(m, l, LORA_O, b->proj, b->att, n);
    residual_add(b->x, b->proj, (size_t)n * H);
    rmsnorm_forward(b->xn, b->x, w->post_norm, n, H, eps);
    cached_linear(b->gate, b->xn, LAYER_WEIGHT(w, w_gate),
                  packed_model_matrix(packed, l, PACKED_GATE), w->b_gate, n, H, I);
    apply_lora(m, l, LORA_GATE, b->gate, b->xn, n);
    cached_linear(b->up, b->xn, LAYER_WEIGHT(w, w_up), packed_model_matrix(packed, l, PACKED_UP),
                  w->b_up, n, H, I);
    apply_lora(m, l, LORA_UP, b->up, b->xn, n);
    swiglu_forward(b->gate, b->gate, b->up, (size_t)n * I);
    cached_linear(b->proj, b->gate, LAYER_WEIGHT(w, w_down),
                  packed_model_matrix(packed, l, PACKED_DOWN), w->b_down, n, I, H);
    apply_lora(m, l, LORA_DOWN, b->proj, b->gate, n); /* b->gate holds silu(gate) * up */
    residual_add(b->x, b->proj, (size_t)n * H);
}

int model_forward_cached(const Model *m, const PackedModel *packed, KvCache *kv,
                         const CachedChunk *chunks, int n_chunks, float *logits) {
    const ModelConfig *c = &m->cfg;
    int n = 0, max_pos = 0;
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
    CachedBuffers b;
    if (buffers_alloc(&b, c, n) != 0) return -1;
    size_t H = (size_t)c->hidden_size;
    int r = 0;
    for (int j = 0; j < n_chunks; j++) {
        for (int i = 0; i < chunks[j].n_tokens; i++, r++) {
            b.slot[r] = chunks[j].slot;
            b.pos[r] = kv->len[chunks[j].slot] + i;
            model_embed_row(m, chunks[j].tokens[i], b.x + (size_t)r * H);
        }
    }
    size_t table = (size_t)n * (c->head_dim / 2);
    float *cos_t = xmalloc(table * sizeof(float)), *sin_t = xmalloc(table * sizeof(float));
    rope_build_rows(c, max_pos, b.pos, n, cos_t, sin_t);
    for (int l = 0; l < c->n_layers; l++)
        layer_cached(m, packed, l, kv, &b, cos_t, sin_t);
    /* the final norm and lm_head only for each chunk's last row */
    float *last = xmalloc((size_t)n_chunks * H * sizeof(float));
    for (int j = 0, end = 0; j < n_chunks; j++) {
        end += chunks[j].n_tokens;
        memcpy(last + (size_t)j * H, b.x + (size_t)(end - 1) * H, H * sizeof(float));
    }
    rmsnorm_forward(last, last, m->final_norm, n_chunks, (int)H, (float)c->rms_norm_eps);
    cached_linear(logits, last, model_lm_head(m), packed ? &packed->lm_head : NULL, NULL, n_chunks,
                  (int)H, c->vocab_size);
    for (int j = 0; j < n_chunks; j++)
        kv->len[chunks[j].slot] += chunks[j].n_tokens;
    free(last);
    free(cos_t);
    free(sin_t);
    buffers_free(&b);
    return 0;
}
