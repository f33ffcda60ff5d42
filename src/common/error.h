/* Error reporting for the library.
 *
 * Functions that can fail on user input return 0 on success and -1 on failure, after
 * recording one human-readable message (naming the file, line or key, and what was
 * expected) with err_set(). The caller either adds context with err_prefix() and
 * returns -1 again, or prints err_msg() and stops. abort()/assert are reserved for
 * programmer errors. The message buffer is per thread. */
#ifndef RLHF_COMMON_ERROR_H
#define RLHF_COMMON_ERROR_H

#include <stddef.h>

#if defined(__GNUC__)
#define RLHF_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define RLHF_PRINTF(fmt, args)
#endif

/* Records the message (printf-style) and returns -1, so `return err_set(...)` reads well. */
int err_set(const char *fmt, ...) RLHF_PRINTF(1, 2);

/* Puts "<prefix>: " before the current message and returns -1. */
int err_prefix(const char *fmt, ...) RLHF_PRINTF(1, 2);

/* The last message recorded on this thread ("" when none). */
const char *err_msg(void);

void err_clear(void);

/* malloc/calloc/realloc that abort on exhaustion: running out of memory is not an
 * input error we can explain better than "out of memory", and checking every small
 * allocation would bury the logic. Large, size-dependent buffers use xmalloc_checked. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* memset(p, value, n) by all threads, 1 MiB chunks in order (static schedule: each thread one
 * contiguous run); one thread for n up to 1 MiB. Memory stores are per core's bandwidth: one
 * thread zeroed 2 GB in 0.19-0.24 s on our VMs, two in 0.11-0.13 s. */
void memset_threads(void *p, int value, size_t n);

/* calloc for large buffers whose first use reads them before writing (AdamW's moments): the
 * zeros are written now, by all threads. calloc leaves fresh memory to the kernel's shared zero
 * page; a first read maps it, and the write after it faults again and flushes the TLB of every
 * core the process runs on, an interprocessor interrupt each. Under our machines' hypervisor that
 * costs ~7 s per 2 GiB, against ~0.9 s for pages written first. NULL when out of memory. */
void *calloc_written(size_t count, size_t size);

/* Returns NULL and sets an error naming `what` when n bytes cannot be had. */
void *xmalloc_checked(size_t n, const char *what);

/* xmalloc_checked for buffers of many megabytes read all over (weights): aligned to 2 MiB and
 * advised to the kernel as transparent huge pages. Where those are set to `madvise` (as on our
 * machines) nothing is huge without the advice, and touching fresh memory then costs a page
 * fault per 4 KiB, which on these VMs is about 10 us: seconds per few GB. Freed with free(). */
void *xmalloc_huge(size_t n, const char *what);

#endif
