#include "model/forward.h"

#include "model/activations.h"

#include "common/error.h"
#include "model/decoder_layer.h"
#include "model/rope_tables.h"
#include "model/token_layout.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int check_batch(const Model *m, const TokenBatch *b, int *max_position) {
    size_t n = (size_t)b->batch * b->t_len;
    *max_position = b->t_len - 1;
    if (b->packed && !b->positions) return err_set("a packed batch without position ids");
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
    pre += role != ACTS_INFERENCE && c->gemma_norms ? 2 * H : 0; /* attn_out, mlp_out */
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
        a->k_pre = p, p += n * kvd;
    }
    if (c->gemma_norms) { /* normed in place into proj on inference rows */
        a->attn_out = a->mlp_out = a->proj;
        if (role != ACTS_INFERENCE) {
            a->attn_out = p, p += n * H;
            a->mlp_out = p;
        }
    }
}

/* Allocates a LayerActs with its own block (ACTS_INFERENCE or ACTS_FULL) in backend memory. */
static int acts_alloc(const Backend *be, LayerActs *a, const ModelConfig *c, size_t n,
                      ActsRole role) {
    a->block = be->alloc(be, acts_floats(c, n, role) * sizeof(float), "forward activations");
    if (!a->block) return -1;
    acts_layout(a, a->block, c, n, role, NULL);
    return 0;
}

/* The batch forward's hooks (decoder_layer.h): the stored weights, attention over the layout's
 * segments (ctx: the LayoutMirror). */
static void batch_linear(const DecoderHooks *h, const Model *m, int l, LoraModule mod, float *out,
                         const float *in, int n) {
    (void)h;
    const Backend *be = model_backend(m);
    WeightRef w;
    const float *bias;
    int in_dim, out_dim;
    layer_linear(m, l, mod, &w, &bias, &in_dim, &out_dim);
    be->linear(be, out, in, w, NULL, bias, n, in_dim, out_dim);
}

/* The batch forward's products of one input together (backend_linears: the CPU packs it once). */
static void batch_linears(const DecoderHooks *h, const Model *m, int l, const LoraModule *mods,
                          float *const *outs, int count, const float *in, int n) {
    (void)h;
    LinearPart parts[LORA_N_MODULES]; /* (count <= LORA_N_MODULES: decoder_layer.h) */
    int in_dim = 0;
    for (int i = 0; i < count; i++) {
        parts[i].out = outs[i];
        layer_linear(m, l, mods[i], &parts[i].w, &parts[i].bias, &in_dim, &parts[i].out_dim);
    }
    backend_linears(model_backend(m), parts, count, in, n, in_dim);
}

static void batch_attention(const DecoderHooks *h, const Model *m, int l, LayerActs *a, int n,
                            int window) {
    (void)l, (void)n;
    const Backend *be = model_backend(m);
    const LayoutMirror *dev = h->ctx;
    const ModelConfig *c = &m->cfg;
    if (model_scores_own(m))
        be->attention_scored(be, a->att, a->q, a->k, a->v, dev->segs, dev->n_segs, dev->seq_index,
                             c->n_heads, c->n_kv_heads, c->head_dim, window, model_attn_scores(m));
    else
        be->attention(be, a->att, a->q, a->k, a->v, dev->segs, dev->n_segs, dev->seq_index,
                      c->n_heads, c->n_kv_heads, c->head_dim, window);
}

/* One decoder layer over the layout's n rows: reads a->x_in, writes a->x_mid and x_out; chain
 * as decoder_layer_forward's (NULL: the layer on its own). */
static void layer_forward(const Model *m, int l, const LayoutMirror *dev, size_t n,
                          const LayerChain *chain, LayerActs *a, float *x_out) {
    DecoderRows rows = {(int)n,     dev->positions, dev->cos_t,
                        dev->sin_t, dev->cos_local, dev->sin_local};
    DecoderHooks hooks = {batch_linear, batch_attention, (void *)dev, batch_linears};
    decoder_layer_forward(m, l, &rows, &hooks, chain, a, x_out);
}

/* The chain of layer l in a forward over every layer: its input normed by the layer before (not
 * the first's), the next norm (the next layer's input norm, the final norm after the last)
 * written to next_xn, or to hidden after the last layer. */
static LayerChain layer_chain(const Model *m, int l, float *next_xn, float *hidden) {
    bool last = l + 1 == m->cfg.n_layers;
    return (LayerChain){.input_normed = l > 0,
                        .next_norm = last ? m->final_norm : m->layers[l + 1].input_norm,
                        .next_out = last ? hidden : next_xn};
}

