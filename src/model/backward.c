#include "model/backward.h"

#include "common/error.h"
#include "model/decoder_layer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int model_tape_logprobs(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                        float *logp) {
    return model_tape_logprobs_stats(m, tape, target_mask, logp, NULL);
}

int model_tape_logprobs_stats(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                              float *logp, LogitStats *stats) {
    return model_layout_logprobs_keep(m, &tape->layout, &tape->batch, target_mask, tape->hidden,
                                      logp, stats, tape->lse);
}

/* Gradient buffers for one layer's backward, reused by every layer. */
typedef struct {
    float *dxn, *tmp;  /* (N, H) */
    float *dq, *datt;  /* (N, nh*hd) */
    float *dk, *dv;    /* (N, nkv*hd) */
    float *dact, *dup; /* (N, I) */
    float *block;
} LayerGrads;

static int layer_grads_alloc(const Backend *be, LayerGrads *g, const ModelConfig *c, size_t n) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    g->block =
        be->alloc(be, n * (2 * H + 2 * qd + 2 * kvd + 2 * I) * sizeof(float), "backward scratch");
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

/* The gradient slot of a parameter (NULL for an absent bias). */
static float *grad_of(const Model *m, float *grads, const float *param) {
    return param && grads ? grads + (param - m->params) : NULL;
}

/* The adapter's share of a linear layer's backward: din += its input gradient, and its A/B
 * gradients into lora_grads (laid out like the adapter's parameters) when given. */
static void lora_back(const Model *m, int l, LoraModule mod, float *din, const float *dout,
                      const float *in, int n, float *lora_grads) {
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (!lin) return;
    float *dA = lora_grads ? lora_grads + (lin->A - m->lora->params) : NULL;
    float *dB = lora_grads ? lora_grads + (lin->B - m->lora->params) : NULL;
    const Backend *be = model_backend(m);
    be->lora_backward(be, din, dA, dB, dout, in, lin->A, lin->B, n, lin->in, lin->out, m->lora->r,
                      m->lora->scaling, lora_dropout_p(m->lora), lora_dropout_key(m->lora, l, mod));
}

/* The backward of layer l's linears mods[0 .. count - 1], all of the input xn (N, H) (q, k, v;
 * gate, up): dxn written = Σ_i dout_i W_i plus each adapter's input gradient, summed in part
 * order through tmp (N, H) as one linear after another would; the weights' (grads) and
 * adapters' (lora_grads) gradients accumulated. Where the backend has linear_weight_grads, the
 * weight gradients are taken together after the input gradients (the CPU packs xn once for
 * them); their bits are the same either way, each being its own op's sum. Without adapters, a
 * backend's linears_backward does the whole (the same sums; the CPU's autocast packs each dout
 * once for its two products). */
static void linears_backward(const Model *m, int l, const LoraModule *mods,
                             const float *const *douts, int count, const float *xn, float *dxn,
                             float *tmp, float *grads, float *lora_grads, int n) {
    const Backend *be = model_backend(m);
    bool together = be->linear_weight_grads != NULL, adapters = false;
    LinearGradPart parts[LORA_N_MODULES]; /* (count <= LORA_N_MODULES) */
    int in_dim = 0;
    for (int i = 0; i < count; i++) {
        LinearGradPart *p = &parts[i];
        const float *bias;
        layer_linear(m, l, mods[i], &p->w, &bias, &in_dim, &p->out_dim);
        p->dw = grad_of(m, grads, p->w.f32), p->dbias = grad_of(m, grads, bias);
        p->dout = douts[i];
        adapters = adapters || lora_linear(m->lora, l, mods[i]);
    }
    if (be->linears_backward && !adapters) { /* the same sums, each dout packed once */
        be->linears_backward(be, parts, count, xn, dxn, tmp, n, in_dim);
        return;
    }
    for (int i = 0; i < count; i++) {
        LinearGradPart *p = &parts[i];
        float *din = i == 0 ? dxn : tmp;
        be->linear_backward(be, din, together ? NULL : p->dw, together ? NULL : p->dbias, p->dout,
                            xn, p->w, n, in_dim, p->out_dim);
        lora_back(m, l, mods[i], din, p->dout, xn, n, lora_grads);
        if (i > 0) be->add(be, dxn, dxn, tmp, (size_t)n * in_dim);
    }
    if (together) be->linear_weight_grads(be, parts, count, xn, n, in_dim);
}

