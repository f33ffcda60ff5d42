/* dist.h in a build without MPI: always one process, so every collective leaves its data as it
 * is (the sum over one rank is the rank's own value). Started as one of several ranks by an MPI
 * launcher, it refuses to run rather than have N independent copies write one output_dir. */
#include "dist/dist.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

int dist_init(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = getenv("PMI_SIZE");
    if (size && atoi(size) > 1)
        return err_set("started as one of %s processes, but this rlhf was built without MPI "
                       "(RLHF_MPI=OFF, or MPI was not found): install libopenmpi-dev and rebuild",
                       size);
    return 0;
}

void dist_finalize(void) {}

int dist_rank(void) {
    return 0;
}

int dist_size(void) {
    return 1;
}

int dist_local_rank(void) {
    return 0;
}

bool dist_compiled(void) {
    return false;
}

const char *dist_launcher(void) {
    return NULL;
}

bool dist_launcher_is_open_mpi(void) {
    return false;
}

void dist_allreduce_sum_f32(float *buf, size_t n) {
    (void)buf, (void)n;
}

void dist_allreduce_sum_f64(double *buf, size_t n) {
    (void)buf, (void)n;
}

int dist_allreduce_min_int(int v) {
    return v;
}

int dist_allreduce_max_int(int v) {
    return v;
}

void dist_bcast(void *buf, size_t bytes, int root) {
    (void)buf, (void)bytes, (void)root;
}

void dist_gather_bytes(const void *send, size_t len, void *recv) {
    memcpy(recv, send, len);
}

void dist_allgatherv_bytes(const void *send, size_t len, void **out, size_t *out_len,
                           size_t *lens) {
    *out = xmalloc(len ? len : 1);
    if (len) memcpy(*out, send, len);
    *out_len = len;
    if (lens) lens[0] = len;
}

int dist_shards_init(DistShards *s, size_t n) {
    s->n = n;
    s->world = 1;
    s->offset = xmalloc(2 * sizeof *s->offset);
    s->offset[0] = 0;
    s->offset[1] = n;
    return 0;
}

void dist_shards_free(DistShards *s) {
    free(s->offset);
    memset(s, 0, sizeof *s);
}

void dist_reduce_scatter_sum_f32(float *buf, const DistShards *s) {
    (void)buf, (void)s;
}

void dist_allgather_f32(float *buf, const DistShards *s) {
    (void)buf, (void)s;
}

void dist_gather_f32(const float *part, float *full, const DistShards *s) {
    memcpy(full, part, s->n * sizeof *part);
}

void dist_scatter_f32(const float *full, float *part, const DistShards *s) {
    memcpy(part, full, s->n * sizeof *part);
}

_Noreturn void dist_abort(int status) {
    exit(status);
}
