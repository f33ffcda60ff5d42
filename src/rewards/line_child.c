#include "rewards/line_child.h"

#include "common/clock.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* An answer line longer than this is a child printing something else without newlines. */
#define MAX_LINE (64u << 20)

struct LineChild {
    pid_t pid;  /* > 0 until reaped; also the child's process group */
    int in_fd;  /* our end of its stdin; -1 once closed */
    int out_fd; /* our end of its stdout */
    char *buf;  /* bytes read from its stdout and not yet handed out */
    size_t len, cap;
};

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

int line_child_spawn(const char *command, LineChild **out) {
    *out = NULL;
    /* CLOEXEC on every end: the child gets its two ends through dup2 only, and children spawned
     * later (other reward commands) inherit none of them - a stray copy of a stdin write end
     * would keep this child from ever seeing end of input. */
    int in_pipe[2], out_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) != 0) return err_set("pipe: %s", strerror(errno));
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        int e = errno;
        close(in_pipe[0]);
        close(in_pipe[1]);
        return err_set("pipe: %s", strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
    /* The child starts with no blocked signals and SIGPIPE at its default even if we ignore it
     * (ignored dispositions survive exec), in a process group of its own. */
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, pipe_only;
    sigemptyset(&none);
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &pipe_only);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(in_pipe[0]);
    close(out_pipe[1]);
    if (rc != 0) {
        close(in_pipe[1]);
        close(out_pipe[0]);
        return err_set("could not start /bin/sh: %s", strerror(rc));
    }
    /* Non-blocking both ways: every wait goes through poll() with the deadline. */
    fcntl(in_pipe[1], F_SETFL, fcntl(in_pipe[1], F_GETFL) | O_NONBLOCK);
    fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
    LineChild *c = xcalloc(1, sizeof *c);
    c->pid = pid;
    c->in_fd = in_pipe[1];
    c->out_fd = out_pipe[0];
    *out = c;
    return 0;
}

int line_child_alive(const LineChild *c) {
    return c->pid > 0;
}

void line_child_kill(LineChild *c) {
    if (c->pid <= 0) return;
    /* The group is signalled before the leader is reaped, while its id cannot be reused. */
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    c->pid = 0;
}

/* Waits up to `wait` seconds for the child to exit; returns whether it did (status in *status). */
static bool reap_within(LineChild *c, double wait, int *status) {
    double end = clock_seconds() + wait;
    for (;;) {
        pid_t r = waitpid(c->pid, status, WNOHANG);
        if (r == c->pid || (r < 0 && errno != EINTR)) {
            c->pid = 0;
            return r > 0;
        }
        if (clock_seconds() >= end) return false;
        sleep_s(0.005);
    }
}

/* "exited with status 3", "was killed by signal 6 (Aborted)". */
static void describe_status(int status, char *buf, size_t size) {
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(buf, size, "exited with status %d%s", code,
                 code == 127 ? " (the shell could not find the command)" : "");
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    } else {
        snprintf(buf, size, "stopped (wait status %d)", status);
    }
}

