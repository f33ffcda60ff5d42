/* A Trainer's state in a device backend's memory for the length of a training loop (issue 29):
 * the model's weights (the whole model: with an adapter the frozen base too), the adapter's, the
 * gradients and AdamW's fp32 moments are copied up once when the loop starts, every step then
 * runs on the backend, and host code that reads them (a checkpoint's writer, the final save)
 * sees them through a host view.
 *
 * Invariants:
 *  1. Between device_residency_enter and _leave, model->params, lora->params, tr->params,
 *     tr->grads and every SpanMoments m/v point into backend memory, and model->backend is the
 *     device backend; the host arrays they pointed into before are kept, unchanged, as the
 *     host views' storage.
 *  2. device_residency_to_host copies the weights and the moments down into those host arrays
 *     and points everything back at them (the gradients stay on the device: nothing on the host
 *     reads them between steps); device_residency_to_device points everything at the device
 *     copies again without copying (the host view is read-only for its callers).
 *  3. _leave is _to_host, then the device memory freed: after it the Trainer and the model are
 *     as a CPU run leaves them, so the session saves, merges and trains again unchanged.
 *  4. Only fp32 weights, or a frozen bf16 or NF4 base under an adapter (device_frozen.h: its
 *     tensors copied once, pointers moved with the rest), and fp32 moments (no 8-bit AdamW):
 *     train_device_open refuses the rest before anything is loaded. Over several ranks with
 *     ZeRO-1 the moments are this rank's slice (AdamW's n), and the gradients and weights are
 *     summed and gathered on the device (dist/dist_device.h). */
#ifndef RLHF_TRAIN_DEVICE_RESIDENCY_H
#define RLHF_TRAIN_DEVICE_RESIDENCY_H

#include "train/device_frozen.h"
#include "train/trainer.h"

#include <stdbool.h>

struct DeviceResidency {
    const Backend *be;
    Trainer *tr;
    const Backend *was_backend; /* model->backend before enter */
    float *host_model, *host_lora, *host_grads;
    float *dev_model, *dev_lora, *dev_grads, *dev_moments; /* dev_moments: m then v, n each */
    bool host_view;                                        /* between _to_host and _to_device */
    FrozenResidency frozen; /* a frozen base's bf16 / NF4 tensors (device_frozen.h), or empty */
};

/* Moves tr's model, adapter, gradients and moments into be's memory (invariant 1) and sets
 * tr->resident = r. Returns 0, or -1 with an error (nothing moved: out of device memory, or an
 * optimizer state the backend cannot step). */
int device_residency_enter(DeviceResidency *r, Trainer *tr, const Backend *be);

/* The host view (invariant 2). Idempotent. */
void device_residency_to_host(DeviceResidency *r);

/* Back to the device copies (invariant 2). Idempotent. */
void device_residency_to_device(DeviceResidency *r);

/* Invariant 3; tr->resident becomes NULL. NULL or a residency never entered is ignored. */
void device_residency_leave(DeviceResidency *r);

#endif
