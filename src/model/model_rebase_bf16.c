/* model_rebase_bf16 (model.h): a model kept in bf16 moved between two copies of its storage, as
 * model_rebase_params moves an fp32 one (a bf16 reference in a device backend's memory). */
#include "kernels/cpu/gemm_bf16.h"
#include "model/model.h"

/* p moved from the block at old to the same offset of new_base (NULL stays NULL). */
static const uint16_t *rebased16(const uint16_t *p, const uint16_t *old, uint16_t *new_base) {
    return p ? new_base + (p - old) : NULL;
}

static float *rebased32(float *p, const float *old, float *new_base) {
    return p ? new_base + (p - old) : NULL;
}

size_t model_bf16_small_count(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_param_tensors; i++)
        if (m->param_info[i].ndim == 1) n += m->param_info[i].numel;
    return n;
}

void model_rebase_bf16(Model *m, uint16_t *half, float *small, uint16_t **old_half,
                       float **old_small) {
    uint16_t *oh = m->params16;
    float *os = m->params_small;
    m->embed16 = rebased16(m->embed16, oh, half);
    m->lm_head16 = rebased16(m->lm_head16, oh, half);
    m->final_norm = rebased32(m->final_norm, os, small);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        const uint16_t **matrices[] = {&w->wq16,     &w->wk16,   &w->wv16,    &w->wo16,
                                       &w->w_gate16, &w->w_up16, &w->w_down16};
        for (size_t k = 0; k < sizeof matrices / sizeof *matrices; k++)
            *matrices[k] = rebased16(*matrices[k], oh, half);
        float **vectors[] = {&w->input_norm,  &w->bq,     &w->bk,     &w->bv,
                             &w->bo,          &w->q_norm, &w->k_norm, &w->post_norm,
                             &w->b_gate,      &w->b_up,   &w->b_down, &w->attn_out_norm,
                             &w->mlp_out_norm};
        for (size_t k = 0; k < sizeof vectors / sizeof *vectors; k++)
            *vectors[k] = rebased32(*vectors[k], os, small);
    }
    m->params16 = half;
    m->params_small = small;
    /* packings of the old bf16 block (kernels/cpu/gemm_bf16.h) are no longer this model's */
    gemm_bf16_weights_changed(oh, m->n_params * sizeof *oh);
    *old_half = oh;
    *old_small = os;
}
