#include "dist/dist_nccl.h"

#include "common/error.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static ncclComm_t comm; /* NULL when closed */

/* Invariant 4. */
static void check(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return;
    fprintf(stderr, "rlhf: error: rank %d: NCCL %s failed: %s\n", dist_rank(), what,
            ncclGetErrorString(r));
    dist_abort(1);
}

static void allreduce_sum_f32(float *buf, size_t n) {
    check(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, 0), "all-reduce");
}

static void reduce_scatter_sum_f32(float *buf, const DistShards *s) {
    check(ncclGroupStart(), "group start");
    for (int r = 0; r < s->world; r++) {
        float *p = buf + s->offset[r];
        check(ncclReduce(p, p, s->offset[r + 1] - s->offset[r], ncclFloat32, ncclSum, r, comm, 0),
              "reduce");
    }
    check(ncclGroupEnd(), "reduce-scatter");
}

static void allgather_f32(float *buf, const DistShards *s) {
    check(ncclGroupStart(), "group start");
    for (int r = 0; r < s->world; r++) {
        float *p = buf + s->offset[r];
        check(ncclBroadcast(p, p, s->offset[r + 1] - s->offset[r], ncclFloat32, r, comm, 0),
              "broadcast");
    }
    check(ncclGroupEnd(), "all-gather");
}

static void close_comm(void) {
    if (comm) ncclCommDestroy(comm);
    comm = NULL;
}

static const DistDeviceComm nccl = {
    .name = "NCCL",
    .allreduce_sum_f32 = allreduce_sum_f32,
    .reduce_scatter_sum_f32 = reduce_scatter_sum_f32,
    .allgather_f32 = allgather_f32,
    .close = close_comm,
};

/* Invariant 2's agreement: 0 when rc is 0 on every rank, else -1 on all, a rank that failed
 * keeping its own error and the others naming the first that did. */
static int agree(int rc) {
    int first = dist_allreduce_min_int(rc != 0 ? dist_rank() : dist_size());
    if (first == dist_size()) return 0;
    if (rc == 0) err_set("rank %d could not open NCCL", first);
    return -1;
}

const DistDeviceComm *dist_nccl_open(void) {
    int devices = 0, local = dist_local_rank(), rc = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess)
        rc = err_set("rank %d: no CUDA device answers (%s)", dist_rank(), cudaGetErrorString(e));
    else if (local >= devices)
        rc = err_set("rank %d is rank %d of its machine, which has %d GPU(s): one rank per GPU "
                     "(--nproc at most %d per machine)",
                     dist_rank(), local, devices, devices);
    else if ((e = cudaSetDevice(local)) != cudaSuccess)
        rc = err_set("rank %d: cudaSetDevice(%d): %s", dist_rank(), local, cudaGetErrorString(e));
    if (agree(rc) != 0) return NULL;
    /* rank 0's id and whether it got one, in one broadcast */
    struct {
        int rc;
        ncclUniqueId id;
    } hello;
    memset(&hello, 0, sizeof hello);
    if (dist_is_root()) {
        ncclResult_t r = ncclGetUniqueId(&hello.id);
        if (r != ncclSuccess) hello.rc = err_set("ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    dist_bcast(&hello, sizeof hello, 0);
    if (hello.rc != 0) {
        if (!dist_is_root()) err_set("rank 0 could not make NCCL's unique id");
        return NULL;
    }
    ncclResult_t r = ncclCommInitRank(&comm, dist_size(), hello.id, dist_rank());
    if (r != ncclSuccess) {
        comm = NULL;
        rc = err_set("rank %d: ncclCommInitRank: %s", dist_rank(), ncclGetErrorString(r));
    }
    if (agree(rc) != 0) {
        close_comm();
        return NULL;
    }
    return &nccl;
}
