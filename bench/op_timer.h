/* A Backend that times another one op by op (bench only): every heavy op of the wrapped table
 * (products, attention, the lm_head, norms, RoPE, SwiGLU, gathers, AdamW) waits for the work
 * before it, runs, waits for itself, and adds the wall time to its op's total. The waits
 * serialise the device, so the totals are each op's own time, and their sum is the step's time
 * less the launch overlap the waits removed. The light ops (memory, add, scale) pass through
 * untimed. Not thread-safe: one timed backend per process. */
#ifndef RLHF_BENCH_OP_TIMER_H
#define RLHF_BENCH_OP_TIMER_H

#include "kernels/backend.h"

#include <stdio.h>

/* The timing wrapper of inner (the same ctx and memory); valid while inner is. */
const Backend *op_timer_wrap(const Backend *inner);
/* Zeroes the totals. */
void op_timer_reset(void);
/* Prints one JSON line {"bench": "op_times", "label": label, "<op>": {"s": total, "calls": n}, ...}
 * of the ops called since the last reset, largest first. */
void op_timer_print(FILE *f, const char *label);

#endif
