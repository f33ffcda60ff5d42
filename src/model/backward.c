#include "model/backward.h"

#include "common/error.h"
#include "kernels/cpu/kernels.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int model_tape_logprobs(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                        float *logp) {
    return model_tape_logprobs_stats(m, tape, target_mask, logp, NULL);
}

int model_tape_logprobs_stats(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                              float *logp, LogitStats *stats) {
    return model_layout_logprobs(m, &tape->layout, &tape->batch, target_mask, tape->hidden, logp,
                                 stats);
}

/* Gradient buffers for one layer's backward, reused by every layer. */
typedef struct {
    float *dxn, *tmp;  /* (N, H) */
    float *dq, *datt;  /* (N, nh*hd) */
    float *dk, *dv;    /* (N, nkv*hd) */
    float *dact, *dup; /* (N, I) */
    float *block;
} LayerGrads;

static int layer_grads_alloc(LayerGrads *g, const ModelConfig *c, size_t n) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    g->block =
        xmalloc_checked(n * (2 * H + 2 * qd + 2 * kvd + 2 * I) * sizeof(float), "backward scratch");
    if (!g->block) return -1;
    float *p = g->block;
    g->dxn = p, p += n * H;
    g->tmp = p, p += n * H;
    g->dq = p, p += n * qd;
    g->datt = p, p += n * qd;
    g->dk = p, p += n * kvd;
    g->dv = p, p += n * kvd;
    g->dact = p, p += n * I;
    g->dup = p;
    return 0;
}

static void add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* The gradient slot of a parameter (NULL for an absent bias). */
static float *grad_of(const Model *m, float *grads, const float *param) {
    return param && grads ? grads + (param - m->params) : NULL;
}

/* dx holds dL/d(layer output) on entry and dL/d(layer input) on return. */
/* The adapter's share of a linear layer's backward: din += its input gradient, and its A/B
 * gradients into lora_grads (laid out like the adapter's parameters) when given. */
static void lora_back(const Model *m, int l, LoraModule mod, float *din, const float *dout,
                      const float *in, int n, float *lora_grads) {
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (!lin) return;
    float *dA = lora_grads ? lora_grads + (lin->A - m->lora->params) : NULL;
    float *dB = lora_grads ? lora_grads + (lin->B - m->lora->params) : NULL;
    lora_backward(din, dA, dB, dout, in, lin->A, lin->B, n, lin->in, lin->out, m->lora->r,
                  m->lora->scaling, lora_dropout_p(m->lora), lora_dropout_key(m->lora, l, mod));
}

/* dx holds dL/d(layer output) on entry and dL/d(layer input) on return. */
static void layer_backward(const Model *m, int l, const ForwardTape *tape, float *dx, float *grads,
                           float *lora_grads, LayerGrads *g) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    LayerActs acts = forward_tape_layer(m, tape, l);
    const LayerActs *a = &acts;
    const TokenLayout *lay = &tape->layout;
    int n = (int)tape->n, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    float eps = (float)c->rms_norm_eps;
#define G(p) grad_of(m, grads, (p))

    /* MLP block: x_out = x_mid + down(silu(gate(xn)) * up(xn)), xn = norm(x_mid) */
    matmul_backward(g->dact, G(w->w_down), G(w->b_down), dx, a->act, w->w_down, n, I, H);
    lora_back(m, l, LORA_DOWN, g->dact, dx, a->act, n, lora_grads);
    swiglu_backward(g->dact, g->dup, g->dact, a->gate, a->up, (size_t)n * I);
    rmsnorm_forward(a->xn, a->x_mid, w->post_norm, n, H, eps);
    matmul_backward(g->dxn, G(w->w_gate), G(w->b_gate), g->dact, a->xn, w->w_gate, n, H, I);
    lora_back(m, l, LORA_GATE, g->dxn, g->dact, a->xn, n, lora_grads);
    matmul_backward(g->tmp, G(w->w_up), G(w->b_up), g->dup, a->xn, w->w_up, n, H, I);
    lora_back(m, l, LORA_UP, g->tmp, g->dup, a->xn, n, lora_grads);
    add_into(g->dxn, g->tmp, (size_t)n * H);
    rmsnorm_backward(g->tmp, G(w->post_norm), g->dxn, a->x_mid, w->post_norm, n, H, eps);
    add_into(dx, g->tmp, (size_t)n * H); /* dx = dL/dx_mid */

    /* attention block: x_mid = x_in + o(attn(rope(q), rope(k), v)), q/k/v from norm(x_in) */
    matmul_backward(g->datt, G(w->wo), G(w->bo), dx, a->att, w->wo, n, qd, H);
    lora_back(m, l, LORA_O, g->datt, dx, a->att, n, lora_grads);
    int window = c->layer_sliding[l] ? c->sliding_window : 0;
    attention_backward(g->dq, g->dk, g->dv, g->datt, a->q, a->k, a->v, lay->segs, lay->n_segs,
                       lay->seq_index, n, c->n_heads, c->n_kv_heads, hd, window);
    rope_backward(g->dq, lay->positions, tape->cos_t, tape->sin_t, n, c->n_heads, hd);
    rope_backward(g->dk, lay->positions, tape->cos_t, tape->sin_t, n, c->n_kv_heads, hd);
    if (c->qk_norm) {
        rmsnorm_backward(g->dq, G(w->q_norm), g->dq, a->q_pre, w->q_norm, n * c->n_heads, hd, eps);
        rmsnorm_backward(g->dk, G(w->k_norm), g->dk, a->k_pre, w->k_norm, n * c->n_kv_heads, hd,
                         eps);
    }
    rmsnorm_forward(a->xn, a->x_in, w->input_norm, n, H, eps);
    matmul_backward(g->dxn, G(w->wq), G(w->bq), g->dq, a->xn, w->wq, n, H, qd);
    lora_back(m, l, LORA_Q, g->dxn, g->dq, a->xn, n, lora_grads);
    matmul_backward(g->tmp, G(w->wk), G(w->bk), g->dk, a->xn, w->wk, n, H, kvd);
    lora_back(m, l, LORA_K, g->tmp, g->dk, a->xn, n, lora_grads);
    add_into(g->dxn, g->tmp, (size_t)n * H);
    matmul_backward(g->tmp, G(w->wv), G(w->bv), g->dv, a->xn, w->wv, n, H, kvd);
    lora_back(m, l, LORA_V, g->tmp, g->dv, a->xn, n, lora_grads);
    add_into(g->dxn, g->tmp, (size_t)n * H);
    rmsnorm_backward(g->tmp, G(w->input_norm), g->dxn, a->x_in, w->input_norm, n, H, eps);
    add_into(dx, g->tmp, (size_t)n * H); /* dx = dL/dx_in */
