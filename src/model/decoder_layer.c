#include "model/decoder_layer.h"

#include "common/error.h"

#include <math.h>

bool layer_rope_local(const ModelConfig *c, int l) {
    return c->local_rope && c->layer_sliding[l];
}

void model_rmsnorm(const Model *m, float *out, const float *in, const float *w, int n, int c) {
    const Backend *be = model_backend(m);
    float eps = (float)m->cfg.rms_norm_eps;
    if (m->cfg.gemma_norms)
        be->rmsnorm_1p(be, out, in, w, n, c, eps);
    else
        be->rmsnorm(be, out, in, w, n, c, eps);
}

void model_rmsnorm_backward(const Model *m, float *din, float *dw, const float *dout,
                            const float *in, const float *w, int n, int c) {
    const Backend *be = model_backend(m);
    float eps = (float)m->cfg.rms_norm_eps;
    if (m->cfg.gemma_norms)
        be->rmsnorm_1p_backward(be, din, dw, dout, in, w, n, c, eps);
    else
        be->rmsnorm_backward(be, din, dw, dout, in, w, n, c, eps);
}

void model_add_rmsnorm(const Model *m, float *sum, float *out, const float *a, const float *b,
                       const float *w, int n, int c) {
    const Backend *be = model_backend(m);
    if (be->add_rmsnorm && !m->cfg.gemma_norms) {
        be->add_rmsnorm(be, sum, out, a, b, w, n, c, (float)m->cfg.rms_norm_eps);
        return;
    }
    be->add(be, sum, a, b, (size_t)n * c);
    model_rmsnorm(m, out, sum, w, n, c);
}

void model_rmsnorm_backward_add(const Model *m, float *dres, float *tmp, float *dw,
                                const float *dout, const float *in, const float *w, int n, int c) {
    const Backend *be = model_backend(m);
    if (be->rmsnorm_backward_add && !m->cfg.gemma_norms) {
        be->rmsnorm_backward_add(be, dres, dw, dout, in, w, n, c, (float)m->cfg.rms_norm_eps);
        return;
    }
    model_rmsnorm_backward(m, tmp, dw, dout, in, w, n, c);
    be->add(be, dres, dres, tmp, (size_t)n * c);
}

void model_gated_act(const Model *m, float *out, const float *gate, const float *up, size_t n) {
    const Backend *be = model_backend(m);
    if (m->cfg.mlp_act == MLP_ACT_GELU_TANH)
        be->geglu_tanh(be, out, gate, up, n);
    else
        be->swiglu(be, out, gate, up, n);
}

int model_check_backend_ops(const Model *m) {
    const Backend *be = model_backend(m);
    if (!m->cfg.gemma_norms) return 0;
    bool all = be->rmsnorm_1p && be->rmsnorm_1p_backward && be->geglu_tanh &&
               be->geglu_tanh_backward && be->attention_scored && be->attention_scored_backward &&
               be->attention_cached_scored && be->logprob_capped && be->logprob_capped_backward &&
               be->softcap;
    if (all) return 0;
    return err_set("the %s backend has no Gemma 2 kernels ((1 + w) RMSNorm, GELU-tanh MLP, "
                   "soft-capped attention and logits): run a %s model on the CPU",
                   be->name, model_arch_name(m->cfg.arch));
}

/* 1/sqrt(hd), the scale of the backend's plain attention; a config that sets none (0) has it. */
static float default_scale(const ModelConfig *c) {
    return 1.0f / sqrtf((float)c->head_dim);
}

AttnScores model_attn_scores(const Model *m) {
    float scale = m->cfg.attn_scale > 0 ? m->cfg.attn_scale : default_scale(&m->cfg);
    return (AttnScores){scale, m->cfg.attn_softcap};
}

bool model_scores_own(const Model *m) {
    return m->cfg.attn_softcap > 0 ||
           (m->cfg.attn_scale > 0 && m->cfg.attn_scale != default_scale(&m->cfg));
}

void layer_linear(const Model *m, int l, LoraModule mod, WeightRef *w, const float **bias,
                  int *in_dim, int *out_dim) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *lw = &m->layers[l];
    int H = c->hidden_size, I = c->intermediate_size;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    switch (mod) {
    case LORA_Q:
        *w = LAYER_WEIGHT(lw, wq), *bias = lw->bq, *in_dim = H, *out_dim = qd;
        return;
    case LORA_K:
        *w = LAYER_WEIGHT(lw, wk), *bias = lw->bk, *in_dim = H, *out_dim = kvd;
        return;
    case LORA_V:
        *w = LAYER_WEIGHT(lw, wv), *bias = lw->bv, *in_dim = H, *out_dim = kvd;
        return;
    case LORA_O:
        *w = LAYER_WEIGHT(lw, wo), *bias = lw->bo, *in_dim = qd, *out_dim = H;
        return;
    case LORA_GATE:
        *w = LAYER_WEIGHT(lw, w_gate), *bias = lw->b_gate, *in_dim = H, *out_dim = I;
        return;
    case LORA_UP:
        *w = LAYER_WEIGHT(lw, w_up), *bias = lw->b_up, *in_dim = H, *out_dim = I;
        return;
    case LORA_DOWN:
    case LORA_N_MODULES:
        break;
    }
    *w = LAYER_WEIGHT(lw, w_down), *bias = lw->b_down, *in_dim = I, *out_dim = H;
}

