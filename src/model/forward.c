#include "model/forward.h"

#include "model/activations.h"

#include "common/error.h"
#include "kernels/cpu/kernels.h"
#include "model/rope_tables.h"
#include "model/token_layout.h"

#include <stdbool.h>
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

/* How a LayerActs' buffers are laid out in its block:
 *  ACTS_INFERENCE: one LayerActs for every layer, the residual updated in place (x_in == x_mid);
 *  ACTS_FULL: every buffer its own (the recompute scratch of a gradient-checkpointed tape);
 *  ACTS_KEPT: a layer of a training tape, with only what backward reads back: xn, proj and act
 *    are the tape's, shared by all layers (xn and proj are scratch; act is recomputed from gate
 *    and up when backward reaches the layer, see forward_tape_layer). */
typedef enum { ACTS_INFERENCE, ACTS_FULL, ACTS_KEPT } ActsRole;

static size_t acts_floats(const ModelConfig *c, size_t n, ActsRole role) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t pre = role != ACTS_INFERENCE && c->qk_norm ? qd + kvd : 0;
    size_t kept = 2 * H + 2 * qd + 2 * kvd + 2 * I + pre; /* x_in, x_mid, q, att, k, v, gate, up */
    size_t shared = 2 * H + I;                            /* xn, proj, act */
    if (role == ACTS_KEPT) return n * kept;
    if (role == ACTS_FULL) return n * (kept + shared);
    return n * (kept + shared - H); /* inference: x_mid is x_in */
}

/* Points a's buffers into p (acts_floats(c, n, role) floats); ACTS_KEPT takes xn, proj and act
 * from `shared`. */
static void acts_layout(LayerActs *a, float *p, const ModelConfig *c, size_t n, ActsRole role,
                        const LayerActs *shared) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    float *block = a->block;
    memset(a, 0, sizeof *a);
    a->block = block;
    a->x_in = p, p += n * H;
    a->x_mid = a->x_in;
    if (role != ACTS_INFERENCE) a->x_mid = p, p += n * H;
    a->q = p, p += n * qd;
    a->att = p, p += n * qd;
    a->k = p, p += n * kvd;
    a->v = p, p += n * kvd;
    a->gate = p, p += n * I;
    a->up = p, p += n * I;
    if (role == ACTS_KEPT) {
        a->xn = shared->xn, a->proj = shared->proj, a->act = shared->act;
    } else {
        a->xn = p, p += n * H;
        a->proj = p, p += n * H;
        a->act = p, p += n * I;
    }
    a->q_pre = a->q, a->k_pre = a->k;
    if (role != ACTS_INFERENCE && c->qk_norm) {
        a->q_pre = p, p += n * qd;
        a->k_pre = p;
    }
}

/* Allocates a LayerActs with its own block (ACTS_INFERENCE or ACTS_FULL). */
static int acts_alloc(LayerActs *a, const ModelConfig *c, size_t n, ActsRole role) {
    a->block = xmalloc_checked(acts_floats(c, n, role) * sizeof(float), "forward activations");
    if (!a->block) return -1;
    acts_layout(a, a->block, c, n, role, NULL);
    return 0;
}

/* out = a + b, elementwise; out may be a. */
static void residual_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* Adds the adapter's term of layer l's module `mod` to out, when the model carries one. */
static void apply_lora(const Model *m, int l, LoraModule mod, float *out, const float *in, int n) {
    const LoraLinear *lin = lora_linear(m->lora, l, mod);
    if (lin)
        lora_forward_add(out, in, lin->A, lin->B, n, lin->in, lin->out, m->lora->r,
                         m->lora->scaling, lora_dropout_p(m->lora),
                         lora_dropout_key(m->lora, l, mod));
}

