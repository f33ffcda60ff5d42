#include "model/model.h"

#include "common/error.h"
#include "common/float16.h"
#include "io/hf_weights.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/nf4.h"
#include "model/model_loading.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    ParamInfo *info;
    float ***slots; /* where each tensor's pointer goes in the Model struct */
    int n, cap;
    size_t total;
} LayoutBuilder;

static void add_param(LayoutBuilder *lb, float **slot, int64_t rows, int64_t cols, const char *fmt,
                      int layer, const char *suffix) {
    if (lb->n == lb->cap) {
        lb->cap = lb->cap ? 2 * lb->cap : 64;
        lb->info = xrealloc(lb->info, (size_t)lb->cap * sizeof *lb->info);
        lb->slots = xrealloc(lb->slots, (size_t)lb->cap * sizeof *lb->slots);
    }
    ParamInfo *p = &lb->info[lb->n];
    memset(p, 0, sizeof *p);
    if (layer >= 0)
        snprintf(p->name, sizeof p->name, fmt, layer, suffix);
    else
        snprintf(p->name, sizeof p->name, "%s", fmt);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    p->offset = lb->total;
    lb->total += p->numel;
    lb->slots[lb->n++] = slot;
}

static void add_linear(LayoutBuilder *lb, int l, const char *module, float **w, float **b,
                       bool has_bias, int64_t out, int64_t in) {
    char suffix[64];
    snprintf(suffix, sizeof suffix, "%s.weight", module);
    add_param(lb, w, out, in, "model.layers.%d.%s", l, suffix);
    if (has_bias) {
        snprintf(suffix, sizeof suffix, "%s.bias", module);
        add_param(lb, b, out, 0, "model.layers.%d.%s", l, suffix);
    }
}

/* State-dict order: the order in which transformers registers the modules. */
static void build_layout(Model *m, LayoutBuilder *lb) {
    const ModelConfig *c = &m->cfg;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    int64_t q_dim = (int64_t)c->n_heads * c->head_dim,
            kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    add_param(lb, &m->embed, c->vocab_size, H, "model.embed_tokens.weight", -1, NULL);
    for (int l = 0; l < c->n_layers && c->fused_qkv_mlp; l++) {
        /* Phi3Attention registers o_proj before qkv_proj; wk, wv and w_up are set to their rows
         * of the fused tensors by point_into_fused. */
        LayerWeights *w = &m->layers[l];
        add_linear(lb, l, "self_attn.o_proj", &w->wo, NULL, false, H, q_dim);
        add_linear(lb, l, "self_attn.qkv_proj", &w->wq, NULL, false, q_dim + 2 * kv_dim, H);
        add_linear(lb, l, "mlp.gate_up_proj", &w->w_gate, NULL, false, 2 * I, H);
        add_linear(lb, l, "mlp.down_proj", &w->w_down, NULL, false, H, I);
        add_param(lb, &w->input_norm, H, 0, "model.layers.%d.%s", l, "input_layernorm.weight");
        add_param(lb, &w->post_norm, H, 0, "model.layers.%d.%s", l,
                  "post_attention_layernorm.weight");
    }
    for (int l = 0; l < c->n_layers && !c->fused_qkv_mlp; l++) {
        LayerWeights *w = &m->layers[l];
        add_linear(lb, l, "self_attn.q_proj", &w->wq, &w->bq, c->qkv_bias, q_dim, H);
        add_linear(lb, l, "self_attn.k_proj", &w->wk, &w->bk, c->qkv_bias, kv_dim, H);
        add_linear(lb, l, "self_attn.v_proj", &w->wv, &w->bv, c->qkv_bias, kv_dim, H);
        add_linear(lb, l, "self_attn.o_proj", &w->wo, &w->bo, c->o_bias, H, q_dim);
        if (c->qk_norm) {
            add_param(lb, &w->q_norm, c->head_dim, 0, "model.layers.%d.%s", l,
                      "self_attn.q_norm.weight");
            add_param(lb, &w->k_norm, c->head_dim, 0, "model.layers.%d.%s", l,
                      "self_attn.k_norm.weight");
        }
        add_linear(lb, l, "mlp.gate_proj", &w->w_gate, &w->b_gate, c->mlp_bias, I, H);
        add_linear(lb, l, "mlp.up_proj", &w->w_up, &w->b_up, c->mlp_bias, I, H);
        add_linear(lb, l, "mlp.down_proj", &w->w_down, &w->b_down, c->mlp_bias, H, I);
        add_param(lb, &w->input_norm, H, 0, "model.layers.%d.%s", l, "input_layernorm.weight");
        /* Gemma 2's post_attention_layernorm norms the attention's output; its MLP input norm is
         * pre_feedforward_layernorm (Gemma2DecoderLayer's registration order) */
        add_param(lb, c->gemma_norms ? &w->attn_out_norm : &w->post_norm, H, 0,
                  "model.layers.%d.%s", l, "post_attention_layernorm.weight");
        if (c->gemma_norms) {
            add_param(lb, &w->post_norm, H, 0, "model.layers.%d.%s", l,
                      "pre_feedforward_layernorm.weight");
            add_param(lb, &w->mlp_out_norm, H, 0, "model.layers.%d.%s", l,
                      "post_feedforward_layernorm.weight");
        }
    }
    add_param(lb, &m->final_norm, H, 0, "model.norm.weight", -1, NULL);
    if (!c->tie_word_embeddings)
        add_param(lb, &m->lm_head, c->vocab_size, H, "lm_head.weight", -1, NULL);
}