/* out += the adapter's term of the linear `mod` of in, when the model carries one for it. */
static void add_lora_term(const Model *m, int l, LoraModule mod, float *out, const float *in,
                          int n) {
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (lin)
        model_backend(m)->lora(model_backend(m), out, in, lin->A, lin->B, n, lin->in, lin->out,
                               m->lora->r, m->lora->scaling, lora_dropout_p(m->lora),
                               lora_dropout_key(m->lora, l, mod));
}

/* out = the linear `mod` of in, through the hook, plus the adapter's term. */
static void linear_with_lora(const Model *m, const DecoderHooks *hooks, int l, LoraModule mod,
                             float *out, const float *in, int n) {
    hooks->linear(hooks, m, l, mod, out, in, n);
    add_lora_term(m, l, mod, out, in, n);
}

/* outs[i] = the linear mods[i] of the one input `in`, i < count, each plus its adapter's term:
 * the products together where the hooks can (decoder_layer.h's linears), then the terms. Each out
 * is written by its own ops only, so the order changes no bits. */
static void linears_with_lora(const Model *m, const DecoderHooks *hooks, int l,
                              const LoraModule *mods, float *const *outs, int count,
                              const float *in, int n) {
    if (hooks->linears)
        hooks->linears(hooks, m, l, mods, outs, count, in, n);
    else
        for (int i = 0; i < count; i++)
            hooks->linear(hooks, m, l, mods[i], outs[i], in, n);
    for (int i = 0; i < count; i++)
        add_lora_term(m, l, mods[i], outs[i], in, n);
}

void decoder_layer_forward(const Model *m, int l, const DecoderRows *rows,
                           const DecoderHooks *hooks, const LayerChain *chain, LayerActs *a,
                           float *x_out) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    int n = rows->n, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;

    /* attention block: x_mid = x_in + o(attn(rope(norm_q(q)), rope(norm_k(k)), v)), rope the
     * identity on a NoPE layer (SmolLM3), the o output normed again first in Gemma 2 */
    if (!chain || !chain->input_normed) model_rmsnorm(m, a->xn, a->x_in, w->input_norm, n, H);
    linears_with_lora(m, hooks, l, (const LoraModule[]){LORA_Q, LORA_K, LORA_V},
                      (float *const[]){a->q_pre, a->k_pre, a->v}, 3, a->xn, n);
    if (c->qk_norm) { /* per head; (1 + w) in Gemma 3 */
        model_rmsnorm(m, a->q, a->q_pre, w->q_norm, n * c->n_heads, hd);
        model_rmsnorm(m, a->k, a->k_pre, w->k_norm, n * c->n_kv_heads, hd);
    }
    int rot = c->rotary_dim;
    bool local = layer_rope_local(c, l);
    const float *cos_t = local ? rows->cos_local : rows->cos_t;
    const float *sin_t = local ? rows->sin_local : rows->sin_t;
    if (!c->layer_nope[l]) { /* a NoPE layer (SmolLM3) attends with q and k as projected */
        backend_rope_qk(be, a->q, a->k, rows->positions, cos_t, sin_t, n, c->n_heads, c->n_kv_heads,
                        hd, rot, false);
    }
    hooks->attention(hooks, m, l, a, n, c->layer_sliding[l] ? c->sliding_window : 0);
    bool sandwich = c->gemma_norms;
    linear_with_lora(m, hooks, l, LORA_O, sandwich ? a->attn_out : a->proj, a->att, n);
    if (sandwich) model_rmsnorm(m, a->proj, a->attn_out, w->attn_out_norm, n, H);

    /* MLP block: x_out = x_mid + down(act(gate(xn)) * up(xn)), xn = norm(x_mid), the down output
     * normed again first in Gemma 2; x_mid's add and its norm in one pass */
    model_add_rmsnorm(m, a->x_mid, a->xn, a->x_in, a->proj, w->post_norm, n, H);
    linears_with_lora(m, hooks, l, (const LoraModule[]){LORA_GATE, LORA_UP},
                      (float *const[]){a->gate, a->up}, 2, a->xn, n);
    model_gated_act(m, a->act, a->gate, a->up, (size_t)n * I);
    linear_with_lora(m, hooks, l, LORA_DOWN, sandwich ? a->mlp_out : a->proj, a->act, n);
    if (sandwich) model_rmsnorm(m, a->proj, a->mlp_out, w->mlp_out_norm, n, H);
    if (chain && chain->next_norm) /* the next norm's pass over x_out is this add's */
        model_add_rmsnorm(m, x_out, chain->next_out, a->x_mid, a->proj, chain->next_norm, n, H);
    else
        be->add(be, x_out, a->x_mid, a->proj, (size_t)n * H);
}
