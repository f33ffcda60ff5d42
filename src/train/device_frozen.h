/* A frozen base under an adapter (model_load_frozen: QLoRA's, with NF4 layer matrices, or
 * bf16: true's, with bf16 ones; either with the embedding and an untied lm_head in bf16, norms
 * and biases in fp32) moved into a device backend's memory for a training loop (issue 29),
 * beside device_residency.h's adapter, gradients and moments. Nothing is widened: the device
 * holds what the CPU holds, and its autocast products read the bf16 matrices as they are (an
 * NF4 one dequantised to bf16 per product: backend_cuda.h invariants 6 and 7).
 *
 * Invariants:
 *  1. Every tensor the forward and backward read is copied once, tensor by tensor (the blocks'
 *     sizes are not kept by the model, and model_load_frozen's layout is compact): the NF4
 *     matrices as device copies (nf4_backend.h, one Nf4Weight per matrix in an array of this
 *     struct's own), each bf16 layer matrix, the bf16 embedding / lm_head (one copy when tied;
 *     an embedding left in its file is read through the mapping, whose pages are then given
 *     back) and every fp32 norm and bias.
 *  2. frozen_residency_point moves the model's pointers between the host tensors and their
 *     device copies; nothing is copied back (nothing writes a frozen tensor).
 *  3. _leave points the model at its host tensors and frees the copies. */
#ifndef RLHF_TRAIN_DEVICE_FROZEN_H
#define RLHF_TRAIN_DEVICE_FROZEN_H

#include "kernels/backend.h"
#include "model/model.h"

#include <stdbool.h>

typedef struct {
    void **slot;      /* the model's pointer */
    void *host, *dev; /* what it points at on either side */
    bool owned;       /* dev is this entry's own copy (not a tied one's) */
} FrozenTensor;

typedef struct {
    const Backend *be;
    Model *m;
    FrozenTensor *t;
    int n;
    struct Nf4Weight *dev_nf4; /* one per m->nf4 matrix */
    size_t n_nf4;
} FrozenResidency;

/* Whether m is a frozen base (bf16 or NF4) this module moves. */
bool frozen_residency_applies(const Model *m);

/* Copies m's frozen tensors into be (invariant 1) and points m at them. Returns 0, or -1 with an
 * error (out of device memory; nothing is then held and m is unchanged). */
int frozen_residency_enter(FrozenResidency *f, Model *m, const Backend *be);

/* Invariant 2: device true points m at the copies, false at the host tensors. */
void frozen_residency_point(FrozenResidency *f, bool device);

/* Invariant 3; an empty f is ignored. */
void frozen_residency_leave(FrozenResidency *f);

#endif
