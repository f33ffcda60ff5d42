#include "train/device_residency.h"

#include "common/error.h"

#include <string.h>

/* Points every span's moments from the block (m_from, v_from) at the same offsets of
 * (m_to, v_to). */
static void move_moments(AdamW *opt, const float *m_from, const float *v_from, float *m_to,
                         float *v_to) {
    for (int s = 0; s < opt->n_spans; s++) {
        opt->moments[s].m = m_to + (opt->moments[s].m - m_from);
        opt->moments[s].v = v_to + (opt->moments[s].v - v_from);
    }
}

/* be's copy of n floats of host memory, or NULL with an error naming what. */
static float *copy_up(const Backend *be, const float *host, size_t n, const char *what) {
    float *d = be->alloc(be, (n ? n : 1) * sizeof *d, what);
    if (d && n) be->copy(be, d, host, n * sizeof *d, BACKEND_HOST_TO_DEVICE);
    return d;
}

static void free_device(DeviceResidency *r) {
    const Backend *be = r->be;
    be->free(be, r->dev_model), be->free(be, r->dev_lora);
    be->free(be, r->dev_grads), be->free(be, r->dev_moments);
    r->dev_model = r->dev_lora = r->dev_grads = r->dev_moments = NULL;
}

static void point_trained(Trainer *tr) {
    tr->params = tr->lora ? tr->lora->params : tr->model->params;
}

int device_residency_enter(DeviceResidency *r, Trainer *tr, const Backend *be) {
    memset(r, 0, sizeof *r);
    Model *m = tr->model;
    AdamW *opt = &tr->adamw;
    bool frozen = !m->params;
    if (frozen && (!frozen_residency_applies(m) || !tr->lora))
        return err_set("the %s backend trains fp32 weights, or an adapter on a frozen bf16 or "
                       "NF4 base, only (this model is stored frozen, with no adapter)",
                       be->name);
    if (opt->cfg.eight_bit)
        return err_set("optimizer adamw_bnb_8bit: the %s backend keeps fp32 moments only",
                       be->name);
    if (adamw_check_backend(opt, be) != 0) return -1;
    r->be = be;
    r->tr = tr;
    size_t n = opt->n;
    /* a frozen base has no fp32 block (n_params still counts it): device_frozen.h moves it */
    r->dev_model = copy_up(be, m->params, frozen ? 0 : m->n_params, "the model's weights");
    if (r->dev_model && tr->lora)
        r->dev_lora = copy_up(be, tr->lora->params, tr->lora->n_params, "the adapter's weights");
    if (r->dev_model && (!tr->lora || r->dev_lora))
        r->dev_grads =
            be->alloc(be, (tr->n_params ? tr->n_params : 1) * sizeof(float), "the gradients");
    if (r->dev_grads) r->dev_moments = be->alloc(be, (2 * n + 1) * sizeof(float), "AdamW moments");
    if (r->dev_moments && frozen && frozen_residency_enter(&r->frozen, m, be) != 0)
        be->free(be, r->dev_moments), r->dev_moments = NULL;
    if (!r->dev_moments) {
        free_device(r);
        return err_prefix("training on the %s backend", be->name);
    }
    be->memset(be, r->dev_grads, 0, tr->n_params * sizeof(float));
    if (n) {
        be->copy(be, r->dev_moments, opt->m, n * sizeof(float), BACKEND_HOST_TO_DEVICE);
        be->copy(be, r->dev_moments + n, opt->v, n * sizeof(float), BACKEND_HOST_TO_DEVICE);
    }
    r->host_model = m->params;
    r->host_lora = tr->lora ? tr->lora->params : NULL;
    r->host_grads = tr->grads;
    r->was_backend = m->backend;
    tr->grads = r->dev_grads;
    m->backend = be;
    r->host_view = true; /* so that _to_device moves everything */
    device_residency_to_device(r);
    tr->resident = r;
    return 0;
}

void device_residency_to_host(DeviceResidency *r) {
    if (!r || !r->tr || r->host_view) return;
    Trainer *tr = r->tr;
    const Backend *be = r->be;
    AdamW *opt = &tr->adamw;
    size_t n = opt->n;
    if (r->frozen.m) {
        frozen_residency_point(&r->frozen, false); /* nothing of it changed: no copy */
    } else {
        be->copy(be, r->host_model, r->dev_model, tr->model->n_params * sizeof(float),
                 BACKEND_DEVICE_TO_HOST);
        model_rebase_params(tr->model, r->host_model);
    }
    if (tr->lora) {
        be->copy(be, r->host_lora, r->dev_lora, tr->lora->n_params * sizeof(float),
                 BACKEND_DEVICE_TO_HOST);
        lora_rebase_params(tr->lora, r->host_lora);
    }
    if (n) {
        be->copy(be, opt->m, r->dev_moments, n * sizeof(float), BACKEND_DEVICE_TO_HOST);
        be->copy(be, opt->v, r->dev_moments + n, n * sizeof(float), BACKEND_DEVICE_TO_HOST);
    }
    move_moments(opt, r->dev_moments, r->dev_moments + n, opt->m, opt->v);
    point_trained(tr);
    r->host_view = true;
}

void device_residency_to_device(DeviceResidency *r) {
    if (!r || !r->tr || !r->host_view) return;
    Trainer *tr = r->tr;
    AdamW *opt = &tr->adamw;
    if (r->frozen.m)
        frozen_residency_point(&r->frozen, true);
    else
        model_rebase_params(tr->model, r->dev_model);
    if (tr->lora) lora_rebase_params(tr->lora, r->dev_lora);
    move_moments(opt, opt->m, opt->v, r->dev_moments, r->dev_moments + opt->n);
    point_trained(tr);
    r->host_view = false;
}

void device_residency_leave(DeviceResidency *r) {
    if (!r || !r->tr) return;
    Trainer *tr = r->tr;
    device_residency_to_host(r);
    tr->grads = r->host_grads;
    tr->model->backend = r->was_backend;
    tr->resident = NULL;
    frozen_residency_leave(&r->frozen);
    free_device(r);
    memset(r, 0, sizeof *r);
}
