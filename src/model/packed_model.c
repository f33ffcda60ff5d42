#include "model/packed_model.h"

#include "common/error.h"

#include <stdlib.h>
#include <unistd.h>

/* Decode steps that repay the copy. Refilling a kept store reads and writes every weight once:
 * 0.24 s on the 0.5B shape, what about 10 decode steps save at 8 rows and 3 at 64. */
#define PACKED_MIN_STEPS 16
/* Prompt tokens whose prefill repays the copy where the packed product suits prefills (AVX-512
 * builds): 512 rows of the 0.5B shape take ~1.5 s with OpenBLAS's AVX2 kernels and ~0.85 s
 * packed, against a refill of a few tenths of a second. */
#define PACKED_MIN_PREFILL_ROWS 512

bool packed_model_worth(const Model *m, int rows, int steps, long prefill_rows) {
    if (!m->params) return false;
    if (packed_matmul_suits(rows) && steps >= PACKED_MIN_STEPS) return true;
    /* the prefill's products take the packed path only where it suits that many rows */
    return prefill_rows >= PACKED_MIN_PREFILL_ROWS && packed_matmul_suits(PACKED_MIN_PREFILL_ROWS);
}

bool packed_model_fits(const Model *m, const PackedModel *store) {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return false;
    double held = store ? (double)store->block_floats * sizeof(float) : 0;
    return (double)m->n_params * sizeof(float) <= 0.5 * ((double)pages * (double)page + held);
}

static void layer_matrices(const LayerWeights *w, const float *out[PACKED_PER_LAYER]) {
    out[PACKED_Q] = w->wq;
    out[PACKED_K] = w->wk;
    out[PACKED_V] = w->wv;
    out[PACKED_O] = w->wo;
    out[PACKED_GATE] = w->w_gate;
    out[PACKED_UP] = w->w_up;
    out[PACKED_DOWN] = w->w_down;
}

int packed_model_build(PackedModel *p, const Model *m) {
    const ModelConfig *c = &m->cfg;
    int H = c->hidden_size, I = c->intermediate_size;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    if (!m->params) return err_set("packed weights: the model is kept in bf16 (fp32 only)");
    /* (in_dim, out_dim) of each matrix */
    const int dims[PACKED_PER_LAYER][2] = {{H, qd}, {H, kvd}, {H, kvd}, {qd, H},
                                           {H, I},  {H, I},   {I, H}};
    size_t floats = packed_weight_floats(H, c->vocab_size);
    for (int i = 0; i < PACKED_PER_LAYER; i++)
        floats += (size_t)c->n_layers * packed_weight_floats(dims[i][0], dims[i][1]);
    if (p->block && (p->block_floats != floats || p->n_layers != c->n_layers)) packed_model_free(p);
    if (!p->block) {
        *p = (PackedModel){.block = xmalloc_huge(floats * sizeof(float), "packed weights"),
                           .block_floats = floats,
                           .n_layers = c->n_layers};
        if (!p->block) return -1;
        p->layers = xmalloc((size_t)c->n_layers * PACKED_PER_LAYER * sizeof *p->layers);
    }
    float *at = p->block;
    for (int l = 0; l < c->n_layers; l++) {
        const float *w[PACKED_PER_LAYER];
        layer_matrices(&m->layers[l], w);
        for (int i = 0; i < PACKED_PER_LAYER; i++) {
            packed_weight_fill(&p->layers[l * PACKED_PER_LAYER + i], at, w[i], dims[i][0],
                               dims[i][1]);
            at += packed_weight_floats(dims[i][0], dims[i][1]);
        }
    }
    packed_weight_fill(&p->lm_head, at, m->lm_head, H, c->vocab_size);
    return 0;
}

void packed_model_free(PackedModel *p) {
    free(p->block);
    free(p->layers);
    *p = (PackedModel){0};
}

const PackedWeight *packed_model_matrix(const PackedModel *p, int l, PackedMatrix which) {
    return p ? &p->layers[l * PACKED_PER_LAYER + which] : NULL;
}