#undef G
}

int model_backward(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                   const float *dlogp, float *grads, float *lora_grads) {
    const ModelConfig *c = &m->cfg;
    const TokenBatch *b = &tape->batch;
    size_t n = tape->n, H = (size_t)c->hidden_size, cells = (size_t)b->batch * b->t_len;
    if (m->params16) return err_set("a model kept in bf16 is frozen: it has no backward pass");
    float *dx = xmalloc_checked((n ? n : 1) * H * sizeof(float), "backward residual gradient");
    LayerGrads g;
    if (!dx || layer_grads_alloc(&g, c, n ? n : 1) != 0) {
        free(dx);
        return -1;
    }

    /* lm_head + log-softmax over the selected rows, scattered back to their positions */
    size_t *where = xmalloc(cells * sizeof *where), *from = xmalloc(cells * sizeof *from);
    size_t n_sel = token_layout_targets(&tape->layout, b, target_mask, where, from);
    float *rows = xmalloc((n_sel ? n_sel : 1) * H * sizeof(float));
    float *drows = xmalloc((n_sel ? n_sel : 1) * H * sizeof(float));
    int32_t *targets = xmalloc((n_sel ? n_sel : 1) * sizeof *targets);
    float *dsel = xmalloc((n_sel ? n_sel : 1) * sizeof(float));
    for (size_t j = 0; j < n_sel; j++) {
        memcpy(rows + j * H, tape->hidden + from[j] * H, H * sizeof(float));
        targets[j] = b->tokens[where[j]];
        dsel[j] = dlogp[where[j]];
    }
    model_scale_logit_rows(m, rows, n_sel, H); /* the lm_head saw row / T ... */
    fused_logprob_backward(drows, grad_of(m, grads, m->lm_head), dsel, rows, targets, m->lm_head,
                           (int)n_sel, (int)H, c->vocab_size);
    model_scale_logit_rows(m, drows, n_sel, H); /* ... so d(row) = d(row / T) / T */
    float *dhidden = g.tmp;
    memset(dhidden, 0, n * H * sizeof(float));
    for (size_t j = 0; j < n_sel; j++) { /* a shared row predicts a token of each sharing row */
        float *d = dhidden + from[j] * H;
        const float *src = drows + j * H;
        for (size_t i = 0; i < H; i++)
            d[i] += src[i];
    }
    free(dsel);
    free(targets);
    free(drows);
    free(rows);
    free(from);
    free(where);

    rmsnorm_backward(dx, grad_of(m, grads, m->final_norm), dhidden, tape->x_final, m->final_norm,
                     (int)n, (int)H, (float)c->rms_norm_eps);
    for (int l = c->n_layers - 1; l >= 0; l--)
        layer_backward(m, l, tape, dx, grads, lora_grads, &g);

    /* embedding rows of the computed (real) tokens; nn.Embedding(padding_idx) gives
     * pad_token_id none */
    float *dembed = grad_of(m, grads, m->embed);
    for (size_t i = 0; dembed && i < n; i++) {
        int32_t token = tape->layout.tokens[i];
        if (token == c->pad_token_id) continue;
        float *row = dembed + (size_t)token * H;
        const float *d = dx + i * H;
        for (size_t j = 0; j < H; j++)
            row[j] += d[j];
    }
    free(g.block);
    free(dx);
    return 0;
}
