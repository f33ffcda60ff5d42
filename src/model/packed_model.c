#include "model/packed_model.h"

#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Decode steps that repay the copy. Refilling a kept store reads and writes every weight once:
 * 0.24 s on the 0.5B shape, what about 10 decode steps save at 8 rows and 3 at 64. */
#define PACKED_MIN_STEPS 16
/* Prompt tokens whose prefill repays the copy where the packed product suits prefills (AVX-512
 * builds). Measured on the 0.5B shape, one prompt (Zen 5, 2 threads; prefill seconds unpacked
 * against packed plus the copy): fp32 128 rows 0.47 vs 0.25 + 0.22, 256 rows 0.91 vs
 * 0.47 + 0.21. A model kept in bf16 repays it sooner, as its unpacked products widen W to fp32
 * for OpenBLAS's AVX2 kernels while the packed ones are bf16 dot products: 32 rows 0.16-0.20 vs
 * about 0.04 + 0.115, 64 rows 0.29 vs 0.08 + 0.115. */
#define PACKED_MIN_PREFILL_ROWS      256
#define PACKED_MIN_PREFILL_ROWS_BF16 64

/* Whether m's products are bf16 products: its weights are kept in bf16, or it computes under
 * bf16 autocast (bf16: true; backend_autocast.c multiplies fp32 weights rounded to bf16). */
static bool bf16_products(const Model *m) {
    return !m->params || model_backend(m) == backend_cpu_autocast();
}

bool packed_model_amx(const Model *m) {
    return !m->nf4 && bf16_products(m) && packed_amx_available();
}

bool packed_model_worth(const Model *m, int rows, int steps, long prefill_rows) {
    if (m->nf4) return false; /* a packed copy of NF4 weights would be the base in 16 or 32 bits */
    /* no copy of its own: the cache's packing, which autocast training reads too (fp32 weights:
     * always) or which is made once per model (bf16 ones: when some product suits it) */
    if (packed_model_amx(m))
        return m->params || packed_matmul_suits(rows) ||
               packed_matmul_suits(prefill_rows < INT_MAX ? (int)prefill_rows : INT_MAX);
    /* fp32 panels are not what autocast multiplies (ac_linear passes them by) */
    if (m->params && bf16_products(m)) return false;
    if (!m->params && !packed_bf16_available()) return false;
    if (packed_matmul_suits(rows) && steps >= PACKED_MIN_STEPS) return true;
    /* the prefill's products take the packed path only where it suits that many rows */
    int min_rows = m->params ? PACKED_MIN_PREFILL_ROWS : PACKED_MIN_PREFILL_ROWS_BF16;
    return prefill_rows >= min_rows && packed_matmul_suits(min_rows);
}

/* Bytes the system can give without swapping: /proc/meminfo's MemAvailable, which counts the
 * page cache the kernel would drop (just after a model is read, its file's pages fill much of
 * memory and the free pages alone can look too few); the free pages where there is no
 * /proc. 0 when unknown. */
static double available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[128];
        unsigned long long kb = 0;
        bool found = false;
        while (!found && fgets(line, sizeof line, f))
            found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
        fclose(f);
        if (found) return (double)kb * 1024.0;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

bool packed_model_fits(const Model *m, const PackedModel *store) {
    /* AMX: the cache's packing; fp32 weights under autocast have it for training anyway, bf16
     * ones keep it until model_free (what the cache holds already counts as free) */
    if (packed_model_amx(m))
        return m->params || (double)m->n_params * sizeof(uint16_t) <=
                                0.5 * (available_bytes() + (double)gemm_bf16_cache_bytes());
    double held = store ? (double)store->block_bytes : 0;
    double bytes = (double)m->n_params * (m->params ? sizeof(float) : sizeof(uint16_t));
    return bytes <= 0.5 * (available_bytes() + held);
}

static void layer_matrices(const LayerWeights *w, WeightRef out[PACKED_PER_LAYER]) {
    out[PACKED_Q] = LAYER_WEIGHT(w, wq);
    out[PACKED_K] = LAYER_WEIGHT(w, wk);
    out[PACKED_V] = LAYER_WEIGHT(w, wv);
    out[PACKED_O] = LAYER_WEIGHT(w, wo);
    out[PACKED_GATE] = LAYER_WEIGHT(w, w_gate);
    out[PACKED_UP] = LAYER_WEIGHT(w, w_up);
    out[PACKED_DOWN] = LAYER_WEIGHT(w, w_down);
}