/* dx holds dL/d(layer output) on entry and dL/d(layer input) on return. */
static void layer_backward(const Model *m, int l, const ForwardTape *tape, float *dx, float *grads,
                           float *lora_grads, LayerGrads *g) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    /* A kept tape's act (shared by the layers) is regenerated in SwiGLU's backward pass where the
     * backend can (that pass reads gate and up anyway): down's input gradient first, then SwiGLU's
     * backward writing act, then down's weight gradient from it. Not with an adapter on down,
     * whose backward reads act before SwiGLU's. The same bits either way. */
    bool act_in_backward = !tape->recompute && be->swiglu_backward_act &&
                           c->mlp_act == MLP_ACT_SILU && !lora_linear(m->lora, l, LORA_DOWN);
    LayerActs acts = forward_tape_layer(m, tape, l, !act_in_backward);
    const LayerActs *a = &acts;
    const LayoutMirror *dev = &tape->dev;
    int n = (int)tape->n, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int qd = c->n_heads * hd;
#define G(p) grad_of(m, grads, (p))

    /* MLP block: x_out = x_mid + down(act(gate(xn)) * up(xn)), xn = norm(x_mid); Gemma 2 norms
     * down's output (mlp_out) first, and its gradient is taken back through that norm into dxn */
    const float *ddown = dx;
    if (c->gemma_norms) {
        model_rmsnorm_backward(m, g->dxn, G(w->mlp_out_norm), dx, a->mlp_out, w->mlp_out_norm, n,
                               H);
        ddown = g->dxn;
    }
    if (act_in_backward) {
        be->linear_backward(be, g->dact, NULL, NULL, ddown, a->act, LAYER_WEIGHT(w, w_down), n, I,
                            H);
        be->swiglu_backward_act(be, a->act, g->dact, g->dup, g->dact, a->gate, a->up,
                                (size_t)n * I);
        if (G(w->w_down) || G(w->b_down))
            be->linear_backward(be, NULL, G(w->w_down), G(w->b_down), ddown, a->act,
                                LAYER_WEIGHT(w, w_down), n, I, H);
    } else {
        be->linear_backward(be, g->dact, G(w->w_down), G(w->b_down), ddown, a->act,
                            LAYER_WEIGHT(w, w_down), n, I, H);
        lora_back(m, l, LORA_DOWN, g->dact, ddown, a->act, n, lora_grads);
        if (c->mlp_act == MLP_ACT_GELU_TANH)
            be->geglu_tanh_backward(be, g->dact, g->dup, g->dact, a->gate, a->up, (size_t)n * I);
        else
            be->swiglu_backward(be, g->dact, g->dup, g->dact, a->gate, a->up, (size_t)n * I);
    }
    model_rmsnorm(m, a->xn, a->x_mid, w->post_norm, n, H);
    linears_backward(m, l, (const LoraModule[]){LORA_GATE, LORA_UP},
                     (const float *const[]){g->dact, g->dup}, 2, a->xn, g->dxn, g->tmp, grads,
                     lora_grads, n);
    /* dx = dL/dx_mid */
    model_rmsnorm_backward_add(m, dx, g->tmp, G(w->post_norm), g->dxn, a->x_mid, w->post_norm, n,
                               H);

    /* attention block: x_mid = x_in + o(attn(rope(q), rope(k), v)), q/k/v from norm(x_in); Gemma
     * 2's o output (attn_out) normed first */
    const float *dox = dx;
    if (c->gemma_norms) {
        model_rmsnorm_backward(m, g->dxn, G(w->attn_out_norm), dx, a->attn_out, w->attn_out_norm, n,
                               H);
        dox = g->dxn;
    }
    be->linear_backward(be, g->datt, G(w->wo), G(w->bo), dox, a->att, LAYER_WEIGHT(w, wo), n, qd,
                        H);
    lora_back(m, l, LORA_O, g->datt, dox, a->att, n, lora_grads);
    int window = c->layer_sliding[l] ? c->sliding_window : 0;
    if (model_scores_own(m))
        be->attention_scored_backward(be, g->dq, g->dk, g->dv, g->datt, a->q, a->k, a->v, dev->segs,
                                      dev->n_segs, dev->seq_index, n, c->n_heads, c->n_kv_heads, hd,
                                      window, model_attn_scores(m));
    else
        be->attention_backward(be, g->dq, g->dk, g->dv, g->datt, a->q, a->k, a->v, dev->segs,
                               dev->n_segs, dev->seq_index, n, c->n_heads, c->n_kv_heads, hd,
                               window);
    int rot = c->rotary_dim;
    bool local = layer_rope_local(c, l); /* Gemma 3's sliding layers: their own tables */
    const float *cos_t = local ? dev->cos_local : dev->cos_t;
    const float *sin_t = local ? dev->sin_local : dev->sin_t;
    if (!c->layer_nope[l]) { /* a NoPE layer applied none: dq, dk pass as they are */
        backend_rope_qk(be, g->dq, g->dk, dev->positions, cos_t, sin_t, n, c->n_heads,
                        c->n_kv_heads, hd, rot, true);
    }
    if (c->qk_norm) { /* (1 + w) in Gemma 3 */
        model_rmsnorm_backward(m, g->dq, G(w->q_norm), g->dq, a->q_pre, w->q_norm, n * c->n_heads,
                               hd);
        model_rmsnorm_backward(m, g->dk, G(w->k_norm), g->dk, a->k_pre, w->k_norm,
                               n * c->n_kv_heads, hd);
    }
    model_rmsnorm(m, a->xn, a->x_in, w->input_norm, n, H);
    linears_backward(m, l, (const LoraModule[]){LORA_Q, LORA_K, LORA_V},
                     (const float *const[]){g->dq, g->dk, g->dv}, 3, a->xn, g->dxn, g->tmp, grads,
                     lora_grads, n);
    /* dx = dL/dx_in */
    model_rmsnorm_backward_add(m, dx, g->tmp, G(w->input_norm), g->dxn, a->x_in, w->input_norm, n,
                               H);
