#include "reference_fixture.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>

static void die(const char *what) {
    fprintf(stderr, "reference fixture: %s\n", what);
    exit(1);
}

static void read_token_logp(ReferenceFixture *f, json_t *lp) {
    if (!json_is_array(lp) || (int)json_array_size(lp) != f->batch) die("token_logp missing");
    for (int b = 0; b < f->batch; b++)
        for (int t = 0; t < f->t_len; t++)
            f->token_logp[(size_t)b * f->t_len + t] =
                json_number_value(json_array_get(json_array_get(lp, b), t));
}

void reference_fixture_load(ReferenceFixture *f, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    if (json_load_path(path, &f->root) != 0) die(err_msg());
    json_t *ids = json_object_get(f->root, "input_ids");
    json_t *mask = json_object_get(f->root, "attention_mask");
    if (!json_is_array(ids) || !json_is_array(mask)) die("missing arrays");
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
        }
    }
    read_token_logp(f, json_object_get(f->root, "token_logp"));
}

double reference_fixture_use_bf16(ReferenceFixture *f, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reference_bf16.json", dir);
    json_t *bf16;
    if (json_load_path(path, &bf16) != 0) die(err_msg());
    read_token_logp(f, json_object_get(bf16, "token_logp"));
    json_object_set(f->root, "logits_check", json_object_get(bf16, "logits_check"));
    double change = json_number_value(json_object_get(bf16, "max_rel_vs_fp32"));
    json_decref(bf16);
    return change;
}

void reference_fixture_free(ReferenceFixture *f) {
    free(f->tokens);
    free(f->mask);
    free(f->token_logp);
    json_decref(f->root);
}
