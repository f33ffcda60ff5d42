#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"
#include "model/model.h"

#include <cblas.h>

/* W += scaling * B A for every adapted module (PEFT's merge_and_unload), in fp32. */
int lora_merge(Model *m, const LoraAdapter *a) {
    if (a->n_layers != m->cfg.n_layers) return err_set("the adapter does not fit this model");
    if (m->params16) return err_set("an adapter cannot be merged into a model kept in bf16");
    for (int l = 0; l < a->n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        float *weights[LORA_N_MODULES] = {w->wq,     w->wk,   w->wv,    w->wo,
                                          w->w_gate, w->w_up, w->w_down};
        for (int mod = 0; mod < LORA_N_MODULES; mod++) {
            const LoraLinear *lin = &a->linears[l * LORA_N_MODULES + mod];
            if (!lin->A) continue;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, lin->out, lin->in, a->r,
                        a->scaling, lin->B, a->r, lin->A, lin->in, 1.0f, weights[mod], lin->in);
            gemm_bf16_weights_changed(weights[mod], (size_t)lin->out * lin->in * sizeof(float));
        }
    }
    return 0;
}
