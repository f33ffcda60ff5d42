#include "reference_fixture.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>

static void die(const char *what) {
    fprintf(stderr, "reference fixture: %s\n", what);
    exit(1);
}

void reference_fixture_load(ReferenceFixture *f, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    if (json_load_path(path, &f->root) != 0) die(err_msg());
    json_t *ids = json_object_get(f->root, "input_ids");
    json_t *mask = json_object_get(f->root, "attention_mask");
    json_t *lp = json_object_get(f->root, "token_logp");
    if (!json_is_array(ids) || !json_is_array(mask) || !json_is_array(lp)) die("missing arrays");
    f->batch = (int)json_array_size(ids);
    f->t_len = (int)json_array_size(json_array_get(ids, 0));
    size_t n = (size_t)f->batch * f->t_len;
    f->tokens = calloc(n, sizeof *f->tokens);
    f->mask = calloc(n, 1);
    f->token_logp = calloc(n, sizeof *f->token_logp);
    for (int b = 0; b < f->batch; b++) {
        for (int t = 0; t < f->t_len; t++) {
            size_t i = (size_t)b * f->t_len + t;
            f->tokens[i] = (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            f->mask[i] = (uint8_t)json_integer_value(json_array_get(json_array_get(mask, b), t));
            f->token_logp[i] = json_number_value(json_array_get(json_array_get(lp, b), t));
        }
    }
}

void reference_fixture_free(ReferenceFixture *f) {
    free(f->tokens);
    free(f->mask);
    free(f->token_logp);
    json_decref(f->root);
}