/* A fused tensor's rows are its parts one after the other (qkv: q, k, v as Phi3Attention slices
 * them; gate_up: gate, up as Phi3MLP's chunk(2)), so each part is a matrix of its own at an
 * offset: every consumer of wq..w_up, gradients and optimizer state (which go by offset) included,
 * works unchanged, and loading and saving keep the tensor whole. */
static void point_into_fused(Model *m) {
    const ModelConfig *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        w->wk = w->wq + q_dim * H;
        w->wv = w->wk + kv_dim * H;
        w->w_up = w->w_gate + I * H;
    }
}

/* Takes cfg into m and lays out its parameters (m->n_params, param_info, n_param_tensors); the
 * builder's slots (where each tensor's pointer goes) are the caller's to use and free. */
static LayoutBuilder begin_layout(Model *m, ModelConfig *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    m->layers = xcalloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    LayoutBuilder lb = {0};
    build_layout(m, &lb);
    m->n_params = lb.total;
    m->param_info = lb.info;
    m->n_param_tensors = lb.n;
    return lb;
}

void model_init_layout(Model *m, ModelConfig *cfg) {
    LayoutBuilder lb = begin_layout(m, cfg);
    free(lb.slots);
}

void model_init_empty(Model *m, ModelConfig *cfg) {
    LayoutBuilder lb = begin_layout(m, cfg);
    m->params = xcalloc(lb.total, sizeof(float));
    for (int i = 0; i < lb.n; i++)
        *lb.slots[i] = m->params + lb.info[i].offset;
    if (m->cfg.tie_word_embeddings) m->lm_head = m->embed;
    if (m->cfg.fused_qkv_mlp) point_into_fused(m);
    free(lb.slots);
}

void model_free(Model *m) {
    if (m->nf4) {
        for (size_t i = 0; i < (size_t)m->cfg.n_layers * LORA_N_MODULES; i++)
            nf4_free(&m->nf4[i]);
        free(m->nf4);
    }
    /* packings of these weights kept for bf16 products (kernels/cpu/gemm_bf16.h) go with them */
    gemm_bf16_weights_changed(m->params, m->n_params * sizeof *m->params);
    gemm_bf16_weights_changed(m->params16, m->n_params * sizeof *m->params16);
    free(m->params);
    free(m->params16);
    model_unmap_embedding(m);
    free(m->params_small);
    free(m->param_info);
    free(m->layers);
    model_config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}

/* p moved from the block at old to the same offset of new (NULL stays NULL). */
static float *rebased(float *p, const float *old, float *new_base) {
    return p ? new_base + (p - old) : NULL;
}

float *model_rebase_params(Model *m, float *params) {
    float *old = m->params;
    m->embed = rebased(m->embed, old, params);
    m->final_norm = rebased(m->final_norm, old, params);
    m->lm_head = rebased(m->lm_head, old, params);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        float **all[] = {&w->input_norm,
                         &w->wq,
                         &w->bq,
                         &w->wk,
                         &w->bk,
                         &w->wv,
                         &w->bv,
                         &w->wo,
                         &w->bo,
                         &w->q_norm,
                         &w->k_norm,
                         &w->post_norm,
                         &w->w_gate,
                         &w->b_gate,
                         &w->w_up,
                         &w->b_up,
                         &w->w_down,
                         &w->b_down,
                         &w->attn_out_norm,
                         &w->mlp_out_norm};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            *all[i] = rebased(*all[i], old, params);
    }
    m->params = params;
    gemm_bf16_weights_changed(old, m->n_params * sizeof *old); /* no longer this model's */
    return old;
}

