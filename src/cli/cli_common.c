#include "cli/commands.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *message) {
    fprintf(stderr, "rlhf: error: %s\n", message);
    return CLI_EXIT_FAILURE;
}

int cli_option(int argc, char **argv, int *i, const char *name, const char **value) {
    if (strcmp(argv[*i], name) != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "rlhf: error: option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int cli_positive_int(const char *name, const char *text, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || end == text || v < 1 || v > INT_MAX) {
        fprintf(stderr, "rlhf: error: option %s: expected a positive integer, got \"%s\"\n", name,
                text);
        return -1;
    }
    *out = (int)v;
    return 0;
}
