#include "frozen_base.h"

#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "model/backward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference batch of a fixture model (tests/fixtures/models/<base>/reference.json). */
TokenBatch frozen_base_batch(const char *base) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/models/%s/reference.json", base);
    json_t *ref;
    if (json_load_path(harness_source_path(path), &ref) != 0) exit(1);
    json_t *ids = json_object_get(ref, "input_ids"), *m = json_object_get(ref, "attention_mask");
    int B = (int)json_array_size(ids), T = (int)json_array_size(json_array_get(ids, 0));
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens);
    uint8_t *mask = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] =
                (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            mask[b * T + t] = (uint8_t)json_integer_value(json_array_get(json_array_get(m, b), t));
        }
    json_decref(ref);
    return (TokenBatch){.batch = B, .t_len = T, .tokens = tokens, .attn_mask = mask};
}

/* The adapter's gradients of the mean token NLL of b under m (a attached), a calloc'd array of
 * a->n_params, and the log-probs into logp; on a frozen base, also that a gradient for the base
 * itself is refused. */
static float *adapter_grads(Model *m, const LoraAdapter *a, const TokenBatch *b, float *logp) {
    int cells = b->batch * b->t_len, count = 0;
    for (int i = 0; i < cells; i++)
        count += b->attn_mask[i] && i % b->t_len;
    float *dlogp = calloc((size_t)cells, sizeof *dlogp);
    for (int i = 0; i < cells; i++)
        if (b->attn_mask[i] && i % b->t_len) dlogp[i] = -1.0f / (float)count;
    ForwardTape tape = {0};
    float *lg = calloc(a->n_params, sizeof *lg);
    CHECK(model_forward_tape(m, b, false, &tape) == 0, "%s", err_msg());
    model_tape_logprobs(m, &tape, NULL, logp);
    CHECK(model_backward(m, &tape, NULL, dlogp, NULL, lg) == 0, "%s", err_msg());
    if (m->nf4 || m->params16) { /* a frozen base has no gradient slots */
        float *grads = calloc(1, sizeof *grads);
        err_clear();
        CHECK(model_backward(m, &tape, NULL, dlogp, grads, lg) != 0 && strstr(err_msg(), "frozen"),
              "a gradient for the frozen (%s) base is refused: %s", m->nf4 ? "NF4" : "bf16",
              err_msg());
        free(grads);
    }
    forward_tape_free(&tape);
    free(dlogp);
    return lg;
}

void frozen_base_fixture(const char *adapter, char *base, size_t cap, char *base_dir,
                         char *adapter_dir) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "tests/fixtures/lora/%s", adapter);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref;
    CHECK(json_load_path(harness_source_path(path), &ref) == 0, "%s", err_msg());
    if (!ref) exit(1);
    snprintf(base, cap, "%s", json_string_value(json_object_get(ref, "base")));
    json_decref(ref);
    snprintf(path, sizeof path, "tests/fixtures/models/%s", base);
    snprintf(base_dir, 4096, "%s", harness_source_path(path));
    snprintf(adapter_dir, 4096, "%s", harness_source_path(dir));
}

void frozen_base_check_adapter(Model *ref, Model *frozen, const LoraAdapter *a, const char *base,
                               const char *adapter, const char *kind) {
    TokenBatch b = frozen_base_batch(base);
    size_t cells = (size_t)b.batch * b.t_len;
    float *lp32 = calloc(cells, sizeof *lp32), *lpf = calloc(cells, sizeof *lpf);
    float *g32 = adapter_grads(ref, a, &b, lp32), *gf = adapter_grads(frozen, a, &b, lpf);
    double lp_err = 0;
    for (size_t i = 0; i < cells; i++)
        if (b.attn_mask[i] && i % b.t_len) lp_err = fmax(lp_err, fabs(lp32[i] - lpf[i]));
    CHECK(lp_err <= 1e-4, "%s: log-probs over the %s base off by %.3g", adapter, kind, lp_err);
    for (int t = 0; t < a->n_info; t++) {
        const float *x = g32 + a->info[t].offset, *y = gf + a->info[t].offset;
        double scale = 0, err = 0;
        for (size_t k = 0; k < a->info[t].numel; k++)
            scale = fmax(scale, fabs(x[k])), err = fmax(err, fabs(x[k] - y[k]));
        CHECK(scale > 0 && err <= 1e-5 * scale, "%s: %s over the %s base off by %.3g (max %.3g)",
              adapter, a->info[t].name, kind, err, scale);
    }
    free(g32), free(gf), free(lp32), free(lpf);
    free((void *)b.tokens), free((void *)b.attn_mask);
}