/* Whether a forward of b computes a shared prefix once (token_layout.h). Not while the
 * adapter's dropout is on: it draws a mask per computed row, and a prefix computed once would see
 * one mask where rows computed apart see one each. */
static bool shares_prefixes(const Model *m, const TokenBatch *b) {
    return !b->unshared && !(m->lora && lora_dropout_p(m->lora) > 0.0f);
}

/* What every forward needs before the layers: checked batch, its layout, RoPE tables, and
 * those as the backend reads them. */
typedef struct {
    TokenLayout lay;
    float *cos_t, *sin_t;
    LayoutMirror dev;
} ForwardSetup;

static void mirror_free(const Backend *be, LayoutMirror *dev) {
    for (int i = 0; i < 6; i++)
        be->free(be, dev->owned[i]);
    memset(dev, 0, sizeof *dev);
}

/* dev = the layout's arrays and the tables (`sets` of table_floats each: rope_tables.h) as be
 * reads them. */
static int mirror_layout(const Backend *be, const TokenLayout *lay, const float *cos_t,
                         const float *sin_t, size_t table_floats, int sets, LayoutMirror *dev) {
    memset(dev, 0, sizeof *dev);
    size_t ints = lay->n * sizeof(int32_t);
    dev->tokens = backend_mirror(be, lay->tokens, ints, "token ids", &dev->owned[0]);
    dev->positions = backend_mirror(be, lay->positions, ints, "positions", &dev->owned[1]);
    dev->seq_index = backend_mirror(be, lay->seq_index, ints, "sequence indices", &dev->owned[2]);
    dev->segs = backend_mirror(be, lay->segs, (size_t)lay->n_segs * sizeof *lay->segs,
                               "attention segments", &dev->owned[3]);
    dev->n_segs = lay->n_segs;
    size_t bytes = (size_t)sets * table_floats * sizeof(float);
    dev->cos_t = backend_mirror(be, cos_t, bytes, "RoPE tables", &dev->owned[4]);
    dev->sin_t = backend_mirror(be, sin_t, bytes, "RoPE tables", &dev->owned[5]);
    if (sets > 1 && dev->cos_t && dev->sin_t) {
        dev->cos_local = dev->cos_t + table_floats;
        dev->sin_local = dev->sin_t + table_floats;
    }
    bool ok = (dev->tokens || !lay->n) && (dev->positions || !lay->n) &&
              (dev->seq_index || !lay->n) && (dev->segs || !lay->n_segs) && dev->cos_t &&
              dev->sin_t;
    if (!ok) mirror_free(be, dev);
    return ok ? 0 : -1;
}

static int forward_setup(const Model *m, const TokenBatch *b, ForwardSetup *fs) {
    const ModelConfig *c = &m->cfg;
    int max_position;
    memset(fs, 0, sizeof *fs);
    if (b->batch <= 0 || b->t_len <= 0) return err_set("empty batch");
    if (model_check_backend_ops(m) != 0) return -1;
    if (check_batch(m, b, &max_position) != 0) return -1;
    token_layout_build(&fs->lay, b, shares_prefixes(m, b));
    size_t table = (size_t)(max_position + 1) * (c->rotary_dim / 2);
    int sets = rope_table_sets(c);
    fs->cos_t = xmalloc((size_t)sets * table * sizeof(float));
    fs->sin_t = xmalloc((size_t)sets * table * sizeof(float));
    rope_build_tables(c, max_position + 1, fs->cos_t, fs->sin_t);
    return mirror_layout(model_backend(m), &fs->lay, fs->cos_t, fs->sin_t, table, sets, &fs->dev);
}

static void forward_setup_free(const Backend *be, ForwardSetup *fs) {
    mirror_free(be, &fs->dev);
    token_layout_free(&fs->lay);
    free(fs->cos_t);
    free(fs->sin_t);
}

static void embed_rows(const Model *m, const LayoutMirror *dev, size_t n, float *x) {
    const Backend *be = model_backend(m);
    WeightRef table = {.f32 = m->embed, .bf16 = m->embed16};
    be->embedding_gather(be, x, table, dev->tokens, (int)n, m->cfg.hidden_size);
    model_release_embedding(m);
    if (m->cfg.embed_scaled) be->scale(be, x, model_embed_scale(m), n * (size_t)m->cfg.hidden_size);
}

