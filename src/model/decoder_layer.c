#include "model/decoder_layer.h"

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

/* out = the linear `mod` of in, through the hook, plus the adapter's term when the model carries
 * one for it. */
static void linear_with_lora(const Model *m, const DecoderHooks *hooks, int l, LoraModule mod,
                             float *out, const float *in, int n) {
    const Backend *be = model_backend(m);
    hooks->linear(hooks, m, l, mod, out, in, n);
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (lin)
        be->lora(be, out, in, lin->A, lin->B, n, lin->in, lin->out, m->lora->r, m->lora->scaling,
                 lora_dropout_p(m->lora), lora_dropout_key(m->lora, l, mod));
}

void decoder_layer_forward(const Model *m, int l, const DecoderRows *rows,
                           const DecoderHooks *hooks, LayerActs *a, float *x_out) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    int n = rows->n, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    float eps = (float)c->rms_norm_eps;

    /* attention block: x_mid = x_in + o(attn(rope(norm_q(q)), rope(norm_k(k)), v)), rope the
     * identity on a NoPE layer */
    be->rmsnorm(be, a->xn, a->x_in, w->input_norm, n, H, eps);
    linear_with_lora(m, hooks, l, LORA_Q, a->q_pre, a->xn, n);
    linear_with_lora(m, hooks, l, LORA_K, a->k_pre, a->xn, n);
    linear_with_lora(m, hooks, l, LORA_V, a->v, a->xn, n);
    if (c->qk_norm) {
        be->rmsnorm(be, a->q, a->q_pre, w->q_norm, n * c->n_heads, hd, eps);
        be->rmsnorm(be, a->k, a->k_pre, w->k_norm, n * c->n_kv_heads, hd, eps);
    }
    int rot = c->rotary_dim;
    if (!c->layer_nope[l]) { /* a NoPE layer (SmolLM3) attends with q and k as projected */
        be->rope(be, a->q, rows->positions, rows->cos_t, rows->sin_t, n, c->n_heads, hd, rot);
        be->rope(be, a->k, rows->positions, rows->cos_t, rows->sin_t, n, c->n_kv_heads, hd, rot);
    }
    hooks->attention(hooks, m, l, a, n, c->layer_sliding[l] ? c->sliding_window : 0);
    linear_with_lora(m, hooks, l, LORA_O, a->proj, a->att, n);
    be->add(be, a->x_mid, a->x_in, a->proj, (size_t)n * H);

    /* MLP block: x_out = x_mid + down(silu(gate(xn)) * up(xn)), xn = norm(x_mid) */
    be->rmsnorm(be, a->xn, a->x_mid, w->post_norm, n, H, eps);
    linear_with_lora(m, hooks, l, LORA_GATE, a->gate, a->xn, n);
    linear_with_lora(m, hooks, l, LORA_UP, a->up, a->xn, n);
    be->swiglu(be, a->act, a->gate, a->up, (size_t)n * I);
    linear_with_lora(m, hooks, l, LORA_DOWN, a->proj, a->act, n);
    be->add(be, x_out, a->x_mid, a->proj, (size_t)n * H);
}
