/* A loaded model's weights moved to bf16 storage (model.h: model_store_bf16), and reading
 * the embedding from either storage. */
#include "common/error.h"
#include "kernels/cpu/kernels.h"
#include "common/float16.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* Where each 1-D tensor (a norm or a bias) lands in params_small; SIZE_MAX for matrices. */
static size_t *small_offsets(const Model *m, size_t *total) {
    size_t *at = xmalloc((size_t)m->n_param_tensors * sizeof *at);
    *total = 0;
    for (int i = 0; i < m->n_param_tensors; i++) {
        at[i] = m->param_info[i].ndim == 1 ? *total : SIZE_MAX;
        if (at[i] != SIZE_MAX) *total += m->param_info[i].numel;
    }
    return at;
}

/* The params_small copy of the 1-D tensor p points at (NULL stays NULL). */
static float *small_copy(const Model *m, const float *p, float *small, const size_t *at) {
    if (!p) return NULL;
    for (int i = 0; i < m->n_param_tensors; i++)
        if (m->params + m->param_info[i].offset == p) return small + at[i];
    return NULL; /* not a tensor start: cannot happen for the pointers model.c sets */
}

static const uint16_t *half_of(const Model *m, const float *p, const uint16_t *half) {
    return p ? half + (p - m->params) : NULL;
}

/* Widens the norms and biases into `small` (laid out by `at`) from their bf16 rounding, and
 * points every 1-D tensor pointer at its copy. */
static void move_vectors(Model *m, float *small, const size_t *at) {
    for (int i = 0; i < m->n_param_tensors; i++)
        if (at[i] != SIZE_MAX)
            for (size_t k = 0; k < m->param_info[i].numel; k++)
                small[at[i] + k] = bf16_to_f32(f32_to_bf16(m->params[m->param_info[i].offset + k]));
    for (int l = 0; l < m->cfg.n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        float **vectors[] = {&w->input_norm,  &w->bq,     &w->bk,     &w->bv,
                             &w->bo,          &w->q_norm, &w->k_norm, &w->post_norm,
                             &w->b_gate,      &w->b_up,   &w->b_down, &w->attn_out_norm,
                             &w->mlp_out_norm};
        for (size_t k = 0; k < sizeof vectors / sizeof *vectors; k++)
            *vectors[k] = small_copy(m, *vectors[k], small, at);
    }
    m->final_norm = small_copy(m, m->final_norm, small, at);
}

/* The last step of both conversions: the fp32 parameters freed, the model holding `half` and
 * `small` instead (at, the layout of small, is no longer needed). */
static void adopt_frozen_storage(Model *m, uint16_t *half, float *small, size_t *at) {
    m->embed = m->lm_head = NULL;
    free(at);
    free(m->params);
    m->params = NULL;
    m->params16 = half;
    m->params_small = small;
}

int model_store_bf16(Model *m) {
    if (!m->params) return err_set("the model's weights are already stored in bf16");
    uint16_t *half = xmalloc_checked(m->n_params * sizeof *half, "bf16 weights");
    if (!half) return -1;
    size_t n_small;
    size_t *at = small_offsets(m, &n_small);
    float *small = xmalloc((n_small ? n_small : 1) * sizeof *small);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < m->n_params; i++)
        half[i] = f32_to_bf16(m->params[i]);
    move_vectors(m, small, at);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        float **matrices[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        const uint16_t **halves[] = {&w->wq16,     &w->wk16,   &w->wv16,    &w->wo16,
                                     &w->w_gate16, &w->w_up16, &w->w_down16};
        for (int k = 0; k < 7; k++) {
            *halves[k] = half_of(m, *matrices[k], half);
            *matrices[k] = NULL;
        }
    }
    m->embed16 = half_of(m, m->embed, half);
    m->lm_head16 = half_of(m, m->lm_head, half);
    adopt_frozen_storage(m, half, small, at);
    return 0;
}

int model_store_bf16_except_matrices(Model *m) {
    if (!m->params) return err_set("the model's weights are already stored in bf16");
    size_t vh = (size_t)m->cfg.vocab_size * (size_t)m->cfg.hidden_size;
    bool tied = m->lm_head == m->embed;
    uint16_t *half = xmalloc_checked((tied ? 1 : 2) * vh * sizeof *half, "bf16 embedding");
    if (!half) return -1;
    size_t n_small;
    size_t *at = small_offsets(m, &n_small);
    float *small = xmalloc((n_small ? n_small : 1) * sizeof *small);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < vh; i++)
        half[i] = f32_to_bf16(m->embed[i]);
    if (!tied) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < vh; i++)
            half[vh + i] = f32_to_bf16(m->lm_head[i]);
    }
    move_vectors(m, small, at);
    m->embed16 = half;
    m->lm_head16 = tied ? half : half + vh;
    adopt_frozen_storage(m, half, small, at);
    return 0;
}