/* One decoder layer: reads a->x_in, writes a->x_mid and x_out (which may all be one buffer). */
static void layer_forward(const Model *m, int l, const TokenLayout *lay, const float *cos_t,
                          const float *sin_t, LayerActs *a, float *x_out) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[l];
    int n = (int)lay->n, H = c->hidden_size, I = c->intermediate_size;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    float eps = (float)c->rms_norm_eps;

    rmsnorm_forward(a->xn, a->x_in, w->input_norm, n, H, eps);
    linear_forward(a->q_pre, a->xn, LAYER_WEIGHT(w, wq), w->bq, n, H, qd);
    apply_lora(m, l, LORA_Q, a->q_pre, a->xn, n);
    linear_forward(a->k_pre, a->xn, LAYER_WEIGHT(w, wk), w->bk, n, H, kvd);
    apply_lora(m, l, LORA_K, a->k_pre, a->xn, n);
    linear_forward(a->v, a->xn, LAYER_WEIGHT(w, wv), w->bv, n, H, kvd);
    apply_lora(m, l, LORA_V, a->v, a->xn, n);
    if (c->qk_norm) {
        rmsnorm_forward(a->q, a->q_pre, w->q_norm, n * c->n_heads, c->head_dim, eps);
        rmsnorm_forward(a->k, a->k_pre, w->k_norm, n * c->n_kv_heads, c->head_dim, eps);
    }
    rope_forward(a->q, lay->positions, cos_t, sin_t, n, c->n_heads, c->head_dim);
    rope_forward(a->k, lay->positions, cos_t, sin_t, n, c->n_kv_heads, c->head_dim);
    int window = c->layer_sliding[l] ? c->sliding_window : 0;
    attention_forward(a->att, a->q, a->k, a->v, lay->segs, lay->n_segs, lay->seq_index, c->n_heads,
                      c->n_kv_heads, c->head_dim, window);
    linear_forward(a->proj, a->att, LAYER_WEIGHT(w, wo), w->bo, n, qd, H);
    apply_lora(m, l, LORA_O, a->proj, a->att, n);
    residual_add(a->x_mid, a->x_in, a->proj, (size_t)n * H);

    rmsnorm_forward(a->xn, a->x_mid, w->post_norm, n, H, eps);
    linear_forward(a->gate, a->xn, LAYER_WEIGHT(w, w_gate), w->b_gate, n, H, I);
    apply_lora(m, l, LORA_GATE, a->gate, a->xn, n);
    linear_forward(a->up, a->xn, LAYER_WEIGHT(w, w_up), w->b_up, n, H, I);
    apply_lora(m, l, LORA_UP, a->up, a->xn, n);
    swiglu_forward(a->act, a->gate, a->up, (size_t)n * I);
    linear_forward(a->proj, a->act, LAYER_WEIGHT(w, w_down), w->b_down, n, I, H);
    apply_lora(m, l, LORA_DOWN, a->proj, a->act, n);
    residual_add(x_out, a->x_mid, a->proj, (size_t)n * H);
}

/* Whether a forward of b computes a shared prefix once (token_layout.h). Not while the
 * adapter's dropout is on: it draws a mask per computed row, and a prefix computed once would see
 * one mask where rows computed apart see one each. */
static bool shares_prefixes(const Model *m, const TokenBatch *b) {
    return !b->unshared && !(m->lora && lora_dropout_p(m->lora) > 0.0f);
}

/* What every forward needs before the layers: checked batch, its layout, RoPE tables. */
typedef struct {
    TokenLayout lay;
    float *cos_t, *sin_t;
} ForwardSetup;

static int forward_setup(const Model *m, const TokenBatch *b, ForwardSetup *fs) {
    const ModelConfig *c = &m->cfg;
    int max_position;
    memset(fs, 0, sizeof *fs);
    if (b->batch <= 0 || b->t_len <= 0) return err_set("empty batch");
    if (check_batch(m, b, &max_position) != 0) return -1;
    token_layout_build(&fs->lay, b, shares_prefixes(m, b));
    size_t table = (size_t)(max_position + 1) * (c->head_dim / 2);
    fs->cos_t = xmalloc(table * sizeof(float));
    fs->sin_t = xmalloc(table * sizeof(float));
    rope_build_tables(c, max_position + 1, fs->cos_t, fs->sin_t);
    return 0;
}

static void forward_setup_free(ForwardSetup *fs) {
    token_layout_free(&fs->lay);
    free(fs->cos_t);
    free(fs->sin_t);
}

static void embed_rows(const Model *m, const TokenLayout *lay, float *x) {
    size_t H = (size_t)m->cfg.hidden_size;
    for (size_t i = 0; i < lay->n; i++)
        model_embed_row(m, lay->tokens[i], x + i * H);
}

