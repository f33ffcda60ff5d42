/* common/log_stream.h: lines starting "warning: " reach stderr, all others stdout, whole and in
 * order (invariants 1-3), whether written in one call, piecewise, or flushed part-way. */
#include "common/fileio.h"
#include "common/log_stream.h"
#include "harness.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int redirect(int fd, const char *path) {
    fflush(fd == 1 ? stdout : stderr);
    int saved = dup(fd);
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(f, fd);
    close(f);
    return saved;
}

static void restore(int fd, int saved) {
    fflush(fd == 1 ? stdout : stderr);
    dup2(saved, fd);
    close(saved);
}

static void expect_file(const char *path, const char *want) {
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(path, &text, &len) == 0, "read %s", path);
    CHECK(text && len == strlen(want) && memcmp(text, want, len) == 0,
          "%s holds \"%s\", expected \"%s\"", path, text ? text : "", want);
    free(text);
}

int main(void) {
    char out_path[4096], err_path[4096];
    snprintf(out_path, sizeof out_path, "%s", harness_tmp_path("stdout"));
    snprintf(err_path, sizeof err_path, "%s", harness_tmp_path("stderr"));
    int out = redirect(1, out_path), err = redirect(2, err_path);
    FILE *log = log_stream_open();
    CHECK(log != NULL, "log_stream_open");
    fprintf(log, "memory plan: %d MB\n", 12);
    fprintf(log, "warning: %d examples dropped\n", 3);
    fputs("\r[===>   ] 1/4", log); /* a progress bar, flushed part-way: stdout */
    fflush(log);
    fputs("\r[=====> ] 2/4\n", log);
    fputs("warn", log); /* a line built piecewise: decided once its start is known */
    fputs("ing: piecewise\nwarnings are not warnings\n", log);
    fputs("warn", log);
    fflush(log); /* a flush makes a short start final: stdout (invariant 2) */
    fputs("ing: flushed early\n", log);
    fputs("warning: two\nwarning: lines\nstep 1\n", log);
    fputs("warning: no newline yet", log);
    fclose(log);
    restore(1, out);
    restore(2, err);
    expect_file(out_path, "memory plan: 12 MB\n\r[===>   ] 1/4\r[=====> ] 2/4\n"
                          "warnings are not warnings\nwarning: flushed early\nstep 1\n");
    expect_file(err_path, "warning: 3 examples dropped\nwarning: piecewise\nwarning: two\n"
                          "warning: lines\nwarning: no newline yet");
    return harness_finish("test_log_stream");
}