const char *line_child_excerpt(const char *s, size_t len, size_t max, char *buf) {
    size_t k = 0;
    for (size_t i = 0; i < len && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
        if (esc) {
            memcpy(buf + k, esc, 2);
            k += 2;
        } else {
            buf[k++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
        }
    }
    if (len > max) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* The child stopped talking (end of its stdout, or its stdin closed): most likely it is exiting,
 * and how it exited is the useful part of the message. */
static int child_gone(LineChild *c, const char *what) {
    char partial[200] = "", excerpt[128];
    if (c->len > 0)
        snprintf(partial, sizeof partial, " (after %zu bytes of an answer: '%s')", c->len,
                 line_child_excerpt(c->buf, c->len, 60, excerpt));
    int status;
    if (reap_within(c, 1.0, &status)) {
        char how[160];
        describe_status(status, how, sizeof how);
        return err_set("the command %s before answering%s", how, partial);
    }
    line_child_kill(c);
    return err_set("the command %s%s; killed it", what, partial);
}

/* Reads what the child has written so far. Returns 1 when something was read, 0 when nothing
 * is available yet, -1 at end of output (error set). */
static int read_some(LineChild *c) {
    if (c->cap - c->len < 65536 + 1) {
        c->cap = c->cap * 2 > c->len + 65536 + 1 ? c->cap * 2 : c->len + 65536 + 1;
        c->buf = xrealloc(c->buf, c->cap);
    }
    ssize_t n = read(c->out_fd, c->buf + c->len, c->cap - c->len - 1);
    if (n > 0) {
        c->len += (size_t)n;
        c->buf[c->len] = '\0';
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (n < 0) return err_set("reading the command's stdout: %s", strerror(errno));
    return child_gone(c, "closed its stdout before a full answer line");
}

static int poll_ms(double deadline) {
    if (isinf(deadline)) return -1;
    double left = ceil((deadline - clock_seconds()) * 1000.0);
    return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* The exchange proper, with SIGPIPE blocked by the caller. Sets *broken_pipe when a write
 * failed with EPIPE (and so raised a SIGPIPE that is now pending). */
static int exchange(LineChild *c, const char *req, size_t len, double timeout_s,
                    bool *broken_pipe) {
    double deadline = timeout_s > 0 && isfinite(timeout_s) ? clock_seconds() + timeout_s : INFINITY;
    /* Anything on its stdout before the request cannot be the answer to it: a second line
     * after the last answer, a debugging print, or the end of output of a child that died
     * between batches. */
    int got = read_some(c);
    if (got < 0) return -1;
    char excerpt[128];
    if (c->len > 0)
        return err_set("the command wrote to its stdout before this request: '%s' (stdout is for "
                       "answer lines only; print diagnostics to stderr)",
                       line_child_excerpt(c->buf, c->len, 60, excerpt));
    size_t written = 0;
    for (;;) {
        if (written == len && memchr(c->buf, '\n', c->len)) return 0;
        struct pollfd fds[2];
        int nfds = 0, out_at;
        if (written < len) fds[nfds++] = (struct pollfd){.fd = c->in_fd, .events = POLLOUT};
        out_at = nfds;
        fds[nfds++] = (struct pollfd){.fd = c->out_fd, .events = POLLIN};
        int ms = poll_ms(deadline);
        int rc = ms == 0 ? 0 : poll(fds, (nfds_t)nfds, ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return err_set("poll: %s", strerror(errno));
        if (rc == 0) {
            line_child_kill(c);
            if (written < len)
                return err_set("timed out after %g s writing the request: %zu of its %zu bytes "
                               "went through (is the command reading its stdin?); killed it",
                               timeout_s, written, len);
            return err_set("timed out after %g s waiting for the answer line%s; killed it",
                           timeout_s, c->len ? " (it had written part of it)" : "");
        }
        if (written < len && fds[0].revents) {
            ssize_t n = write(c->in_fd, req + written, len - written);
            if (n > 0)
                written += (size_t)n;
            else if (n < 0 && errno == EPIPE) {
                *broken_pipe = true;
                return child_gone(c, "closed its stdin");
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                return err_set("writing to the command's stdin: %s", strerror(errno));
            }
        }
        if (fds[out_at].revents) {
            if (read_some(c) < 0) return -1;
            if (c->len > MAX_LINE)
                return err_set("the command wrote more than %u bytes without a newline", MAX_LINE);
        }
    }
}

int line_child_exchange(LineChild *c, const char *req, size_t len, double timeout_s,
                        const char **line, size_t *line_len) {
    if (c->pid <= 0) return err_set("the command is no longer running");
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE);
    bool broken_pipe = false;
    int rc = exchange(c, req, len, timeout_s, &broken_pipe);
    /* Our EPIPE left a SIGPIPE pending on this thread: take it before unblocking, or it would
     * be delivered (and kill us) the moment the old mask is back. One that was pending before
     * is someone else's and is left alone. */
    if (broken_pipe && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        line_child_kill(c);
        c->len = 0;
        return -1;
    }
    char *nl = memchr(c->buf, '\n', c->len);
    size_t n = (size_t)(nl - c->buf), rest = c->len - n - 1;
    if (rest > 0) {
        char excerpt[128];
        err_set("the command wrote more than one line for one request (then '%s'; stdout is for "
                "answer lines only, print diagnostics to stderr)",
                line_child_excerpt(nl + 1, rest, 60, excerpt));
        line_child_kill(c);
        c->len = 0;
        return -1;
    }
    *nl = '\0';
    if (n > 0 && c->buf[n - 1] == '\r') c->buf[--n] = '\0'; /* a child writing CRLF */
    *line = c->buf;
    *line_len = n;
    c->len = 0; /* the line stays readable in buf until the next read */
    return 0;
}

void line_child_close(LineChild *c, double grace_s) {
    if (!c) return;
    close_fd(&c->in_fd);
    if (c->pid > 0) {
        int status;
        if (!reap_within(c, grace_s, &status)) line_child_kill(c);
    }
    close_fd(&c->out_fd);
    free(c->buf);
    free(c);
}
