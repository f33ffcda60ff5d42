/* dist.h over MPI (built when CMake finds MPI; dist_single.c otherwise). Only the thread that
 * called dist_init calls MPI (MPI_THREAD_FUNNELED): OpenMP threads never do. Errors inside MPI
 * stay fatal (MPI_ERRORS_ARE_FATAL): a broken transport or a dead peer ends the job with MPI's
 * message rather than returning codes nobody could act on. */
#include "dist/dist.h"

#include "common/error.h"

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank = 0, world_size = 1, local_rank = 0;
static bool joined;

/* Set by the launchers we know of: Open MPI, MPICH/Hydra and PMIx-based ones (Slurm's srun). */
static bool launched_by_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

int dist_init(void) {
    if (joined || !launched_by_mpi()) return 0;
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    joined = true;
    return 0;
}

void dist_finalize(void) {
    if (!joined) return;
    MPI_Finalize();
    joined = false;
    world_rank = 0, world_size = 1, local_rank = 0;
}

int dist_rank(void) {
    return world_rank;
}

int dist_size(void) {
    return world_size;
}

int dist_local_rank(void) {
    return local_rank;
}

bool dist_compiled(void) {
    return true;
}

const char *dist_launcher(void) {
    return RLHF_MPIEXEC;
}

bool dist_launcher_is_open_mpi(void) {
#ifdef OMPI_MAJOR_VERSION
    return true;
#else
    return false;
#endif
}

/* MPI counts are int: long arrays go in pieces of this many elements. */
#define CHUNK ((size_t)1 << 30)

