/* Every config in examples/ trains as the README runs it (from the repository root), on the
 * embedded tiny model, and the preference examples end with a larger reward margin than they
 * start with. */
#include "cli/commands.h"
#include "common/error.h"
#include "harness.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first and last logged values of `key` in out_dir/metrics.jsonl; false if never logged. */
static bool first_last(const char *out_dir, const char *key, double *first, double *last) {
    json_t *rows = harness_read_metrics(out_dir);
    bool seen = false;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        if (!json_object_get(json_array_get(rows, i), key)) continue;
        if (!seen) *first = harness_metric(rows, i, key);
        *last = harness_metric(rows, i, key);
        seen = true;
    }
    json_decref(rows);
    return seen;
}

static void run_example(const char *name) {
    char config[600], out[4200];
    snprintf(config, sizeof config, "examples/%s", name);
    snprintf(out, sizeof out, "%s", harness_tmp_path(name));
    char *args[] = {config, "--output_dir", out};
    CHECK(cli_train(3, args) == CLI_EXIT_OK, "%s: %s", name, err_msg());
    double first = 0, last = 0;
    CHECK(first_last(out, "loss", &first, &last) && last == last, "%s: a finite loss logged", name);
    if (first_last(out, "rewards/margins", &first, &last))
        CHECK(last > first, "%s: reward margin %.4f -> %.4f", name, first, last);
}

int main(void) {
    char root[4096];
    snprintf(root, sizeof root, "%s", harness_source_path("."));
    CHECK(chdir(root) == 0, "cd %s", root);
    DIR *d = opendir("examples");
    CHECK(d != NULL, "examples/ exists");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".yaml") != 0) continue;
        run_example(e->d_name);
        n++;
    }
    if (d) closedir(d);
    CHECK(n >= 6, "%d example configs", n);
    return harness_finish("test_examples");
}
