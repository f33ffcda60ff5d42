/* Writes each fuzz target's seed inputs (fixtures named in fuzz/targets.c) into
 * OUT/<target>/, the libFuzzer corpus: generated at fuzz time, never committed.
 * Usage: fuzz_make_corpus OUT */
#include "targets.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *dir;
    int n;
} Ctx;

static int write_seed(void *ctx, const char *name, const uint8_t *data, size_t len) {
    Ctx *c = ctx;
    const char *base = strrchr(name, '/');
    char path[4096];
    /* A counter keeps seeds apart that share a basename (every config.json). */
    snprintf(path, sizeof path, "%s/seed%03d-%s", c->dir, c->n++, base ? base + 1 : name);
    FILE *fp = fopen(path, "wb");
    if (!fp || (len && fwrite(data, 1, len, fp) != len) || fclose(fp) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT\n", argv[0]);
        return 2;
    }
    mkdir(argv[1], 0777);
    for (size_t i = 0; i < n_fuzz_targets; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], fuzz_targets[i].name);
        mkdir(dir, 0777);
        Ctx c = {dir, 0};
        if (fuzz_seeds_foreach(&fuzz_targets[i], write_seed, &c) != 0) return 1;
        printf("%s: %d seeds\n", fuzz_targets[i].name, c.n);
    }
    return 0;
}