#undef G
}

/* Whether the tape holds the log-sum-exp of exactly these scored cells (TapeLse's invariants
 * 1 and 2), so that the lm_head's backward can skip recomputing it. */
static bool lse_handed_over(const ForwardTape *tape, const size_t *where, size_t n_sel) {
    const TapeLse *k = tape->lse;
    return k && k->valid && n_sel && k->n_sel == n_sel &&
           memcmp(k->where, where, n_sel * sizeof *where) == 0 && tape->be->logprob_backward_lse;
}

int model_backward(const Model *m, const ForwardTape *tape, const uint8_t *target_mask,
                   const float *dlogp, float *grads, float *lora_grads) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    const TokenBatch *b = &tape->batch;
    size_t n = tape->n, H = (size_t)c->hidden_size, cells = (size_t)b->batch * b->t_len;
    /* a base kept in bf16 is frozen: gradients flow through it to an adapter, none into it */
    if (m->params16 && grads)
        return err_set("a model kept in bf16 is frozen: only an adapter over it trains");
    float *dx = be->alloc(be, (n ? n : 1) * H * sizeof(float), "backward residual gradient");
    LayerGrads g = {0};
    if (!dx || layer_grads_alloc(be, &g, c, n ? n : 1) != 0) {
        be->free(be, dx);
        return -1;
    }

    /* lm_head + log-softmax over the selected rows, scattered back to their positions */
    size_t *where = xmalloc(cells * sizeof *where), *from = xmalloc(cells * sizeof *from);
    size_t n_sel = token_layout_targets(&tape->layout, b, target_mask, where, from);
    size_t cap = n_sel ? n_sel : 1;
    int32_t *from32 = xmalloc(cap * sizeof *from32), *targets = xmalloc(cap * sizeof *targets);
    float *dsel = xmalloc(cap * sizeof(float));
    for (size_t j = 0; j < n_sel; j++) {
        from32[j] = (int32_t)from[j];
        targets[j] = b->tokens[where[j]];
        dsel[j] = dlogp[where[j]];
    }
    void *owned[3];
    const int32_t *from_dev =
        backend_mirror(be, from32, n_sel * sizeof *from32, "scored rows", &owned[0]);
    const int32_t *targets_dev =
        backend_mirror(be, targets, n_sel * sizeof *targets, "targets", &owned[1]);
    const float *dsel_dev =
        backend_mirror(be, dsel, n_sel * sizeof *dsel, "log-probability gradients", &owned[2]);
    float *rows = be->alloc(be, cap * H * sizeof(float), "scored rows");
    float *drows = be->alloc(be, cap * H * sizeof(float), "scored row gradients");
    bool ok = rows && drows && ((from_dev && targets_dev && dsel_dev) || !n_sel);
    if (ok) {
        be->rows_gather(be, rows, tape->hidden, from_dev, (int)n_sel, (int)H);
        if (c->final_softcap > 0) { /* the 1/T is inside the cap's finish */
            be->logprob_capped_backward(be, drows, grad_of(m, grads, m->lm_head), dsel_dev, rows,
                                        targets_dev, model_lm_head(m), (int)n_sel, (int)H,
                                        c->vocab_size, model_logit_cap(m));
        } else {
            model_scale_logit_rows(m, rows, n_sel, H); /* the lm_head saw row / T ... */
            if (lse_handed_over(tape, where, n_sel))
                be->logprob_backward_lse(be, drows, grad_of(m, grads, m->lm_head), dsel_dev,
                                         tape->lse->lse, rows, targets_dev, model_lm_head(m),
                                         (int)n_sel, (int)H, c->vocab_size);
            else
                be->logprob_backward(be, drows, grad_of(m, grads, m->lm_head), dsel_dev, rows,
                                     targets_dev, model_lm_head(m), (int)n_sel, (int)H,
                                     c->vocab_size);
            model_scale_logit_rows(m, drows, n_sel, H); /* ... so d(row) = d(row / T) / T */
        }
        float *dhidden = g.tmp;
        be->memset(be, dhidden, 0, n * H * sizeof(float));
        /* a shared row predicts a token of each sharing row */
        be->rows_scatter_add(be, dhidden, drows, from_dev, (int)n_sel, (int)H);
    }
    be->free(be, drows);
    be->free(be, rows);
    for (int i = 0; i < 3; i++)
        be->free(be, owned[i]);
    free(dsel);
    free(targets);
    free(from32);
    free(from);
    free(where);
    if (!ok) {
        be->free(be, g.block);
        be->free(be, dx);
        return -1;
    }

    model_rmsnorm_backward(m, dx, grad_of(m, grads, m->final_norm), g.tmp, tape->x_final,
                           m->final_norm, (int)n, (int)H);
    for (int l = c->n_layers - 1; l >= 0; l--)
        layer_backward(m, l, tape, dx, grads, lora_grads, &g);

    /* embedding rows of the computed (real) tokens; nn.Embedding(padding_idx) gives
     * pad_token_id none */
    float *dembed = grad_of(m, grads, m->embed);
    if (dembed && c->embed_scaled) /* the rows were scaled by the normalizer after the gather */
        be->scale(be, dx, model_embed_scale(m), n * H);
    if (dembed)
        be->embedding_scatter_add(be, dembed, dx, tape->dev.tokens, (int)n, (int)H,
                                  c->pad_token_id);
    be->free(be, g.block);
    be->free(be, dx);
    return 0;
}