/* Bytes of the packed copy of an (out_dim, in_dim) matrix: a multiple of 64, so that the next
 * one starts on a cache line too. */
static size_t packed_bytes(bool bf16, int in_dim, int out_dim) {
    return bf16 ? packed_weight_bf16_count(in_dim, out_dim) * sizeof(uint16_t)
                : packed_weight_floats(in_dim, out_dim) * sizeof(float);
}

/* Packs w into dst, in its own precision; returns the bytes it took. */
static size_t pack_matrix(PackedWeight *p, char *dst, WeightRef w, int in_dim, int out_dim) {
    if (w.bf16)
        packed_weight_fill_bf16(p, (uint16_t *)(void *)dst, w.bf16, in_dim, out_dim);
    else
        packed_weight_fill(p, (float *)(void *)dst, w.f32, in_dim, out_dim);
    return packed_bytes(w.bf16 != NULL, in_dim, out_dim);
}

/* packed_model_build on AMX tiles: no block, each matrix the AMX form (packed_weight_amx). */
static void build_amx(PackedModel *p, const Model *m, const int dims[PACKED_PER_LAYER][2]) {
    const ModelConfig *c = &m->cfg;
    if (p->block || (p->layers && p->n_layers != c->n_layers)) packed_model_free(p);
    if (!p->layers) {
        *p = (PackedModel){.n_layers = c->n_layers};
        p->layers = xmalloc((size_t)c->n_layers * PACKED_PER_LAYER * sizeof *p->layers);
    }
    for (int l = 0; l < c->n_layers; l++) {
        WeightRef w[PACKED_PER_LAYER];
        layer_matrices(&m->layers[l], w);
        for (int i = 0; i < PACKED_PER_LAYER; i++)
            packed_weight_amx(&p->layers[l * PACKED_PER_LAYER + i], w[i], dims[i][0], dims[i][1]);
    }
    packed_weight_amx(&p->lm_head, model_lm_head(m), c->hidden_size, c->vocab_size);
}

int packed_model_build(PackedModel *p, const Model *m) {
    const ModelConfig *c = &m->cfg;
    int H = c->hidden_size, I = c->intermediate_size;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    /* (in_dim, out_dim) of each matrix */
    const int dims[PACKED_PER_LAYER][2] = {{H, qd}, {H, kvd}, {H, kvd}, {qd, H},
                                           {H, I},  {H, I},   {I, H}};
    if (packed_model_amx(m)) {
        build_amx(p, m, dims);
        return 0;
    }
    bool bf16 = m->params == NULL;
    if (bf16 && !packed_bf16_available())
        return err_set("packed weights: the model is kept in bf16 and this CPU (or build) has no "
                       "bf16 dot products");
    size_t bytes = packed_bytes(bf16, H, c->vocab_size);
    for (int i = 0; i < PACKED_PER_LAYER; i++)
        bytes += (size_t)c->n_layers * packed_bytes(bf16, dims[i][0], dims[i][1]);
    if ((p->block && (p->block_bytes != bytes || p->n_layers != c->n_layers)) ||
        (!p->block && p->layers)) /* sized for another shape, or an AMX one */
        packed_model_free(p);
    if (!p->block) {
        *p = (PackedModel){.block = xmalloc_huge(bytes, "packed weights"),
                           .block_bytes = bytes,
                           .n_layers = c->n_layers};
        if (!p->block) return -1;
        p->layers = xmalloc((size_t)c->n_layers * PACKED_PER_LAYER * sizeof *p->layers);
    }
    char *at = p->block;
    for (int l = 0; l < c->n_layers; l++) {
        WeightRef w[PACKED_PER_LAYER];
        layer_matrices(&m->layers[l], w);
        for (int i = 0; i < PACKED_PER_LAYER; i++)
            at +=
                pack_matrix(&p->layers[l * PACKED_PER_LAYER + i], at, w[i], dims[i][0], dims[i][1]);
    }
    pack_matrix(&p->lm_head, at, model_lm_head(m), H, c->vocab_size);
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