/* The final hidden states of the layout's rows, into hidden (lay.n, H), which fs->lay receives. */
/* hidden is backend memory (be->free it). */
static int forward_rows(const Model *m, const TokenBatch *b, ForwardSetup *fs, float **hidden) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    *hidden = NULL;
    if (forward_setup(m, b, fs) != 0) return -1;
    size_t n = fs->lay.n, H = (size_t)c->hidden_size;
    LayerActs a;
    *hidden = be->alloc(be, (n ? n : 1) * H * sizeof(float), "hidden states");
    if (!*hidden || acts_alloc(be, &a, c, n ? n : 1, ACTS_INFERENCE) != 0) {
        be->free(be, *hidden);
        *hidden = NULL;
        return -1;
    }
    embed_rows(m, &fs->dev, n, a.x_in);
    for (int l = 0; l < c->n_layers && n > 0; l++) {
        LayerChain chain = layer_chain(m, l, a.xn, *hidden); /* one LayerActs for all layers */
        layer_forward(m, l, &fs->dev, n, &chain, &a, a.x_in);
    }
    if (c->n_layers == 0 || n == 0) /* else the last layer wrote it */
        model_rmsnorm(m, *hidden, a.x_in, m->final_norm, (int)n, (int)H);
    be->free(be, a.block);
    return 0;
}

int model_forward_hidden(const Model *m, const TokenBatch *b, float *hidden) {
    const Backend *be = model_backend(m);
    ForwardSetup fs;
    float *rows;
    if (forward_rows(m, b, &fs, &rows) != 0) {
        forward_setup_free(be, &fs);
        return -1;
    }
    size_t cells = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    for (size_t i = 0; i < cells; i++) {
        size_t r = fs.lay.row_of[i];
        if (r == LAYOUT_NO_ROW)
            memset(hidden + i * H, 0, H * sizeof(float));
        else
            be->copy(be, hidden + i * H, rows + r * H, H * sizeof(float), BACKEND_DEVICE_TO_HOST);
    }
    be->free(be, rows);
    forward_setup_free(be, &fs);
    return 0;
}

/* The tape's buffers for n tokens: kept from the previous call when they are large enough (a
 * training loop then allocates, and the kernel zero-fills pages, only once), else made anew. */
