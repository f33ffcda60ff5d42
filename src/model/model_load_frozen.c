/* Loading a checkpoint straight into frozen storage (model.h: model_load_frozen): what
 * model_load followed by model_store_bf16 or model_store_nf4 gives, bit for bit, without their
 * fp32 copy of every weight. Each tensor is converted on its own: a layer matrix into an fp32
 * scratch of its size (then rounded to bf16, or quantised), the embedding and lm_head in chunks
 * straight to bf16, norms and biases to their fp32 widening of bf16. */
#include "common/error.h"
#include "common/float16.h"
#include "kernels/cpu/nf4.h"
#include "model/model_loading.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Tensor i into bf16 at dst (numel values), through `scratch` (MODEL_LOAD_CHUNK_VALUES floats),
 * each piece checked for NaN and infinity; with dst NULL only checked (the embedding left in its
 * file). */
static int read_bf16(const Model *m, const SafetensorsTensor *t, int i, const char *dir,
                     uint16_t *dst, float *scratch) {
    size_t numel = m->param_info[i].numel;
    for (size_t at = 0; at < numel; at += MODEL_LOAD_CHUNK_VALUES) {
        size_t n = numel - at < MODEL_LOAD_CHUNK_VALUES ? numel - at : MODEL_LOAD_CHUNK_VALUES;
        if (model_read_checkpoint_range(t, at, n, scratch) != 0) return err_prefix("%s", dir);
        if (model_check_finite(scratch, n, dir, m->param_info[i].name) != 0) return -1;
        if (!dst) continue;
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < n; k++)
            dst[at + k] = f32_to_bf16(scratch[k]);
    }
    return 0;
}

/* Whether param_info[i] is a layer matrix (the tensors NF4 quantises). */
static bool is_layer_matrix(const Model *m, int i) {
    return m->param_info[i].ndim == 2 && strncmp(m->param_info[i].name, "model.layers.", 13) == 0;
}

/* The layer and module (LoraModule order) of a layer matrix's name. */
static void matrix_slot(const char *name, int *layer, int *module) {
    static const char *const modules[LORA_N_MODULES] = {
        "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.", "self_attn.o_proj.",
        "mlp.gate_proj.",    "mlp.up_proj.",      "mlp.down_proj."};
    *layer = atoi(name + 13);
    const char *rest = strchr(name + 13, '.') + 1;
    *module = 0;
    for (int k = 0; k < LORA_N_MODULES; k++)
        if (strncmp(rest, modules[k], strlen(modules[k])) == 0) *module = k;
}

/* Where each tensor lives once loaded: points the Model's pointers at the storage. */
static void point(Model *m, const size_t *small_at, const size_t *half_at, bool nf4) {
    const float *small = m->params_small;
    for (int l = 0; nf4 && l < m->cfg.n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        const Nf4Weight **quarters[LORA_N_MODULES] = {&w->wq4,     &w->wk4,   &w->wv4,    &w->wo4,
                                                      &w->w_gate4, &w->w_up4, &w->w_down4};
        for (int k = 0; k < LORA_N_MODULES; k++)
            *quarters[k] = &m->nf4[(size_t)l * LORA_N_MODULES + k];
    }
    for (int i = 0; i < m->n_param_tensors; i++) {
        const char *name = m->param_info[i].name;
        if (small_at[i] != SIZE_MAX) { /* a norm or a bias: find its field by name */
            float *p = (float *)small + small_at[i];
            if (strcmp(name, "model.norm.weight") == 0) {
                m->final_norm = p;
                continue;
            }
            LayerWeights *w = &m->layers[atoi(name + 13)];
            const char *rest = strchr(name + 13, '.') + 1;
            struct {
                const char *suffix;
                float **field;
            } vectors[] = {{"input_layernorm.weight", &w->input_norm},
                           {"post_attention_layernorm.weight",
                            m->cfg.gemma_norms ? &w->attn_out_norm : &w->post_norm},
                           {"pre_feedforward_layernorm.weight", &w->post_norm},
                           {"post_feedforward_layernorm.weight", &w->mlp_out_norm},
                           {"self_attn.q_norm.weight", &w->q_norm},
                           {"self_attn.k_norm.weight", &w->k_norm},
                           {"self_attn.q_proj.bias", &w->bq},
                           {"self_attn.k_proj.bias", &w->bk},
                           {"self_attn.v_proj.bias", &w->bv},
                           {"self_attn.o_proj.bias", &w->bo},
                           {"mlp.gate_proj.bias", &w->b_gate},
                           {"mlp.up_proj.bias", &w->b_up},
                           {"mlp.down_proj.bias", &w->b_down}};
            for (size_t k = 0; k < sizeof vectors / sizeof *vectors; k++)
                if (strcmp(rest, vectors[k].suffix) == 0) *vectors[k].field = p;
        } else if (half_at[i] != SIZE_MAX) {
            const uint16_t *p = m->params16 + half_at[i];
            if (strcmp(name, "model.embed_tokens.weight") == 0)
                m->embed16 = p;
            else if (strcmp(name, "lm_head.weight") == 0)
                m->lm_head16 = p;
            else {
                int l, k;
                matrix_slot(name, &l, &k);
                LayerWeights *w = &m->layers[l];
                const uint16_t **halves[LORA_N_MODULES] = {
                    &w->wq16, &w->wk16, &w->wv16, &w->wo16, &w->w_gate16, &w->w_up16, &w->w_down16};
                *halves[k] = p;
            }
        }
    }
    if (m->cfg.tie_word_embeddings) m->lm_head16 = m->embed16;
}

