/* A persistent child process spoken to in lines: `/bin/sh -c command` with pipes on its stdin
 * and stdout (its stderr is ours), one request line written and one answer line read per
 * exchange, all under one deadline. The child runs in its own process group so that killing it
 * also ends whatever the shell started.
 *
 * Any failed exchange kills the child (SIGKILL to its group) and reaps it: after a timeout or a
 * garbled answer the two sides no longer agree on which answer belongs to which request. */
#ifndef RLHF_REWARDS_LINE_CHILD_H
#define RLHF_REWARDS_LINE_CHILD_H

#include <stddef.h>

typedef struct LineChild LineChild;

/* Starts the command. Returns 0, or -1 with an error (the shell could not be started; a
 * command the shell cannot find only shows at the first exchange: exit status 127). */
int line_child_spawn(const char *command, LineChild **out);

/* Writes req[0..len) (which must end with '\n' and hold no other) and reads one line back,
 * both within timeout_s seconds (<= 0 or infinite: no limit). SIGPIPE is blocked while writing,
 * so a child that has gone away gives an error here instead of killing this process. On success
 * *line (without its '\n', NUL-terminated) stays valid until the next call. Returns 0, or -1
 * with an error saying what happened (timed out, exited with status N, killed by signal N,
 * closed its stdout before a full line, wrote more than one line, or the child had already
 * failed) and the child killed and reaped. */
int line_child_exchange(LineChild *c, const char *req, size_t len, double timeout_s,
                        const char **line, size_t *line_len);

/* Whether the child is still running (not killed or reaped by a failure). */
int line_child_alive(const LineChild *c);

/* Kills the child now and reaps it (nothing if already reaped). */
void line_child_kill(LineChild *c);

/* Ends the child politely: closes its stdin (a well-behaved child exits at end of input), waits
 * up to grace_s seconds for it to exit, then kills it; always reaps it. Frees c (NULL: no-op). */
void line_child_close(LineChild *c, double grace_s);

/* A printable excerpt of what a child wrote, for messages: at most `max` bytes of s[0..len),
 * control characters shown as \n, \r, \t or '?', "..." when cut. Writes into buf (size >=
 * 2 * max + 4) and returns it. */
const char *line_child_excerpt(const char *s, size_t len, size_t max, char *buf);

#endif