const ParamInfo *model_find_param(const Model *m, const char *name) {
    for (int i = 0; i < m->n_param_tensors; i++)
        if (strcmp(m->param_info[i].name, name) == 0) return &m->param_info[i];
    return NULL;
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

typedef struct {
    const Model *m;
} ExtraCheck;

static int check_expected(const SafetensorsTensor *t, const char *file, void *ctx) {
    const Model *m = ((ExtraCheck *)ctx)->m;
    if (model_find_param(m, t->name)) return 0;
    if (ends_with(t->name, ".rotary_emb.inv_freq")) return 0;
    if (m->cfg.tie_word_embeddings && strcmp(t->name, "lm_head.weight") == 0) return 0;
    return err_set("%s: unexpected tensor \"%s\" (config.json describes a %s without it)", file,
                   t->name, model_arch_name(m->cfg.arch));
}

const SafetensorsTensor *model_checkpoint_tensor(const Model *m, const HfWeights *ck,
                                                 const char *dir, int i) {
    const ParamInfo *p = &m->param_info[i];
    const SafetensorsTensor *t = hf_weights_find(ck, p->name);
    if (!t) {
        err_set("%s: tensor \"%s\" is missing", dir, p->name);
        return NULL;
    }
    bool same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++)
        same = t->shape[d] == p->shape[d];
    if (!same) {
        char got[96], want[96];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, p->ndim, p->shape);
        err_set("%s: tensor \"%s\" has shape %s but config.json implies %s", dir, p->name, got,
                want);
        return NULL;
    }
    return t;
}

/* Values per block of the finite check: a vector scan of a block (no early exit, so it vectorises)
 * and the scalar search for the first bad index only in a block that has one. */
#define FINITE_BLOCK 4096

static bool block_all_finite(const float *w, size_t n) {
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t k = 0; k < n; k++)
        bad |= !(fabsf(w[k]) <= FLT_MAX); /* the comparison is false for NaN and ±Inf */
    return !bad;
}

int model_check_finite(const float *w, size_t numel, const char *dir, const char *name) {
    /* A NaN or Inf weight poisons every logit downstream; name it here, not as a NaN loss. */
    size_t k = 0;
    while (k < numel) {
        size_t n = numel - k < FINITE_BLOCK ? numel - k : FINITE_BLOCK;
        if (block_all_finite(w + k, n)) {
            k += n;
            continue;
        }
        while (isfinite(w[k])) /* the block has a non-finite value: the first one's index */
            k++;
        return err_set("%s: tensor \"%s\" holds %s at flat index %zu: the checkpoint is corrupt",
                       dir, name, isnan(w[k]) ? "NaN" : "an infinity", k);
    }
    return 0;
}

int model_check_no_extra(const Model *m, const HfWeights *ck) {
    ExtraCheck ctx = {m};
    return hf_weights_for_each(ck, check_expected, &ctx);
}

int model_read_checkpoint_range(const SafetensorsTensor *t, size_t first, size_t n, float *out) {
    SafetensorsTensor view = *t;
    size_t width = t->nbytes / (size_t)(t->numel ? t->numel : 1);
    view.data = (const char *)t->data + first * width;
    view.numel = (int64_t)n;
    view.nbytes = n * width;
    view.ndim = 1;
    view.shape[0] = (int64_t)n;
    int rc = safetensors_to_f32(&view, out);
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && view.nbytes) {
        uintptr_t start = (uintptr_t)view.data & ~(uintptr_t)(page - 1);
        uintptr_t end = (uintptr_t)view.data + view.nbytes;
        (void)madvise((void *)start, end - start,
                      MADV_DONTNEED); /* advice: failure costs memory only */
    }
    return rc;
}

/* Each tensor in pieces, so that no more than a piece of the mapped file is resident at once
 * beside the fp32 block (model_read_checkpoint_range). */
static int load_tensors(Model *m, const HfWeights *ck, const char *dir) {
    for (int i = 0; i < m->n_param_tensors; i++) {
        const ParamInfo *p = &m->param_info[i];
        const SafetensorsTensor *t = model_checkpoint_tensor(m, ck, dir, i);
        if (!t) return -1;
        float *w = m->params + p->offset;
        size_t numel = (size_t)t->numel;
        for (size_t at = 0; at < numel; at += MODEL_LOAD_CHUNK_VALUES) {
            size_t n = numel - at < MODEL_LOAD_CHUNK_VALUES ? numel - at : MODEL_LOAD_CHUNK_VALUES;
            if (model_read_checkpoint_range(t, at, n, w + at) != 0) return err_prefix("%s", dir);
        }
        if (model_check_finite(w, numel, dir, p->name) != 0) return -1;
    }
    return model_check_no_extra(m, ck);
}

int model_load(Model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    ModelConfig cfg;
    if (model_config_load(&cfg, dir) != 0) return -1;
    HfWeights ck;
    if (hf_weights_open(&ck, dir) != 0) {
        model_config_free(&cfg);
        return -1;
    }
    model_init_empty(m, &cfg);
    int rc = load_tensors(m, &ck, dir);
    hf_weights_close(&ck);
    if (rc != 0) model_free(m);
    return rc;
}

void model_scale_logit_rows(const Model *m, float *rows, size_t n, size_t h) {
    float scale = model_logit_scale(m);
    if (scale == 1.0f) return;
    const Backend *be = model_backend(m);
    be->scale(be, rows, scale, n * h);
}

float model_embed_scale(const Model *m) {
    float s = (float)sqrt((double)m->cfg.hidden_size); /* torch.tensor(hidden_size**0.5) */
    return m->embed16 ? bf16_to_f32(f32_to_bf16(s)) : s;
}
