/* A model's matrices copied into the packed layout (kernels: packed_matmul_forward) for one
 * generate() call that decodes several sequences together: each decode step then multiplies
 * its rows by weights laid out once, instead of BLAS laying them out again at every product.
 * Costs a second copy of the weights while it lives: fp32, or bf16 for a model kept in bf16
 * where the CPU has bf16 dot products (packed_bf16_available), whose products then round their
 * inputs to bf16 as well. With AMX, bf16 products use gemm_bf16's cached packing instead
 * (packed_model_amx). */
#ifndef RLHF_MODEL_PACKED_MODEL_H
#define RLHF_MODEL_PACKED_MODEL_H

#include "kernels/cpu/kernels.h"
#include "model/model.h"

#include <stdbool.h>

/* The matrices of a layer, in the order of its forward. */
typedef enum {
    PACKED_Q,
    PACKED_K,
    PACKED_V,
    PACKED_O,
    PACKED_GATE,
    PACKED_UP,
    PACKED_DOWN,
    PACKED_PER_LAYER
} PackedMatrix;

/* Zero-initialise before the first packed_model_build. */
typedef struct PackedModel {
    void *block;        /* every packed matrix, one allocation: floats, or bf16 values */
    size_t block_bytes; /* its size */
    int n_layers;
    PackedWeight *layers; /* [n_layers * PACKED_PER_LAYER] */
    PackedWeight lm_head;
} PackedModel;

/* Whether m's packed form is the AMX one (kernels.h, packed_weight_amx): m's products are bf16
 * products (weights kept in bf16, or fp32 ones under bf16 autocast) and gemm_bf16 runs on AMX
 * tiles here (packed_amx_available). Its PackedModel then holds no copy of the weights: each
 * matrix's products read the packing gemm_bf16's cache keeps (made once per optimizer step for
 * fp32 weights, once per model for bf16 ones). NF4 weights are never packed. */
bool packed_model_amx(const Model *m);

/* Whether packing m pays for a generate() call that decodes `rows` rows per step over `steps`
 * steps after prefilling `prefill_rows` prompt tokens in all: the weights are fp32, or bf16 with
 * the CPU's bf16 dot products (without them a model kept in bf16 is kept so to save memory), and
 * either the packed product suits that many decode rows
 * and there are enough steps to repay the copy, or it suits the prefill's products and they are
 * large enough to repay it alone. */
bool packed_model_worth(const Model *m, int rows, int steps, long prefill_rows);

/* Whether the copy may have its memory: at most half of what is available now (MemAvailable:
 * free pages and the page cache the kernel would drop), counting what `store`
 * (NULL or empty: none) holds already as free. Asked at every generate() call, so that a kept
 * store is given back once training has grown into the memory (GRPO allocates its training
 * buffers after the first generation). */
bool packed_model_fits(const Model *m, const PackedModel *store);

/* Packs m's matrices into p. A p packed before for a model of the same shape is refilled in
 * the memory it has: keeping one PackedModel for many generate() calls (GRPO's steps) saves
 * mapping the copy again each time, which on VMs that hand freed memory back to the host costs
 * seconds per GB. Returns 0, or -1 with an error (out of memory; p is then empty). */
int packed_model_build(PackedModel *p, const Model *m);
void packed_model_free(PackedModel *p);

/* Layer l's matrix `which`, or NULL when p is NULL. */
const PackedWeight *packed_model_matrix(const PackedModel *p, int l, PackedMatrix which);

#endif