/* The final hidden states of the layout's rows, into hidden (lay.n, H), which fs->lay receives. */
static int forward_rows(const Model *m, const TokenBatch *b, ForwardSetup *fs, float **hidden) {
    const ModelConfig *c = &m->cfg;
    *hidden = NULL;
    if (forward_setup(m, b, fs) != 0) return -1;
    size_t n = fs->lay.n, H = (size_t)c->hidden_size;
    LayerActs a;
    *hidden = xmalloc_checked((n ? n : 1) * H * sizeof(float), "hidden states");
    if (!*hidden || acts_alloc(&a, c, n ? n : 1, ACTS_INFERENCE) != 0) {
        free(*hidden);
        *hidden = NULL;
        return -1;
    }
    embed_rows(m, &fs->lay, a.x_in);
    for (int l = 0; l < c->n_layers && n > 0; l++)
        layer_forward(m, l, &fs->lay, fs->cos_t, fs->sin_t, &a, a.x_in);
    rmsnorm_forward(*hidden, a.x_in, m->final_norm, (int)n, (int)H, (float)c->rms_norm_eps);
    free(a.block);
    return 0;
}

int model_forward_hidden(const Model *m, const TokenBatch *b, float *hidden) {
    ForwardSetup fs;
    float *rows;
    if (forward_rows(m, b, &fs, &rows) != 0) {
        forward_setup_free(&fs);
        return -1;
    }
    size_t cells = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    for (size_t i = 0; i < cells; i++) {
        size_t r = fs.lay.row_of[i];
        if (r == LAYOUT_NO_ROW)
            memset(hidden + i * H, 0, H * sizeof(float));
        else
            memcpy(hidden + i * H, rows + r * H, H * sizeof(float));
    }
    free(rows);
    forward_setup_free(&fs);
    return 0;
}

/* The tape's buffers for n tokens: kept from the previous call when they are large enough (a
 * training loop then allocates, and the kernel zero-fills pages, only once), else made anew. */
static int tape_buffers(const ModelConfig *c, size_t n, bool recompute, ForwardTape *tape) {
    size_t H = (size_t)c->hidden_size;
    bool fits = tape->layers && tape->capacity >= n && tape->recompute == recompute &&
                tape->n_layers == c->n_layers;
    if (!fits) {
        forward_tape_free(tape);
        tape->capacity = n;
        tape->recompute = recompute;
        tape->n_layers = c->n_layers;
        tape->layers = xcalloc((size_t)c->n_layers, sizeof *tape->layers);
        /* x_final, hidden, discard; and the layers' shared xn, proj, act when kept */
        size_t extra = 3 * n * H + (recompute ? 0 : n * (2 * H + (size_t)c->intermediate_size));
        tape->x_final = xmalloc_checked(extra * sizeof(float), "final activations");
        bool ok = tape->x_final != NULL;
        if (ok && recompute) {
            size_t full = acts_floats(c, n, ACTS_FULL);
            tape->scratch.block = xmalloc_checked(full * sizeof(float), "forward activations");
            ok = tape->scratch.block != NULL;
        }
        size_t per_layer = recompute ? n * H : acts_floats(c, n, ACTS_KEPT);
        for (int l = 0; ok && l < c->n_layers; l++) {
            tape->layers[l].block = xmalloc_checked(per_layer * sizeof(float), "layer activations");
            ok = tape->layers[l].block != NULL;
        }
        if (!ok) {
            forward_tape_free(tape);
            return -1;
        }
    }
    tape->n = n;
    tape->hidden = tape->x_final + n * H;
    tape->discard = tape->hidden + n * H;
    LayerActs shared = {0};
    if (recompute) {
        acts_layout(&tape->scratch, tape->scratch.block, c, n, ACTS_FULL, NULL);
    } else {
        shared.xn = tape->discard + n * H;
        shared.proj = shared.xn + n * H;
        shared.act = shared.proj + n * H;
    }
    for (int l = 0; l < c->n_layers; l++) {
        LayerActs *a = &tape->layers[l];
        if (recompute)
            a->x_in = a->block;
        else
            acts_layout(a, a->block, c, n, ACTS_KEPT, &shared);
    }
    return 0;
}

