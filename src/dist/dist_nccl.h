/* NCCL as dist_device.h's collective on CUDA memory (issue 29): built into rlhf_dist_nccl only
 * where the CUDA build found nccl.h and libnccl (RLHF_WITH_NCCL); a CUDA build without them
 * refuses several ranks on the device by name (cli/train_devices.c).
 *
 * Invariants:
 *  1. One rank per GPU: a rank takes GPU dist_local_rank() of its machine (cudaSetDevice before
 *     the backend opens there); more ranks on a machine than GPUs is an error.
 *  2. The communicator spans all ranks in rank order; rank 0's ncclUniqueId reaches the others
 *     through dist_bcast (MPI). Every failure while opening is agreed over the ranks, so all of
 *     them fail together and none waits in a collective the others left.
 *  3. Collectives run in place on the default stream, the stream the CUDA backend's kernels run
 *     on, so they are ordered after the step's gradients and before the optimizer's kernels.
 *     Sums are NCCL's fp32 ring/tree reductions: deterministic for a fixed job shape, the same
 *     bytes on every rank, no float atomics of ours. ZeRO-1's uneven slices go as one group of
 *     ncclReduce (reduce-scatter) or ncclBroadcast (all-gather) per slice, rooted at its owner.
 *  4. A collective that NCCL reports failed ends the job (dist_abort) with NCCL's message: a
 *     broken communicator cannot be recovered from. */
#ifndef RLHF_DIST_DIST_NCCL_H
#define RLHF_DIST_DIST_NCCL_H

#include "dist/dist_device.h"

/* Opens the communicator (invariants 1-2); every rank calls it, once per training. Returns the
 * comm, or NULL with an error (on every rank when any failed). */
const DistDeviceComm *dist_nccl_open(void);

#endif
