#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int harness_checks, harness_failures;
static char tmpdir[512];

bool harness_close(double got, double want, double rel, double abs_tol) {
    if (isnan(got) || isnan(want)) return false;
    return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

const char *harness_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/rlhf-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tmpdir;
}

const char *harness_source_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", RLHF_SOURCE_DIR, rel);
    return buf;
}

int harness_write_file(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t n = fwrite(data, 1, len, fp);
    return (fclose(fp) == 0 && n == len) ? 0 : -1;
}

int harness_finish(const char *name) {
    if (tmpdir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    }
    printf("%s: %d passed, %d failed\n", name, harness_checks - harness_failures, harness_failures);
    return harness_failures ? 1 : 0;
}