int model_forward_tape(const Model *m, const TokenBatch *b, bool recompute, ForwardTape *tape) {
    const ModelConfig *c = &m->cfg;
    ForwardSetup fs;
    if (forward_setup(m, b, &fs) != 0) return -1;
    size_t n = fs.lay.n, H = (size_t)c->hidden_size;
    if (tape_buffers(c, n ? n : 1, recompute, tape) != 0) {
        forward_setup_free(&fs);
        return -1;
    }
    token_layout_free(&tape->layout);
    free(tape->cos_t);
    free(tape->sin_t);
    tape->batch = *b;
    tape->n = n;
    tape->layout = fs.lay, tape->cos_t = fs.cos_t, tape->sin_t = fs.sin_t;
    embed_rows(m, &tape->layout, tape->layers[0].x_in);
    for (int l = 0; l < c->n_layers; l++) {
        float *x_out = l + 1 < c->n_layers ? tape->layers[l + 1].x_in : tape->x_final;
        LayerActs a = recompute ? tape->scratch : tape->layers[l];
        a.x_in = tape->layers[l].x_in;
        layer_forward(m, l, &tape->layout, tape->cos_t, tape->sin_t, &a, x_out);
    }
    rmsnorm_forward(tape->hidden, tape->x_final, m->final_norm, (int)n, (int)H,
                    (float)c->rms_norm_eps);
    return 0;
}

LayerActs forward_tape_layer(const Model *m, const ForwardTape *tape, int l) {
    if (!tape->recompute) {
        /* act is shared by the layers: regenerate this layer's, bitwise as its forward made it */
        LayerActs a = tape->layers[l];
        swiglu_forward(a.act, a.gate, a.up, tape->n * (size_t)m->cfg.intermediate_size);
        return a;
    }
    LayerActs a = tape->scratch;
    a.x_in = tape->layers[l].x_in;
    layer_forward(m, l, &tape->layout, tape->cos_t, tape->sin_t, &a, tape->discard);
    return a;
}

void forward_tape_free(ForwardTape *tape) {
    for (int l = 0; tape->layers && l < tape->n_layers; l++)
        free(tape->layers[l].block);
    free(tape->layers);
    free(tape->scratch.block);
    free(tape->x_final);
    token_layout_free(&tape->layout);
    free(tape->cos_t);
    free(tape->sin_t);
    memset(tape, 0, sizeof *tape);
}

int model_layout_logprobs(const Model *m, const TokenLayout *lay, const TokenBatch *b,
                          const uint8_t *target_mask, const float *hidden, float *logp,
                          LogitStats *stats) {
    size_t cells = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    /* Gather the rows that predict a selected token, so only they meet the lm_head. */
    size_t *where = xmalloc(cells * sizeof *where), *from = xmalloc(cells * sizeof *from);
    size_t n_sel = token_layout_targets(lay, b, target_mask, where, from);
    float *rows = xmalloc_checked((n_sel ? n_sel : 1) * H * sizeof(float), "scored rows");
    int32_t *targets = xmalloc((n_sel ? n_sel : 1) * sizeof *targets);
    float *sel = xmalloc((n_sel ? n_sel : 1) * sizeof(float));
    LogitStats *sel_stats = stats ? xmalloc((n_sel ? n_sel : 1) * sizeof *sel_stats) : NULL;
    int rc = rows ? 0 : -1;
    if (rc == 0) {
        for (size_t j = 0; j < n_sel; j++) {
            memcpy(rows + j * H, hidden + from[j] * H, H * sizeof(float));
            targets[j] = b->tokens[where[j]];
        }
        model_scale_logit_rows(m, rows, n_sel, H);
        fused_logprob_forward_weights(sel, sel_stats, rows, targets, model_lm_head(m), (int)n_sel,
                                      (int)H, m->cfg.vocab_size);
        memset(logp, 0, cells * sizeof *logp);
        if (stats) memset(stats, 0, cells * sizeof *stats);
        for (size_t j = 0; j < n_sel; j++) {
            logp[where[j]] = sel[j];
            if (stats) stats[where[j]] = sel_stats[j];
        }
    }
    free(sel_stats);
    free(sel);
    free(targets);
    free(rows);
    free(from);
    free(where);
    return rc;
}

int model_token_logprobs(const Model *m, const TokenBatch *b, const uint8_t *target_mask,
                         float *logp) {
    ForwardSetup fs;
    float *hidden;
    int rc = forward_rows(m, b, &fs, &hidden);
    if (rc == 0) rc = model_layout_logprobs(m, &fs.lay, b, target_mask, hidden, logp, NULL);
    free(hidden);
    forward_setup_free(&fs);
    return rc;
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
        linear_forward(out, hidden + ((size_t)seq * b->t_len + t0) * H, model_lm_head(m), NULL,
                       t1 - t0, (int)H, m->cfg.vocab_size);
    free(hidden);
    return rc;
}
