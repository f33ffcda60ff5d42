#include "train/device_frozen.h"

#include "common/error.h"
#include "kernels/cpu/nf4.h"
#include "kernels/nf4_backend.h"
#include "model/lora.h"

#include <stdlib.h>
#include <string.h>

bool frozen_residency_applies(const Model *m) {
    return !m->params && m->params16;
}

/* Records slot's tensor of `bytes` (a NULL pointer is skipped); a tensor already recorded (a tied
 * lm_head) shares its copy. */
static int add(FrozenResidency *f, void **slot, size_t bytes, const char *what) {
    if (!*slot) return 0;
    FrozenTensor *e = &f->t[f->n];
    *e = (FrozenTensor){.slot = slot, .host = *slot};
    for (int i = 0; i < f->n; i++)
        if (f->t[i].host == e->host) {
            e->dev = f->t[i].dev;
            f->n++;
            return 0;
        }
    e->dev = f->be->alloc(f->be, bytes, what);
    if (!e->dev) return -1;
    f->be->copy(f->be, e->dev, e->host, bytes, BACKEND_HOST_TO_DEVICE);
    e->owned = true;
    f->n++;
    return 0;
}

static void free_all(FrozenResidency *f) {
    for (int i = 0; i < f->n; i++)
        if (f->t[i].owned) f->be->free(f->be, f->t[i].dev);
    for (size_t i = 0; f->dev_nf4 && i < f->n_nf4; i++)
        if (f->dev_nf4[i].packed) nf4_backend_free(f->be, &f->dev_nf4[i]);
    free(f->t);
    free(f->dev_nf4);
    memset(f, 0, sizeof *f);
}

/* The model's NF4 pointer to its copy, by its index in m->nf4. */
static const struct Nf4Weight *nf4_side(const FrozenResidency *f, const struct Nf4Weight *p,
                                        bool device) {
    if (!p) return NULL;
    const Nf4Weight *host = f->m->nf4, *dev = f->dev_nf4;
    if (device && p >= host && p < host + f->n_nf4) return dev + (p - host);
    if (!device && p >= dev && p < dev + f->n_nf4) return host + (p - dev);
    return p;
}

void frozen_residency_point(FrozenResidency *f, bool device) {
    if (!f->m) return;
    for (int i = 0; i < f->n; i++)
        *f->t[i].slot = device ? f->t[i].dev : f->t[i].host;
    for (int l = 0; l < f->m->cfg.n_layers; l++) {
        LayerWeights *w = &f->m->layers[l];
        const struct Nf4Weight **mats[] = {&w->wq4,     &w->wk4,   &w->wv4,    &w->wo4,
                                           &w->w_gate4, &w->w_up4, &w->w_down4};
        for (size_t k = 0; k < sizeof mats / sizeof *mats; k++)
            *mats[k] = nf4_side(f, *mats[k], device);
    }
}

int frozen_residency_enter(FrozenResidency *f, Model *m, const Backend *be) {
    memset(f, 0, sizeof *f);
    f->be = be;
    f->m = m;
    const ModelConfig *c = &m->cfg;
    size_t h = (size_t)c->hidden_size, v = (size_t)c->vocab_size, i_dim = c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    /* per layer up to 13 norms and biases and 7 bf16 matrices; the embedding, lm_head, final
     * norm */
    f->t = xcalloc((size_t)c->n_layers * (13 + LORA_N_MODULES) + 3, sizeof *f->t);
    int rc = add(f, (void **)&m->embed16, v * h * 2, "the frozen embedding");
    if (rc == 0) rc = add(f, (void **)&m->lm_head16, v * h * 2, "the frozen lm_head");
    if (rc == 0) rc = add(f, (void **)&m->final_norm, h * 4, "the final norm");
    for (int l = 0; rc == 0 && l < c->n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        struct {
            float **p;
            size_t n;
        } vec[] = {{&w->input_norm, h},
                   {&w->post_norm, h},
                   {&w->attn_out_norm, h},
                   {&w->mlp_out_norm, h},
                   {&w->q_norm, c->head_dim},
                   {&w->k_norm, c->head_dim},
                   {&w->bq, qd},
                   {&w->bk, kvd},
                   {&w->bv, kvd},
                   {&w->bo, h},
                   {&w->b_gate, i_dim},
                   {&w->b_up, i_dim},
                   {&w->b_down, h}};
        for (size_t k = 0; rc == 0 && k < sizeof vec / sizeof *vec; k++)
            rc = add(f, (void **)vec[k].p, vec[k].n * 4, "a frozen norm or bias");
        /* a bf16 base's matrices (NULL under NF4), each (out, in) as decoder_layer.c reads it;
         * a fused Phi-3 tensor's rows are copied module by module, as each product reads them */
        struct {
            const uint16_t **p;
            size_t n;
        } mat[LORA_N_MODULES] = {{&w->wq16, qd * h},        {&w->wk16, kvd * h},
                                 {&w->wv16, kvd * h},       {&w->wo16, h * qd},
                                 {&w->w_gate16, i_dim * h}, {&w->w_up16, i_dim * h},
                                 {&w->w_down16, h * i_dim}};
        for (size_t k = 0; rc == 0 && k < LORA_N_MODULES; k++)
            rc = add(f, (void **)mat[k].p, mat[k].n * 2, "a frozen bf16 matrix");
    }
    f->n_nf4 = m->nf4 ? (size_t)c->n_layers * LORA_N_MODULES : 0;
    f->dev_nf4 = f->n_nf4 ? xcalloc(f->n_nf4, sizeof *f->dev_nf4) : NULL;
    for (size_t k = 0; rc == 0 && k < f->n_nf4; k++)
        if (m->nf4[k].packed) rc = nf4_to_backend(be, &m->nf4[k], &f->dev_nf4[k]);
    if (rc != 0) {
        free_all(f);
        return err_prefix("the frozen %s base on the %s backend", m->nf4 ? "NF4" : "bf16",
                          be->name);
    }
    frozen_residency_point(f, true);
    /* the copy read all of an embedding left in its file (model.h: embed_map): its pages go
     * back, nothing on the host reads them while the device trains */
    model_release_embedding(m);
    return 0;
}

void frozen_residency_leave(FrozenResidency *f) {
    if (!f->m) return;
    frozen_residency_point(f, false);
    free_all(f);
}
