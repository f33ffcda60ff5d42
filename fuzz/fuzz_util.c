#include "fuzz_util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef RLHF_SOURCE_DIR
#error "RLHF_SOURCE_DIR must name the source tree (fixtures are read from it)"
#endif

static char tmpdir[64];
/* Every name written, so that the exit handler can remove them (a handful per target). */
static char written[8][64];
static int n_written;

static void remove_tmpdir(void) {
    char path[4096];
    for (int i = 0; i < n_written; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, written[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

const char *fuzz_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/rlhf-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (strlen(tmpdir) >= sizeof tmpdir - 1 || !mkdtemp(tmpdir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_tmpdir);
    }
    return tmpdir;
}

void fuzz_write_file(const char *name, const uint8_t *data, size_t size, char *path) {
    snprintf(path, 4096, "%s/%s", fuzz_tmpdir(), name);
    bool known = false;
    for (int i = 0; i < n_written && !known; i++)
        known = strcmp(written[i], name) == 0;
    if (!known) {
        if (n_written == 8 || strlen(name) >= sizeof written[0]) abort();
        strcpy(written[n_written++], name);
    }
    FILE *fp = fopen(path, "wb");
    if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
        perror(path);
        abort();
    }
}

const char *fuzz_source_path(const char *rel) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", RLHF_SOURCE_DIR, rel);
    return path;
}
