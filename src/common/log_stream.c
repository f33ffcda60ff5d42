#include "common/log_stream.h"

#include <string.h>
#include <unistd.h>

static const char warning_prefix[] = "warning: ";
#define PREFIX_LEN (sizeof warning_prefix - 1)

/* Where the current line goes (invariant 1): decided once its first PREFIX_LEN bytes are known,
 * or when a flush makes a shorter start final (invariant 2). */
typedef struct {
    char head[PREFIX_LEN]; /* the start of the current line, while undecided */
    size_t n_head;
    FILE *target; /* NULL: undecided */
} Splitter;

static Splitter splitter;
static FILE *split_stream;

static void decide(Splitter *s, FILE *to) {
    s->target = to;
    fwrite(s->head, 1, s->n_head, to);
    s->n_head = 0;
}

static ssize_t split_write(void *cookie, const char *buf, size_t size) {
    Splitter *s = cookie;
    for (size_t i = 0; i < size;) {
        if (!s->target) {
            s->head[s->n_head++] = buf[i++];
            bool newline = s->head[s->n_head - 1] == '\n';
            if (memcmp(s->head, warning_prefix, s->n_head) != 0 || newline)
                decide(s, stdout);
            else if (s->n_head == PREFIX_LEN)
                decide(s, stderr);
            if (newline) s->target = NULL;
            continue;
        }
        const char *nl = memchr(buf + i, '\n', size - i);
        size_t n = nl ? (size_t)(nl - (buf + i)) + 1 : size - i;
        fwrite(buf + i, 1, n, s->target);
        i += n;
        if (nl) {
            fflush(s->target);
            s->target = NULL;
        }
    }
    /* invariant 3: the buffered stdio streams are flushed with this one */
    if (s->n_head && !s->target) decide(s, stdout);
    fflush(stdout);
    fflush(stderr);
    return (ssize_t)size;
}

FILE *log_stream_open(void) {
    splitter = (Splitter){0};
    split_stream = fopencookie(&splitter, "w", (cookie_io_functions_t){.write = split_write});
    if (split_stream) setvbuf(split_stream, NULL, _IOLBF, 0);
    return split_stream;
}

bool log_stream_is_tty(FILE *log) {
    if (log == split_stream && log) return isatty(STDOUT_FILENO);
    int fd = fileno(log);
    return fd >= 0 && isatty(fd);
}
