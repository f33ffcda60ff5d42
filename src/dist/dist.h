/* Data-parallel processes: the ranks of one training job and the collectives they share.
 *
 * rlhf.c trains on several processes through MPI (Open MPI from Debian): `mpirun -np N rlhf
 * train ...`, or `rlhf train --nproc N ...` which runs that mpirun (dist_launch.h). Each rank
 * holds a whole copy of the model, computes the gradients of its share of every global batch,
 * and the ranks sum them (or, with ZeRO-1, each keeps and updates one slice of the optimizer
 * state). This interface is what the trainer speaks to; dist_mpi.c implements it over MPI and
 * dist_single.c, in a build without MPI, as the one-process case (every collective a no-op), so
 * that the training code has one path for both.
 *
 * Invariants:
 *  1. Every collective is called by every rank, in the same order, with the same sizes. A rank
 *     that cannot go on must still reach the next agreement point (dist_agree) with its failure,
 *     or end the whole job (dist_abort): it must never leave the others waiting.
 *  2. A collective's result is the same bytes on every rank, so the replicas of the model that
 *     the ranks hold stay bitwise identical step after step.
 *  3. Rank 0 ("root") alone writes files (checkpoints, metrics.jsonl, the final model) and the
 *     log; the others read nothing a rank 0 wrote during the run.
 *
 * MPI is initialised only when the process was started by an MPI launcher (its environment says
 * so); a plain `rlhf train` never touches MPI, even in a build with it. */
#ifndef RLHF_DIST_DIST_H
#define RLHF_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* Joins the job when an MPI launcher started this process, else stays a single process.
 * Returns 0, or -1 with an error: launched as one of several ranks by a build without MPI. */
int dist_init(void);

/* Leaves the job (MPI_Finalize) when dist_init joined one. Every rank must call it. */
void dist_finalize(void);

int dist_rank(void); /* 0 .. dist_size()-1; 0 in a single process */
int dist_size(void); /* 1 in a single process */
/* This rank's number among the ranks on its own machine (MPI's shared-memory split, found at
 * dist_init): what picks its GPU, one rank per GPU. 0 in a single process. */
int dist_local_rank(void);

static inline bool dist_is_root(void) {
    return dist_rank() == 0;
}

/* Whether this build has MPI, and the launcher it was built against ("mpiexec" path), or NULL. */
bool dist_compiled(void);
const char *dist_launcher(void);
/* Whether the launcher is Open MPI's (its options --oversubscribe, --allow-run-as-root). */
bool dist_launcher_is_open_mpi(void);

/* ---- collectives (invariant 1: all ranks, same order, same sizes) ---- */

/* In place: buf becomes the element-wise sum over ranks. */
void dist_allreduce_sum_f32(float *buf, size_t n);
void dist_allreduce_sum_f64(double *buf, size_t n);
/* The minimum / maximum of v over ranks. */
int dist_allreduce_min_int(int v);
int dist_allreduce_max_int(int v);

/* root's `bytes` bytes of buf, copied into every rank's buf. */
void dist_bcast(void *buf, size_t bytes, int root);

/* Gathers `len` bytes from every rank into recv on root (dist_size() * len bytes, rank order);
 * recv is not read elsewhere (may be NULL there). */
void dist_gather_bytes(const void *send, size_t len, void *recv);

/* Every rank's `len` bytes (the lengths may differ between ranks), concatenated in rank order,
 * on every rank: *out is malloc'd (never NULL; the caller frees it) and *out_len is the total.
 * lens, when not NULL, receives each rank's length (dist_size() entries). More than 2^31-1 bytes
 * in all ends the job (MPI's int displacements). */
void dist_allgatherv_bytes(const void *send, size_t len, void **out, size_t *out_len, size_t *lens);

/* A flat array of n elements cut into dist_size() contiguous slices, slice r being
 * [offset[r], offset[r+1]) (sizes differ by at most one). */
typedef struct {
    size_t n;
    int world;
    size_t *offset; /* world + 1 entries */
} DistShards;

/* Cuts n elements over the ranks. Returns 0, or -1 with an error when a slice is too large for
 * MPI's int counts (more than 2^31-1 elements: use more ranks). */
int dist_shards_init(DistShards *s, size_t n);
void dist_shards_free(DistShards *s);

/* In place over the whole array buf (s->n floats): on return, this rank's slice of buf holds
 * the sum over ranks of that slice; the rest of buf is undefined. */
void dist_reduce_scatter_sum_f32(float *buf, const DistShards *s);
/* In place: every rank's slice of buf, as that rank holds it, copied into every rank's buf. */
void dist_allgather_f32(float *buf, const DistShards *s);
/* This rank's slice `part` (its own slice's length) into full (s->n floats) on root only. */
void dist_gather_f32(const float *part, float *full, const DistShards *s);
/* root's full array (s->n floats; not read elsewhere), each rank's slice into its `part`. */
void dist_scatter_f32(const float *full, float *part, const DistShards *s);

/* Ends every rank of the job at once with `status` (MPI_Abort); in a single process, exit. */
_Noreturn void dist_abort(int status);

/* ---- agreement (dist_agree.c) ---- */

/* An agreement point: every rank says whether it failed (rc != 0). Returns 0 when none did,
 * else -1 on every rank: a rank that failed keeps its own error, the others get "rank K failed"
 * (K the lowest that did). Either way the failure is then known to every rank
 * (dist_failure_agreed), so each can stop cleanly. A no-op returning rc in a single process. */
int dist_agree(int rc);

/* Whether the last failure was agreed by all ranks (dist_agree, or a collective that carried
 * it), and the lowest rank that failed there (-1 when none). */
bool dist_failure_agreed(void);
int dist_first_failed_rank(void);

/* How many agreement points this rank has passed: 0 means the run is still in its set-up, where
 * a failing rank must join the first agreement (the one run() makes before training). */
long dist_agreements_passed(void);

#endif
