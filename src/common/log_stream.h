/* The training log of the command-line program: progress and results on stdout, warnings on
 * stderr, through one FILE* that the library writes to as it always has.
 *
 * Invariants:
 *  1. Each line goes whole to one stream, chosen at its first byte: a line that starts with
 *     "warning: " goes to stderr, every other line to stdout.
 *  2. A partial line (a progress bar rewritten with '\r' and flushed) goes to stdout as it is
 *     flushed; the line it belongs to stays on stdout until its '\n'.
 *  3. Nothing is kept back: fflush(log) writes everything given so far. */
#ifndef RLHF_COMMON_LOG_STREAM_H
#define RLHF_COMMON_LOG_STREAM_H

#include <stdbool.h>
#include <stdio.h>

/* A stream splitting lines between stdout and stderr (invariants 1-3), line-buffered. Close it
 * with fclose. Returns NULL when it cannot be made (the caller then logs to stderr). */
FILE *log_stream_open(void);

/* Whether what is written to `log` reaches a terminal (a split stream: whether stdout does), so
 * that progress is drawn as a bar there and as periodic lines into files and pipes. */
bool log_stream_is_tty(FILE *log);

#endif
