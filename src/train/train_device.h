/* Where `rlhf train` computes (the `device` key, issue 29): the CPU backend, or a device
 * backend (kernels/backend.h) that keeps the model's weights, the gradients and AdamW's moments
 * in its own memory for the whole loop (train/device_residency.h).
 *
 * rlhf_core does not link the CUDA libraries (they link it): the program registers what its
 * build has (cli/train_devices.c: the CUDA backend with RLHF_WITH_CUDA, else cuda-emu), and a
 * value this build lacks is an error naming the key.
 *
 * Invariants:
 *  1. device: cuda (or cuda-emu) either gets that backend or the run stops with an error naming
 *     the key and why, before anything is loaded or written; it never falls back.
 *  2. device: auto (the default, as HF's Trainer uses the GPU when there is one) gets cuda when
 *     it is registered, answers, and supports the run; else the CPU. One line on the log says
 *     why when a device answers but the run needs what it lacks; when the build has no CUDA or
 *     no device answers, the line comes only if the key was written (a CUDA build on a machine
 *     without a GPU trains on the CPU as quietly as a CPU build).
 *  3. What the CUDA backend lacks (8-bit AdamW, bf16 with GRPO or several ranks, several ranks
 *     without a collective; for GRPO whatever reads
 *     or writes the policy's weights on the host: the replay buffer, a rollout function, server
 *     mode, sync_ref_model) is never silently dropped: under cuda it is an error naming the key,
 *     under auto the reason for the CPU. GRPO itself runs: its generation decodes with the
 *     device's weights, its rewards are scored on the host.
 *  4. Several ranks train on the device only with the provider's collective (NCCL on a GPU, MPI
 *     on cuda-emu's host-addressable memory), attached to the backend (dist_device_attach) until
 *     train_device_close. Every rank ends on the same choice: an open that fails on any rank
 *     fails (or, under auto, falls back to the CPU) on all of them.
 *  5. bf16: true (or auto resolved true, as on the CPU: config/train_config_keys.c) opens the
 *     provider's autocast backend (backend_cuda.h invariant 6), which the policy and the frozen
 *     reference (kept in bf16) then compute on, exactly where a CPU run uses
 *     backend_cpu_autocast; without bf16 the fp32 backend. With an adapter the base is the
 *     CPU's frozen one (bf16, or NF4 under load_in_4bit), moved to the device as it is
 *     (device_frozen.h): no fp32 copy of it exists on either side. */
#ifndef RLHF_TRAIN_TRAIN_DEVICE_H
#define RLHF_TRAIN_TRAIN_DEVICE_H

#include "config/train_config.h"
#include "kernels/backend.h"

#include <stdio.h>

/* A device backend a program can compute on: the value of `device` it answers to and its
 * constructor / destructor (backend_cuda.h's). */
typedef struct {
    const char *name;                 /* "cuda" or "cuda-emu" */
    Backend *(*open)(void);           /* NULL with an error naming why (no device) */
    Backend *(*open_bf16)(void);      /* the same under bf16 autocast (invariant 4) */
    void (*close)(Backend *be);       /* frees what open returned */
    int (*status)(const Backend *be); /* 0, or -1 with the first failed op's error */
    /* Several ranks (invariant 4): the collectives on this device's memory
     * (dist/dist_device.h), opened by every rank before `open`, since opening may choose the
     * rank's device (one rank per GPU). NULL with an error, the failure agreed by all ranks.
     * A NULL member: this build has none for the device, and no_dist says why. */
    const struct DistDeviceComm *(*dist_open)(void);
    const char *no_dist;
    /* the high-water marks of the device memory be has held since open, in bytes: in use (as
     * torch.cuda.max_memory_allocated counts) and reserved from the device (max_memory_reserved) */
    void (*peak_memory)(const Backend *be, size_t *in_use, size_t *reserved);
} TrainDeviceProvider;

/* Makes p (static storage) available to `device: <p->name>`. Called by the program before
 * training (at most a few kinds; a second registration of a name replaces the first). */
void train_device_register(const TrainDeviceProvider *p);

/* Registers the device backend linked into this program: the CUDA backend where the build has
 * nvcc, else cuda-emu. Defined outside rlhf_core, in cli/train_devices.c, which the rlhf
 * program, the shared library (CUDA builds) and the device tests compile in; idempotent. */
void train_device_register_linked(void);

/* The backend a run computes on. */
typedef struct TrainDevice {
    const TrainDeviceProvider *provider; /* NULL: the CPU */
    Backend *be;                         /* provider's backend, or NULL */
} TrainDevice;

/* Resolves cfg->device (invariants 1-3) into *d; one line on `log` says where training
 * computes when it is not the CPU or when auto fell back with a reason. Returns 0, or -1 with
 * an error naming cfg->source and the key. */
int train_device_open(TrainDevice *d, const TrainConfig *cfg, FILE *log);

/* Frees the backend (nothing may still be allocated on it). */
void train_device_close(TrainDevice *d);

/* One line on log with the device's peak memory (TrainDeviceProvider.peak_memory); nothing when
 * training on the CPU. */
void train_device_report_memory(const TrainDevice *d, FILE *log);

/* 0, or -1 with the device backend's first failure (an op that failed inside a step): called
 * after each step and before anything is saved, so a failed kernel is an error, not garbage. */
int train_device_status(const TrainDevice *d);

#endif