static int tape_buffers(const Backend *be, const ModelConfig *c, size_t n, bool recompute,
                        ForwardTape *tape) {
    size_t H = (size_t)c->hidden_size;
    bool fits = tape->layers && tape->capacity >= n && tape->recompute == recompute &&
                tape->n_layers == c->n_layers && tape->be == be;
    if (!fits) {
        forward_tape_free(tape);
        tape->be = be;
        tape->capacity = n;
        tape->recompute = recompute;
        tape->n_layers = c->n_layers;
        tape->layers = xcalloc((size_t)c->n_layers, sizeof *tape->layers);
        /* x_final, hidden, discard; and the layers' shared xn, proj, act when kept */
        size_t extra = 3 * n * H + (recompute ? 0 : n * (2 * H + (size_t)c->intermediate_size));
        tape->x_final = be->alloc(be, extra * sizeof(float), "final activations");
        bool ok = tape->x_final != NULL;
        if (ok && recompute) {
            size_t full = acts_floats(c, n, ACTS_FULL);
            tape->scratch.block = be->alloc(be, full * sizeof(float), "forward activations");
            ok = tape->scratch.block != NULL;
        }
        size_t per_layer = recompute ? n * H : acts_floats(c, n, ACTS_KEPT);
        for (int l = 0; ok && l < c->n_layers; l++) {
            tape->layers[l].block = be->alloc(be, per_layer * sizeof(float), "layer activations");
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

/* Releases what the tape holds of its last batch's layout. */
static void tape_layout_free(ForwardTape *tape) {
    if (tape->be) mirror_free(tape->be, &tape->dev);
    token_layout_free(&tape->layout);
    free(tape->cos_t);
    free(tape->sin_t);
    tape->cos_t = tape->sin_t = NULL;
}

int model_forward_tape(const Model *m, const TokenBatch *b, bool recompute, ForwardTape *tape) {
    const Backend *be = model_backend(m);
    const ModelConfig *c = &m->cfg;
    ForwardSetup fs;
    if (forward_setup(m, b, &fs) != 0) {
        forward_setup_free(be, &fs);
        return -1;
    }
    size_t n = fs.lay.n, H = (size_t)c->hidden_size;
    if (tape_buffers(be, c, n ? n : 1, recompute, tape) != 0) {
        forward_setup_free(be, &fs);
        return -1;
    }
    tape_layout_free(tape);
    if (!tape->lse && be->logprob_lse) tape->lse = xcalloc(1, sizeof *tape->lse);
    if (tape->lse) tape->lse->valid = false; /* TapeLse invariant 1 */
    tape->batch = *b;
    tape->n = n;
    tape->layout = fs.lay, tape->cos_t = fs.cos_t, tape->sin_t = fs.sin_t, tape->dev = fs.dev;
    embed_rows(m, &tape->dev, n, tape->layers[0].x_in);
    for (int l = 0; l < c->n_layers; l++) {
        bool last = l + 1 == c->n_layers;
        float *x_out = last ? tape->x_final : tape->layers[l + 1].x_in;
        LayerActs a = recompute ? tape->scratch : tape->layers[l];
        a.x_in = tape->layers[l].x_in;
        float *next_xn = last ? NULL : recompute ? tape->scratch.xn : tape->layers[l + 1].xn;
        LayerChain chain = layer_chain(m, l, next_xn, tape->hidden);
        layer_forward(m, l, &tape->dev, n, &chain, &a, x_out);
    }
    if (c->n_layers == 0) /* else the last layer wrote it */
        model_rmsnorm(m, tape->hidden, tape->x_final, m->final_norm, (int)n, (int)H);
    return 0;
}

LayerActs forward_tape_layer(const Model *m, const ForwardTape *tape, int l, bool with_act) {
    if (!tape->recompute) {
        /* act is shared by the layers: regenerate this layer's, bitwise as its forward made it
         * (unless the caller does, with_act false) */
        LayerActs a = tape->layers[l];
        if (with_act)
            model_gated_act(m, a.act, a.gate, a.up, tape->n * (size_t)m->cfg.intermediate_size);
        return a;
    }
    LayerActs a = tape->scratch;
    a.x_in = tape->layers[l].x_in;
    layer_forward(m, l, &tape->dev, tape->n, NULL, &a, tape->discard);
    return a;
}

void forward_tape_free(ForwardTape *tape) {
    const Backend *be = tape->be;
    tape_layout_free(tape);
    if (be) {
        for (int l = 0; tape->layers && l < tape->n_layers; l++)
            be->free(be, tape->layers[l].block);
        be->free(be, tape->scratch.block);
        be->free(be, tape->x_final);
        if (tape->lse) be->free(be, tape->lse->lse);
    }
    if (tape->lse) free(tape->lse->where);
    free(tape->lse);
    free(tape->layers);
    memset(tape, 0, sizeof *tape);
}

int model_layout_logprobs(const Model *m, const TokenLayout *lay, const TokenBatch *b,
                          const uint8_t *target_mask, const float *hidden, float *logp,
                          LogitStats *stats) {
    return model_layout_logprobs_keep(m, lay, b, target_mask, hidden, logp, stats, NULL);
}

/* Grows keep's buffers to n_sel rows; false (an error set) when the backend's memory runs out. */
static bool tape_lse_reserve(const Backend *be, TapeLse *keep, size_t n_sel) {
    if (keep->capacity >= n_sel) return true;
    be->free(be, keep->lse);
    free(keep->where);
    keep->capacity = 0;
    keep->where = xmalloc(n_sel * sizeof *keep->where);
    keep->lse = be->alloc(be, n_sel * sizeof(float), "lm_head log-sum-exp");
    if (!keep->lse) return false;
    keep->capacity = n_sel;
    return true;
}

int model_layout_logprobs_keep(const Model *m, const TokenLayout *lay, const TokenBatch *b,
                               const uint8_t *target_mask, const float *hidden, float *logp,
                               LogitStats *stats, TapeLse *keep) {
    const Backend *be = model_backend(m);
    if (keep) keep->valid = false;
    size_t cells = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    /* Gather the rows that predict a selected token, so only they meet the lm_head. */
    size_t *where = xmalloc(cells * sizeof *where), *from = xmalloc(cells * sizeof *from);
    size_t n_sel = token_layout_targets(lay, b, target_mask, where, from), cap = n_sel ? n_sel : 1;
    int32_t *from32 = xmalloc(cap * sizeof *from32), *targets = xmalloc(cap * sizeof *targets);
    for (size_t j = 0; j < n_sel; j++) {
        from32[j] = (int32_t)from[j];
        targets[j] = b->tokens[where[j]];
    }
    float *sel = xmalloc(cap * sizeof(float));
    LogitStats *sel_stats = stats ? xmalloc(cap * sizeof *sel_stats) : NULL;
    void *owned_from, *owned_targets;
    const int32_t *from_dev =
        backend_mirror(be, from32, n_sel * sizeof *from32, "scored rows", &owned_from);
    const int32_t *targets_dev =
        backend_mirror(be, targets, n_sel * sizeof *targets, "targets", &owned_targets);
    float *rows = be->alloc(be, cap * H * sizeof(float), "scored rows");
    float *sel_dev = be->alloc(be, cap * sizeof(float), "log-probabilities");
    LogitStats *stats_dev =
        stats ? be->alloc(be, cap * sizeof *stats_dev, "logit statistics") : NULL;
    int rc =
        rows && sel_dev && (stats_dev || !stats) && (from_dev || !n_sel) && (targets_dev || !n_sel)
            ? 0
            : -1;
    if (rc == 0) {
        be->rows_gather(be, rows, hidden, from_dev, (int)n_sel, (int)H);
        if (m->cfg.final_softcap > 0) { /* the cap first, then 1/T (TRL's logits / T) */
            be->logprob_capped(be, sel_dev, stats_dev, rows, targets_dev, model_lm_head(m),
                               (int)n_sel, (int)H, m->cfg.vocab_size, model_logit_cap(m));
        } else if (keep && be->logprob_lse && be->logprob_backward_lse && n_sel &&
                   tape_lse_reserve(be, keep, n_sel)) {
            model_scale_logit_rows(m, rows, n_sel, H);
            be->logprob_lse(be, sel_dev, stats_dev, keep->lse, rows, targets_dev, model_lm_head(m),
                            (int)n_sel, (int)H, m->cfg.vocab_size);
            memcpy(keep->where, where, n_sel * sizeof *where);
            keep->n_sel = n_sel;
            keep->valid = true;
        } else {
            model_scale_logit_rows(m, rows, n_sel, H);
            be->logprob(be, sel_dev, stats_dev, rows, targets_dev, model_lm_head(m), (int)n_sel,
                        (int)H, m->cfg.vocab_size);
        }
        be->copy(be, sel, sel_dev, n_sel * sizeof *sel, BACKEND_DEVICE_TO_HOST);
        if (stats)
            be->copy(be, sel_stats, stats_dev, n_sel * sizeof *sel_stats, BACKEND_DEVICE_TO_HOST);
        memset(logp, 0, cells * sizeof *logp);
        if (stats) memset(stats, 0, cells * sizeof *stats);
        for (size_t j = 0; j < n_sel; j++) {
            logp[where[j]] = sel[j];
            if (stats) stats[where[j]] = sel_stats[j];
        }
    }
    be->free(be, stats_dev);
    be->free(be, sel_dev);
    be->free(be, rows);
    be->free(be, owned_targets);
    be->free(be, owned_from);
    free(sel_stats);
    free(sel);
    free(targets);
    free(from32);
    free(from);
    free(where);
    return rc;
}

int model_token_logprobs(const Model *m, const TokenBatch *b, const uint8_t *target_mask,
                         float *logp) {
    const Backend *be = model_backend(m);
    ForwardSetup fs;
    float *hidden;
    int rc = forward_rows(m, b, &fs, &hidden);
    if (rc == 0) rc = model_layout_logprobs(m, &fs.lay, b, target_mask, hidden, logp, NULL);
    be->free(be, hidden);
    forward_setup_free(be, &fs);
    return rc;
}

int model_logits(const Model *m, const TokenBatch *b, int seq, int t0, int t1, float *out) {
    const Backend *be = model_backend(m);
    if (seq < 0 || seq >= b->batch || t0 < 0 || t1 > b->t_len || t0 >= t1)
        return err_set("logits range: sequence %d positions [%d, %d) is outside the batch", seq, t0,
                       t1);
    size_t n = (size_t)b->batch * b->t_len, H = (size_t)m->cfg.hidden_size;
    size_t rows = (size_t)(t1 - t0), V = (size_t)m->cfg.vocab_size;
    float *hidden = xmalloc_checked(n * H * sizeof(float), "hidden states");
    float *in = be->alloc(be, rows * H * sizeof(float), "hidden states");
    float *logits = be->alloc(be, rows * V * sizeof(float), "logits");
    int rc = hidden && in && logits ? 0 : -1;
    if (rc == 0) rc = model_forward_hidden(m, b, hidden);
    if (rc == 0) {
        be->copy(be, in, hidden + ((size_t)seq * b->t_len + t0) * H, rows * H * sizeof(float),
                 BACKEND_HOST_TO_DEVICE);
        be->linear(be, logits, in, model_lm_head(m), NULL, NULL, (int)rows, (int)H, (int)V);
        if (m->cfg.final_softcap > 0) be->softcap(be, logits, rows * V, m->cfg.final_softcap);
        be->copy(be, out, logits, rows * V * sizeof(float), BACKEND_DEVICE_TO_HOST);
    }
    be->free(be, logits);
    be->free(be, in);
    free(hidden);
    return rc;
}