void dist_allreduce_sum_f32(float *buf, size_t n) {
    if (world_size == 1) return;
    for (size_t i = 0; i < n; i += CHUNK) {
        int count = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_Allreduce(MPI_IN_PLACE, buf + i, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
}

void dist_allreduce_sum_f64(double *buf, size_t n) {
    if (world_size == 1) return;
    for (size_t i = 0; i < n; i += CHUNK) {
        int count = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_Allreduce(MPI_IN_PLACE, buf + i, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
}

int dist_allreduce_min_int(int v) {
    if (world_size > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v;
}

int dist_allreduce_max_int(int v) {
    if (world_size > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return v;
}

void dist_bcast(void *buf, size_t bytes, int root) {
    if (world_size == 1) return;
    for (size_t i = 0; i < bytes; i += CHUNK) {
        int count = (int)(bytes - i < CHUNK ? bytes - i : CHUNK);
        MPI_Bcast((char *)buf + i, count, MPI_BYTE, root, MPI_COMM_WORLD);
    }
}

void dist_gather_bytes(const void *send, size_t len, void *recv) {
    if (world_size == 1) {
        memcpy(recv, send, len);
        return;
    }
    if (len > INT_MAX) {
        fprintf(stderr, "rlhf: error: rank %d: a gather of %zu bytes exceeds MPI's counts\n",
                world_rank, len);
        dist_abort(1);
    }
    MPI_Gather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void dist_allgatherv_bytes(const void *send, size_t len, void **out, size_t *out_len,
                           size_t *lens) {
    if (world_size == 1) {
        *out = xmalloc(len ? len : 1);
        if (len) memcpy(*out, send, len);
        *out_len = len;
        if (lens) lens[0] = len;
        return;
    }
    uint64_t mine = len, *all = xmalloc((size_t)world_size * sizeof *all);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int *counts = xmalloc(2 * (size_t)world_size * sizeof *counts), *displs = counts + world_size;
    uint64_t total = 0;
    for (int r = 0; r < world_size; r++) {
        /* every rank sees the same lengths, so all of them take this exit together */
        if (total + all[r] > INT_MAX) {
            fprintf(stderr,
                    "rlhf: error: rank %d: an all-gather of more than %d bytes exceeds "
                    "MPI's counts\n",
                    world_rank, INT_MAX);
            dist_abort(1);
        }
        counts[r] = (int)all[r], displs[r] = (int)total;
        total += all[r];
        if (lens) lens[r] = (size_t)all[r];
    }
    *out = xmalloc(total ? (size_t)total : 1);
    MPI_Allgatherv(send, (int)len, MPI_BYTE, *out, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
    *out_len = (size_t)total;
    free(counts);
    free(all);
}

int dist_shards_init(DistShards *s, size_t n) {
    s->n = n;
    s->world = world_size;
    s->offset = xmalloc(((size_t)world_size + 1) * sizeof *s->offset);
    for (int r = 0; r <= world_size; r++)
        s->offset[r] = n / (size_t)world_size * (size_t)r +
                       ((size_t)r < n % (size_t)world_size ? (size_t)r : n % (size_t)world_size);
    if (world_size > 1 && s->offset[1] > INT_MAX) {
        size_t slice = s->offset[1];
        dist_shards_free(s);
        return err_set("zero_stage 1: a slice of %zu parameters per rank is more than MPI's "
                       "counts allow (2^31-1); run with more ranks",
                       slice);
    }
    return 0;
}

void dist_shards_free(DistShards *s) {
    free(s->offset);
    memset(s, 0, sizeof *s);
}

/* The per-rank counts and displacements of a sharding, as MPI's v-collectives take them. */
static void counts_of(const DistShards *s, int *counts, int *displs) {
    for (int r = 0; r < s->world; r++) {
        counts[r] = (int)(s->offset[r + 1] - s->offset[r]);
        if (displs) displs[r] = (int)s->offset[r];
    }
}

/* Displacements are ints as well: beyond INT_MAX elements the v-collectives cannot address the
 * array, so those go slice by slice (a reduce or broadcast rooted at each slice's owner). */
static bool fits_displacements(const DistShards *s) {
    return s->n <= INT_MAX;
}

void dist_reduce_scatter_sum_f32(float *buf, const DistShards *s) {
    if (world_size == 1) return;
    if (fits_displacements(s)) {
        int *counts = xmalloc((size_t)world_size * sizeof *counts);
        counts_of(s, counts, NULL);
        /* in place: the full array in, this rank's slice out at the array's start */
        MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        size_t lo = s->offset[world_rank];
        if (lo) memmove(buf + lo, buf, (size_t)counts[world_rank] * sizeof *buf);
        free(counts);
        return;
    }
    for (int r = 0; r < world_size; r++) {
        size_t lo = s->offset[r], count = s->offset[r + 1] - lo;
        for (size_t i = 0; i < count; i += CHUNK) {
            int c = (int)(count - i < CHUNK ? count - i : CHUNK);
            float *p = buf + lo + i;
            MPI_Reduce(r == world_rank ? MPI_IN_PLACE : p, p, c, MPI_FLOAT, MPI_SUM, r,
                       MPI_COMM_WORLD);
        }
    }
}

void dist_allgather_f32(float *buf, const DistShards *s) {
    if (world_size == 1) return;
    if (fits_displacements(s)) {
        int *counts = xmalloc(2 * (size_t)world_size * sizeof *counts);
        counts_of(s, counts, counts + world_size);
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, counts + world_size,
                       MPI_FLOAT, MPI_COMM_WORLD);
        free(counts);
        return;
    }
    for (int r = 0; r < world_size; r++)
        dist_bcast(buf + s->offset[r], (s->offset[r + 1] - s->offset[r]) * sizeof *buf, r);
}

void dist_gather_f32(const float *part, float *full, const DistShards *s) {
    size_t own = s->offset[world_rank + 1] - s->offset[world_rank];
    if (world_size == 1) {
        memcpy(full, part, own * sizeof *part);
        return;
    }
    if (fits_displacements(s)) {
        int *counts = xmalloc(2 * (size_t)world_size * sizeof *counts);
        counts_of(s, counts, counts + world_size);
        MPI_Gatherv(part, (int)own, MPI_FLOAT, full, counts, counts + world_size, MPI_FLOAT, 0,
                    MPI_COMM_WORLD);
        free(counts);
        return;
    }
    for (int r = 0; r < world_size; r++) {
        size_t count = s->offset[r + 1] - s->offset[r];
        if (r == 0 && world_rank == 0) memcpy(full, part, count * sizeof *part);
        for (size_t i = 0; r > 0 && i < count; i += CHUNK) {
            int c = (int)(count - i < CHUNK ? count - i : CHUNK);
            if (world_rank == r)
                MPI_Send(part + i, c, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
            else if (world_rank == 0)
                MPI_Recv(full + s->offset[r] + i, c, MPI_FLOAT, r, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
        }
    }
}

void dist_scatter_f32(const float *full, float *part, const DistShards *s) {
    size_t own = s->offset[world_rank + 1] - s->offset[world_rank];
    if (world_size == 1) {
        memcpy(part, full, own * sizeof *part);
        return;
    }
    if (fits_displacements(s)) {
        int *counts = xmalloc(2 * (size_t)world_size * sizeof *counts);
        counts_of(s, counts, counts + world_size);
        MPI_Scatterv(full, counts, counts + world_size, MPI_FLOAT, part, (int)own, MPI_FLOAT, 0,
                     MPI_COMM_WORLD);
        free(counts);
        return;
    }
    for (int r = 0; r < world_size; r++) {
        size_t count = s->offset[r + 1] - s->offset[r];
        if (r == 0 && world_rank == 0) memcpy(part, full, count * sizeof *part);
        for (size_t i = 0; r > 0 && i < count; i += CHUNK) {
            int c = (int)(count - i < CHUNK ? count - i : CHUNK);
            if (world_rank == 0)
                MPI_Send(full + s->offset[r] + i, c, MPI_FLOAT, r, 0, MPI_COMM_WORLD);
            else if (world_rank == r)
                MPI_Recv(part + i, c, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
}

_Noreturn void dist_abort(int status) {
    fflush(NULL);
    if (joined) MPI_Abort(MPI_COMM_WORLD, status);
    exit(status);
}
