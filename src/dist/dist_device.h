/* The per-step collectives of dist.h on buffers in a device backend's memory (issue 29): the
 * gradients summed over ranks (or reduce-scattered, ZeRO-1) and the ZeRO-1 slices of the weights
 * gathered back, where the trainer keeps them on the device (train/device_residency.h).
 *
 * A DistDeviceComm moves a backend's memory between ranks. For memory the host can address
 * (the CPU backend, and cuda-emu, whose device memory is host memory) it is dist.h's own MPI
 * collectives (dist_mpi_comm); on a GPU it is NCCL (dist_nccl.h, CUDA builds that found it).
 * Everything else that crosses ranks (losses, token counts, checkpoints, which are read through
 * the host view) stays with dist.h.
 *
 * Invariants:
 *  1. The collectives below keep dist.h's contract (invariants 1 and 2 there: every rank, same
 *     order and sizes; the same result bytes on every rank) and its semantics, call for call.
 *  2. A backend whose host_memory is true always goes through dist.h; any other goes through the
 *     comm attached to it, and at most one is attached in a process (one device per rank).
 *  3. A collective on a device backend with no comm attached is a bug in the caller's set-up
 *     (train_device_open refuses several ranks without one): it ends the job (dist_abort) with
 *     a message rather than summing nothing.
 *  4. What a collective writes outside the rank's own slice is reported to the backend
 *     (be->written) once it is there: the all-gather writes weights, and a backend that keeps
 *     bf16 copies of them (CUDA under bf16 autocast) would otherwise multiply the copies it
 *     narrowed before the other ranks' AdamW updates. (The sums write gradients, of which no
 *     backend keeps copies.) */
#ifndef RLHF_DIST_DIST_DEVICE_H
#define RLHF_DIST_DIST_DEVICE_H

#include "dist/dist.h"
#include "kernels/backend.h"

typedef struct DistDeviceComm {
    const char *name; /* for messages: "MPI", "NCCL" */
    /* dist.h's functions of the same names, on device memory (invariant 1). */
    void (*allreduce_sum_f32)(float *buf, size_t n);
    void (*reduce_scatter_sum_f32)(float *buf, const DistShards *s);
    void (*allgather_f32)(float *buf, const DistShards *s);
    /* Releases what opening it made (NULL: nothing). Every rank calls it. */
    void (*close)(void);
} DistDeviceComm;

/* dist.h's MPI collectives as a comm: for backends whose device memory the host can address. */
extern const DistDeviceComm dist_mpi_comm;

/* Attaches comm (static storage) to be's memory (invariant 2); NULL detaches, closing the comm
 * that was attached. */
void dist_device_attach(const Backend *be, const DistDeviceComm *comm);

/* dist.h's collectives of the same names on be's memory (invariants 1-4). */
void dist_allreduce_sum_f32_on(const Backend *be, float *buf, size_t n);
void dist_reduce_scatter_sum_f32_on(const Backend *be, float *buf, const DistShards *s);
void dist_allgather_f32_on(const Backend *be, float *buf, const DistShards *s);

#endif
