#include "model/forward.h"

#include "common/error.h"
#include "kernels/cpu/kernels.h"
#include "model/rope_tables.h"

#include <stdlib.h>
#include <string.h>

static int check_batch(const Model *m, const TokenBatch *b, int *max_position) {
    size_t n = (size_t)b->batch * b->t_len;
    *max_position = b->t_len - 1;
    for (size_t i = 0; i < n; i++) {
        if (b->attn_mask && !b->attn_mask[i]) continue;
        if (b->tokens[i] < 0 || b->tokens[i] >= m->cfg.vocab_size)
            return err_set("token id %d (sequence %zu, position %zu) is outside the vocabulary "
                           "[0, %d)",
                           b->tokens[i], i / b->t_len, i % b->t_len, m->cfg.vocab_size);
        if (b->positions) {
            if (b->positions[i] < 0) return err_set("negative position id %d", b->positions[i]);
            if (b->positions[i] > *max_position) *max_position = b->positions[i];
        }
    }
    return 0;
}

/* Activations of one layer, reused by every layer (inference keeps nothing for backward). */
typedef struct {
    float *x;     /* (N, H) residual stream */
    float *xn;    /* (N, H) normed input of a block */
    float *q;     /* (N, nh*hd) */
    float *k, *v; /* (N, nkv*hd) */
    float *att;   /* (N, nh*hd) attention output before o_proj */
    float *gate;  /* (N, I) */
    float *up;    /* (N, I) */
    float *proj;  /* (N, H) block output before the residual add */
    float *block; /* the single allocation behind all of them */
} LayerActs;

static int acts_alloc(LayerActs *a, const ModelConfig *c, size_t n) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t total = n * (3 * H + 2 * qd + 2 * kvd + 2 * I);
    a->block = xmalloc_checked(total * sizeof(float), "forward activations");
    if (!a->block) return -1;
    float *p = a->block;
    a->x = p, p += n * H;
    a->xn = p, p += n * H;
    a->proj = p, p += n * H;
    a->q = p, p += n * qd;
    a->att = p, p += n * qd;
    a->k = p, p += n * kvd;
    a->v = p, p += n * kvd;
    a->gate = p, p += n * I;
    a->up = p;
    return 0;
}

static void add_inplace(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static void layer_forward(const Model *m, int l, const TokenBatch *b, const int32_t *positions,
                          const float *cos_t, const float *sin_t, LayerActs *a) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    int n = b->batch * b->t_len, H = c->hidden_size, I = c->intermediate_size;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    float eps = (float)c->rms_norm_eps;

    rmsnorm_forward(a->xn, a->x, w->input_norm, n, H, eps);
    matmul_forward(a->q, a->xn, w->wq, w->bq, n, H, qd);
    matmul_forward(a->k, a->xn, w->wk, w->bk, n, H, kvd);
    matmul_forward(a->v, a->xn, w->wv, w->bv, n, H, kvd);
    if (c->qk_norm) {
        rmsnorm_forward(a->q, a->q, w->q_norm, n * c->n_heads, c->head_dim, eps);
        rmsnorm_forward(a->k, a->k, w->k_norm, n * c->n_kv_heads, c->head_dim, eps);
    }
    rope_forward(a->q, positions, cos_t, sin_t, n, c->n_heads, c->head_dim);
    rope_forward(a->k, positions, cos_t, sin_t, n, c->n_kv_heads, c->head_dim);
    int window = c->layer_sliding[l] ? c->sliding_window : 0;
    attention_forward(a->att, a->q, a->k, a->v, b->attn_mask, b->batch, b->t_len, c->n_heads,
                      c->n_kv_heads, c->head_dim, window);
    matmul_forward(a->proj, a->att, w->wo, w->bo, n, qd, H);
    add_inplace(a->x, a->proj, (size_t)n * H);

    rmsnorm_forward(a->xn, a->x, w->post_norm, n, H, eps);
    matmul_forward(a->gate, a->xn, w->w_gate, w->b_gate, n, H, I);
    matmul_forward(a->up, a->xn, w->w_up, w->b_up, n, H, I);
    swiglu_forward(a->gate, a->gate, a->up, (size_t)n * I);
    matmul_forward(a->proj, a->gate, w->w_down, w->b_down, n, I, H);
    add_inplace(a->x, a->proj, (size_t)n * H);
}

