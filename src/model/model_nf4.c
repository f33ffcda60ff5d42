/* A loaded model's layer matrices quantised to NF4 for QLoRA (model.h: model_store_nf4). */
#include "common/error.h"
#include "common/float16.h"
#include "kernels/cpu/nf4.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* The number of values of the tensor that starts at p. */
static size_t numel_at(const Model *m, const float *p) {
    for (int i = 0; i < m->n_param_tensors; i++)
        if (m->params + m->param_info[i].offset == p) return m->param_info[i].numel;
    return 0; /* not a tensor start: cannot happen for the pointers model.c sets */
}

static void free_all(Nf4Weight *q, size_t n) {
    for (size_t i = 0; i < n; i++)
        nf4_free(&q[i]);
    free(q);
}

int model_store_nf4(Model *m, bool round_bf16) {
    if (!m->params) return err_set("the model's weights are already stored in bf16 or NF4");
    int L = m->cfg.n_layers;
    size_t n_q = (size_t)L * LORA_N_MODULES, largest = 0;
    Nf4Weight *q = xcalloc(n_q, sizeof *q);
    for (int l = 0; l < L; l++) {
        LayerWeights *w = &m->layers[l];
        const float *matrices[LORA_N_MODULES] = {w->wq,     w->wk,   w->wv,    w->wo,
                                                 w->w_gate, w->w_up, w->w_down};
        for (int k = 0; k < LORA_N_MODULES; k++)
            if (numel_at(m, matrices[k]) > largest) largest = numel_at(m, matrices[k]);
    }
    float *rounded = round_bf16 ? xmalloc_checked(largest * sizeof(float), "bf16 rounding") : NULL;
    if (round_bf16 && !rounded) {
        free(q);
        return -1;
    }
    for (int l = 0; l < L; l++) {
        LayerWeights *w = &m->layers[l];
        const float *matrices[LORA_N_MODULES] = {w->wq,     w->wk,   w->wv,    w->wo,
                                                 w->w_gate, w->w_up, w->w_down};
        for (int k = 0; k < LORA_N_MODULES; k++) {
            size_t n = numel_at(m, matrices[k]);
            const float *src = matrices[k];
            if (round_bf16) { /* the values transformers holds after loading in bf16 */
#pragma omp parallel for schedule(static)
                for (size_t i = 0; i < n; i++)
                    rounded[i] = bf16_to_f32(f32_to_bf16(src[i]));
                src = rounded;
            }
            if (nf4_quantize(&q[(size_t)l * LORA_N_MODULES + k], src, n) != 0) {
                free(rounded);
                free_all(q, n_q);
                return err_prefix("NF4 quantisation of layer %d", l);
            }
        }
    }
    free(rounded);
    /* the matrices leave the fp32 block: the rest goes to bf16 storage */
    float **slots = xmalloc(n_q * sizeof *slots);
    for (int l = 0; l < L; l++) {
        LayerWeights *w = &m->layers[l];
        float **matrices[LORA_N_MODULES] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                            &w->w_gate, &w->w_up, &w->w_down};
        for (int k = 0; k < LORA_N_MODULES; k++) {
            slots[(size_t)l * LORA_N_MODULES + k] = *matrices[k];
            *matrices[k] = NULL;
        }
    }
    if (model_store_bf16_except_matrices(m) != 0) { /* out of memory: put the pointers back */
        for (int l = 0; l < L; l++) {
            LayerWeights *w = &m->layers[l];
            float **matrices[LORA_N_MODULES] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                &w->w_gate, &w->w_up, &w->w_down};
            for (int k = 0; k < LORA_N_MODULES; k++)
                *matrices[k] = slots[(size_t)l * LORA_N_MODULES + k];
        }
        free(slots);
        free_all(q, n_q);
        return -1;
    }
    free(slots);
    for (int l = 0; l < L; l++) {
        LayerWeights *w = &m->layers[l];
        const Nf4Weight **quantised[LORA_N_MODULES] = {&w->wq4,     &w->wk4,   &w->wv4,    &w->wo4,
                                                       &w->w_gate4, &w->w_up4, &w->w_down4};
        for (int k = 0; k < LORA_N_MODULES; k++)
            *quantised[k] = &q[(size_t)l * LORA_N_MODULES + k];
    }
    m->nf4 = q;
    return 0;
}