int model_load_frozen(Model *m, const char *dir, bool nf4, bool round_bf16) {
    memset(m, 0, sizeof *m);
    ModelConfig cfg;
    if (model_config_load(&cfg, dir) != 0) return -1;
    if (cfg.fused_qkv_mlp) {
        /* Phi-3's fused qkv_proj / gate_up_proj: bitsandbytes quantises each fused tensor as one
         * matrix (its double quantisation's blocks and offset span q, k and v together), which
         * the per-module NF4 storage cannot give; a bf16 base goes the way this function
         * replaces, through one fp32 copy (same values, more memory at load). */
        model_config_free(&cfg);
        if (nf4)
            return err_set("%s: load_in_4bit (QLoRA) is not supported for a model with fused "
                           "projections (qkv_proj, gate_up_proj: Phi-3); use adapter: lora",
                           dir);
        if (model_load(m, dir) != 0) return -1;
        if (model_store_bf16(m) == 0) return 0;
        model_free(m);
        return -1;
    }
    HfWeights ck;
    if (hf_weights_open(&ck, dir) != 0) {
        model_config_free(&cfg);
        return -1;
    }
    model_init_layout(m, &cfg);
    int n = m->n_param_tensors;
    size_t *small_at = xmalloc((size_t)n * sizeof *small_at);
    size_t *half_at = xmalloc((size_t)n * sizeof *half_at);
    size_t n_small = 0, n_half = 0, largest = 0;
    /* an untied bf16 embedding stays in its file (embed_map.c), outside params16 */
    int embed_at = -1;
    const uint16_t *mapped_embed = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(m->param_info[i].name, "model.embed_tokens.weight") == 0) embed_at = i;
    if (embed_at >= 0) {
        const SafetensorsTensor *t = model_checkpoint_tensor(m, &ck, dir, embed_at);
        if (t) mapped_embed = model_map_embedding(m, &ck, t);
        err_clear(); /* a missing tensor is reported by the loop below, in order */
    }
    for (int i = 0; i < n; i++) { /* where each tensor goes */
        const ParamInfo *p = &m->param_info[i];
        bool quantised = nf4 && is_layer_matrix(m, i);
        bool mapped = i == embed_at && mapped_embed;
        small_at[i] = p->ndim == 1 ? n_small : SIZE_MAX;
        half_at[i] = p->ndim == 2 && !quantised && !mapped ? n_half : SIZE_MAX;
        if (p->ndim == 1) n_small += p->numel;
        if (half_at[i] != SIZE_MAX) n_half += p->numel;
        if (quantised && p->numel > largest) largest = p->numel;
    }
    int rc = 0;
    m->params_small = xmalloc((n_small ? n_small : 1) * sizeof(float));
    m->params16 = xmalloc_checked((n_half ? n_half : 1) * sizeof(uint16_t), "bf16 weights");
    float *scratch = xmalloc_checked(
        (largest > MODEL_LOAD_CHUNK_VALUES ? largest : MODEL_LOAD_CHUNK_VALUES) * sizeof(float),
        "a weight matrix in fp32");
    if (nf4) m->nf4 = xcalloc((size_t)m->cfg.n_layers * LORA_N_MODULES, sizeof *m->nf4);
    if (!m->params16 || !scratch) rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        const ParamInfo *p = &m->param_info[i];
        const SafetensorsTensor *t = model_checkpoint_tensor(m, &ck, dir, i);
        if (!t) {
            rc = -1;
        } else if (small_at[i] != SIZE_MAX) { /* widened from bf16, as model_store_bf16 */
            float *dst = m->params_small + small_at[i];
            rc = model_read_checkpoint_range(t, 0, p->numel, dst) != 0
                     ? err_prefix("%s", dir)
                     : model_check_finite(dst, p->numel, dir, p->name);
            for (size_t k = 0; rc == 0 && k < p->numel; k++)
                dst[k] = bf16_to_f32(f32_to_bf16(dst[k]));
        } else if (half_at[i] != SIZE_MAX) {
            rc = read_bf16(m, t, i, dir, m->params16 + half_at[i], scratch);
        } else if (i == embed_at) { /* mapped: checked as read_bf16 checks, nothing copied */
            rc = read_bf16(m, t, i, dir, NULL, scratch);
        } else { /* a layer matrix to NF4, as model_store_nf4 */
            int l, k;
            matrix_slot(p->name, &l, &k);
            rc = model_read_checkpoint_range(t, 0, p->numel, scratch) != 0
                     ? err_prefix("%s", dir)
                     : model_check_finite(scratch, p->numel, dir, p->name);
            if (rc == 0 && round_bf16)
#pragma omp parallel for schedule(static)
                for (size_t v = 0; v < p->numel; v++)
                    scratch[v] = bf16_to_f32(f32_to_bf16(scratch[v]));
            if (rc == 0)
                rc = nf4_quantize(&m->nf4[(size_t)l * LORA_N_MODULES + k], scratch, p->numel);
        }
    }
    free(scratch);
    if (rc == 0) rc = model_check_no_extra(m, &ck);
    hf_weights_close(&ck);
    if (rc == 0) point(m, small_at, half_at, nf4);
    if (rc == 0 && mapped_embed) m->embed16 = mapped_embed;
    free(small_at);
    free(half_at);
    if (rc != 0) model_free(m);
    return rc;
}