int model_forward_hidden(const Model *m, const TokenBatch *b, float *hidden) {
    const ModelConfig *c = &m->cfg;
    int max_position;
    if (b->batch <= 0 || b->t_len <= 0) return err_set("empty batch");
    if (check_batch(m, b, &max_position) != 0) return -1;
    size_t n = (size_t)b->batch * b->t_len, H = (size_t)c->hidden_size;

    int32_t *positions = NULL;
    if (!b->positions) {
        positions = xmalloc(n * sizeof *positions);
        for (size_t i = 0; i < n; i++)
            positions[i] = (int32_t)(i % (size_t)b->t_len);
    }
    const int32_t *pos = b->positions ? b->positions : positions;
    size_t table = (size_t)(max_position + 1) * (c->head_dim / 2);
    float *cos_t = xmalloc(table * sizeof(float)), *sin_t = xmalloc(table * sizeof(float));
    rope_build_tables(c, max_position + 1, cos_t, sin_t);

    LayerActs a;
    int rc = acts_alloc(&a, c, n);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            /* padding may carry any id; its row is never used, so embed it as token 0 */
            int32_t id = (b->attn_mask && !b->attn_mask[i]) ? 0 : b->tokens[i];
            memcpy(a.x + i * H, m->embed + (size_t)id * H, H * sizeof(float));
        }
        for (int l = 0; l < c->n_layers; l++)
            layer_forward(m, l, b, pos, cos_t, sin_t, &a);
        rmsnorm_forward(hidden, a.x, m->final_norm, (int)n, (int)H, (float)c->rms_norm_eps);
        free(a.block);
    }
    free(cos_t);
    free(sin_t);
    free(positions);
    return rc;
}

int model_token_logprobs(const Model *m, const TokenBatch *b, const uint8_t *target_mask,
                         float *logp) {
    size_t n = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    float *hidden = xmalloc_checked(n * H * sizeof(float), "hidden states");
    if (!hidden) return -1;
    if (model_forward_hidden(m, b, hidden) != 0) {
        free(hidden);
        return -1;
    }
    /* Gather the rows that predict a selected token, so only they meet the lm_head. */
    size_t *where = xmalloc(n * sizeof *where);
    int32_t *targets = xmalloc(n * sizeof *targets);
    size_t n_sel = 0;
    for (size_t i = 0; i < n; i++) {
        logp[i] = 0.0f;
        bool real = !b->attn_mask || b->attn_mask[i];
        if (i % (size_t)b->t_len == 0 || !real || (target_mask && !target_mask[i])) continue;
        if (n_sel != i - 1) memmove(hidden + n_sel * H, hidden + (i - 1) * H, H * sizeof(float));
        where[n_sel] = i;
        targets[n_sel++] = b->tokens[i];
    }
    float *sel_logp = xmalloc((n_sel ? n_sel : 1) * sizeof(float));
    fused_logprob_forward(sel_logp, hidden, targets, m->lm_head, (int)n_sel, (int)H,
                          m->cfg.vocab_size);
    for (size_t j = 0; j < n_sel; j++)
        logp[where[j]] = sel_logp[j];
    free(sel_logp);
    free(targets);
    free(where);
    free(hidden);
    return 0;
}

int model_logits(const Model *m, const TokenBatch *b, int seq, int t0, int t1, float *out) {
    if (seq < 0 || seq >= b->batch || t0 < 0 || t1 > b->t_len || t0 >= t1)
        return err_set("logits range: sequence %d positions [%d, %d) is outside the batch", seq, t0,
                       t1);
    size_t n = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    float *hidden = xmalloc_checked(n * H * sizeof(float), "hidden states");
    if (!hidden) return -1;
    int rc = model_forward_hidden(m, b, hidden);
    if (rc == 0)
        matmul_forward(out, hidden + ((size_t)seq * b->t_len + t0) * H, m->lm_head, NULL, t1 - t0,
                       (int)H, m->cfg.vocab_size);
    free(hidden);
    return rc;
}
