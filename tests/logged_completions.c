#include "logged_completions.h"

#include "harness.h"

#include "common/error.h"
#include "common/fileio.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x and y log the same step, prompt and completion text. */
static bool same_row(json_t *x, json_t *y) {
    if (!x || !y) return false;
    if (json_integer_value(json_object_get(x, "step")) !=
        json_integer_value(json_object_get(y, "step")))
        return false;
    const char *keys[] = {"prompt", "completion"};
    for (int k = 0; k < 2; k++) {
        const char *u = json_string_value(json_object_get(x, keys[k])),
                   *v = json_string_value(json_object_get(y, keys[k]));
        if (!u || !v || strcmp(u, v) != 0) return false;
    }
    return true;
}

void logged_completions_same(const char *name, const char *a_dir, const char *a_label,
                             const char *b_dir, const char *b_label, int rows) {
    char pa[4400], pb[4400], *a = NULL, *b = NULL;
    snprintf(pa, sizeof pa, "%s/completions.jsonl", a_dir);
    snprintf(pb, sizeof pb, "%s/completions.jsonl", b_dir);
    CHECK(read_file(pa, &a, NULL) == 0 && read_file(pb, &b, NULL) == 0, "%s: %s", name, err_msg());
    int seen = 0, differ = 0;
    char *sa = NULL, *sb = NULL;
    char *la = a ? strtok_r(a, "\n", &sa) : NULL, *lb = b ? strtok_r(b, "\n", &sb) : NULL;
    for (; la && lb; la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb), seen++) {
        json_t *x = json_loads(la, 0, NULL), *y = json_loads(lb, 0, NULL);
        if (!same_row(x, y) && differ++ == 0)
            printf("%s: completion %d: %s %s\n  %s %s\n", name, seen, a_label, la, b_label, lb);
        json_decref(x), json_decref(y);
    }
    CHECK(!la && !lb, "%s: %s logged more completions than %s", name, la ? a_label : b_label,
          la ? b_label : a_label);
    CHECK(seen == rows && differ == 0, "%s: %d of %d completions differ (%d expected)", name,
          differ, seen, rows);
    printf("%s: %d completions, the same texts on both\n", name, seen);
    free(a), free(b);
}
