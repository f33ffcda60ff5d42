/* Replays every fuzz target (fuzz/targets.c) over its seed inputs and over the inputs that once
 * crashed, leaked or hung it (tests/fixtures/fuzz_regressions/<target>/), in the normal build:
 * a regression shows up here as a crash, or as a sanitizer report under `make test-asan`,
 * without clang or libFuzzer. */
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "targets.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static int replay(void *ctx, const char *name, const uint8_t *data, size_t len) {
    const FuzzTarget *t = ctx;
    CHECK(t->fn(data, len) == 0, "%s: %s", t->name, name);
    err_clear();
    return 0;
}

/* Every file of tests/fixtures/fuzz_regressions/<target>/; returns how many. */
static int replay_regressions(const FuzzTarget *t) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/fuzz_regressions/%s", RLHF_SOURCE_DIR, t->name);
    DIR *d = opendir(dir);
    if (!d) return 0; /* no finding for this target yet */
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096 + 256], *data;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        CHECK(read_file(path, &data, &len) == 0, "%s", err_msg());
        replay((void *)t, path, (const uint8_t *)data, len);
        free(data);
        n++;
    }
    closedir(d);
    return n;
}

int main(void) {
    for (size_t i = 0; i < n_fuzz_targets; i++) {
        const FuzzTarget *t = &fuzz_targets[i];
        CHECK(fuzz_seeds_foreach(t, replay, (void *)t) == 0, "%s seeds: %s", t->name, err_msg());
        int n = replay_regressions(t);
        printf("%s: seeds and %d regression input(s) replayed\n", t->name, n);
    }
    return harness_finish("test_fuzz_regressions");
}
