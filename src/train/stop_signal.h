/* Graceful stop on SIGINT / SIGTERM. The first signal only sets a flag (async-signal-safe); the
 * training loops read it after each step, save a checkpoint and stop, so that the run resumes
 * bit for bit. The handler also puts both signals back to the actions they had before
 * stop_signal_install, so a second signal does what it did before: for the command line (the
 * default action) it ends the process at once; a host program (the Python binding) gets its own
 * handler back rather than being killed. */
#ifndef RLHF_TRAIN_STOP_SIGNAL_H
#define RLHF_TRAIN_STOP_SIGNAL_H

#include <stdint.h>

/* Catches SIGINT and SIGTERM (the previous actions are kept for stop_signal_uninstall) and
 * clears the flag. */
void stop_signal_install(void);

/* Restores the actions stop_signal_install replaced. The flag keeps its value. */
void stop_signal_uninstall(void);

/* What stop_signal_received gives after stop_signal_request. */
#define STOP_SIGNAL_REQUESTED (-1)

/* The first signal caught since stop_signal_install (SIGINT or SIGTERM), STOP_SIGNAL_REQUESTED,
 * or 0. */
int stop_signal_received(void);

/* Clears the flag (stop_signal_install does too): a run without our handlers starts with it
 * clear, and a request that arrived after the last step does not stop the next run. */
void stop_signal_clear(void);

/* Asks the running loop to stop as a signal would (checkpoint, then stop), without a signal:
 * for programs that embed the library. Async-signal-safe; callable from any thread. */
void stop_signal_request(void);

/* stop_signal_received over every rank of a multi-process run (collective): the signal any
 * rank caught, which then counts as caught by every rank (their exit status is 128 + it), so
 * all stop after the same step. In one process, stop_signal_received. */
int stop_signal_agree(void);

/* The error a loop stops with after a signal, once checkpoint-<step> is saved: always -1. */
int stop_signal_error(int sig, int64_t step);

#endif
