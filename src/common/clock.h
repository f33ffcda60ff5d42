/* Durations: seconds from a monotonic clock (never moved by a change of the system time), for
 * step times, throughput and the time left on progress lines. Not a date. */
#ifndef RLHF_COMMON_CLOCK_H
#define RLHF_COMMON_CLOCK_H

/* Seconds since an arbitrary fixed origin; only differences of two readings mean anything.
 * Cannot fail. */
double clock_seconds(void);

/* CPU seconds this process has run, all its threads together, since an arbitrary origin: the
 * work a phase took whatever share of the cores the machine's load left it (a shared machine's
 * wall times measure the load). Cannot fail. */
double cpu_seconds(void);

#endif
