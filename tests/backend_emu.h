/* "emu": an emulated device backend for the tests. The CPU backend's ops behind a table that
 * claims device memory (host_memory false), so that model/ takes its device paths
 * (backend_mirror copies, copies back to the host) on a machine without a device:
 *  1. alloc poisons what it returns (every byte 0xff: NaN floats), so nothing may rely on zeroed
 *     memory;
 *  2. every op checks that each tensor pointer it is given lies in memory the backend allocated or
 *     was told it owns (emu_own: the model's weights, the optimizer's moments), and counts those
 *     that do not in emu_foreign_pointers;
 *  3. every op call is counted in emu_op_calls. */
#ifndef RLHF_TESTS_BACKEND_EMU_H
#define RLHF_TESTS_BACKEND_EMU_H

#include "kernels/backend.h"

enum {
    OP_LINEAR,
    OP_LINEAR_BACKWARD,
    OP_LORA,
    OP_LORA_BACKWARD,
    OP_RMSNORM,
    OP_RMSNORM_BACKWARD,
    OP_ROPE,
    OP_ROPE_BACKWARD,
    OP_SWIGLU,
    OP_SWIGLU_BACKWARD,
    OP_ADD,
    OP_SCALE,
    OP_ATTENTION,
    OP_ATTENTION_BACKWARD,
    OP_ATTENTION_CACHED,
    OP_LOGPROB,
    OP_LOGPROB_BACKWARD,
    OP_EMBEDDING_GATHER,
    OP_EMBEDDING_SCATTER_ADD,
    OP_ROWS_GATHER,
    OP_ROWS_SCATTER_ADD,
    OP_ADAMW,
    OP_ADAMW8BIT,
    OP_SUM_SQUARES,
    OP_MEMSET,
    OP_COPY,
    N_OPS
};

extern const char *const emu_op_names[N_OPS];
extern long emu_op_calls[N_OPS];
extern int emu_foreign_pointers;
extern const Backend emu_backend;

/* Marks [p, p + bytes) as the device's own memory / no longer (p as given to emu_own). */
void emu_own(const void *p, size_t bytes);
void emu_disown(const void *p);

/* Allocations and owned ranges live now. */
int emu_live_ranges(void);

#endif
