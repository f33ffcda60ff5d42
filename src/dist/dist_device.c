#include "dist/dist_device.h"

#include <stdio.h>

const DistDeviceComm dist_mpi_comm = {
    .name = "MPI",
    .allreduce_sum_f32 = dist_allreduce_sum_f32,
    .reduce_scatter_sum_f32 = dist_reduce_scatter_sum_f32,
    .allgather_f32 = dist_allgather_f32,
    .close = NULL,
};

/* Invariant 2: the one device backend of this process and its comm. */
static const Backend *attached_be;
static const DistDeviceComm *attached;

void dist_device_attach(const Backend *be, const DistDeviceComm *comm) {
    if (attached && attached->close) attached->close();
    attached_be = comm ? be : NULL;
    attached = comm;
}

/* The comm that moves be's memory (invariants 2 and 3). */
static const DistDeviceComm *comm_for(const Backend *be, const char *what) {
    if (be->host_memory) return &dist_mpi_comm;
    if (attached && attached_be == be) return attached;
    fprintf(stderr,
            "rlhf: error: rank %d: %s over %d ranks on the %s backend, which has no collective "
            "attached (a set-up bug: train_device_open should have refused several ranks)\n",
            dist_rank(), what, dist_size(), be->name);
    dist_abort(1);
}

void dist_allreduce_sum_f32_on(const Backend *be, float *buf, size_t n) {
    if (dist_size() == 1) return;
    comm_for(be, "an all-reduce")->allreduce_sum_f32(buf, n);
}

void dist_reduce_scatter_sum_f32_on(const Backend *be, float *buf, const DistShards *s) {
    if (dist_size() == 1) return;
    comm_for(be, "a reduce-scatter")->reduce_scatter_sum_f32(buf, s);
}

void dist_allgather_f32_on(const Backend *be, float *buf, const DistShards *s) {
    if (dist_size() == 1) return;
    comm_for(be, "an all-gather")->allgather_f32(buf, s);
    /* invariant 4: the other ranks' slices (ZeRO-1's updated weights) are new here */
    if (be->written) be->written(be, buf, s->n * sizeof *buf);
}
