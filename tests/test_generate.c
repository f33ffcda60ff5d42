/* Greedy decoding against transformers' generate() (tests/fixtures/generate, made by
 * tools/reference/make_generate_fixtures.py): batched prompts of unequal length, per-sequence
 * stop on eos, token-for-token equal; the same at any batch size (continuous batching). */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "rollout/generate.h"

#include <stdlib.h>
#include <string.h>

static const char *const models[] = {"llama_rope_llama3", "llama_tied",     "qwen2_bias",
                                     "qwen3_qknorm",      "mistral_window", "llama_bf16"};

static void check_model(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/generate/%s.json", name);
    json_t *fx;
    CHECK(json_load_path(harness_source_path(path), &fx) == 0, "%s", err_msg());
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    Model m;
    CHECK(model_load(&m, harness_source_path(path)) == 0, "%s", err_msg());
    json_t *prompts = json_object_get(fx, "prompts"), *want = json_object_get(fx, "completions");
    int n = (int)json_array_size(prompts);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        json_t *p = json_array_get(prompts, (size_t)i);
        lens[i] = (int)json_array_size(p);
        ids[i] = malloc((size_t)lens[i] * sizeof **ids);
        for (int t = 0; t < lens[i]; t++)
            ids[i][t] = (int32_t)json_integer_value(json_array_get(p, (size_t)t));
    }
    int32_t eos = (int32_t)json_integer_value(json_object_get(fx, "eos_token_id"));
    int batches[] = {0, 1, 2};
    for (int bi = 0; bi < 3; bi++) {
        GenerateOptions opt = {(int)json_integer_value(json_object_get(fx, "max_new_tokens")), &eos,
                               1, batches[bi]};
        Completion *out = calloc((size_t)n, sizeof *out);
        CHECK(generate_greedy(&m, (const int32_t *const *)ids, lens, n, &opt, out) == 0, "%s: %s",
              name, err_msg());
        for (int i = 0; i < n; i++) {
            json_t *w = json_array_get(want, (size_t)i);
            bool same = out[i].len == (int)json_array_size(w);
            for (int t = 0; same && t < out[i].len; t++)
                same = out[i].ids[t] == (int32_t)json_integer_value(json_array_get(w, (size_t)t));
            CHECK(same, "%s, max_batch %d, prompt %d: %d tokens differ from transformers' generate",
                  name, batches[bi], i, out[i].len);
        }
        completions_free(out, n);
        free(out);
    }
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    model_free(&m);
    json_decref(fx);
}

int main(void) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        check_model(models[i]);

    /* bad requests */
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_tied")) == 0, "%s",
          err_msg());
    int32_t p[3] = {1, 2, 3}, eos = 2;
    const int32_t *prompts[1] = {p};
    Completion out[1];
    int empty = 0, three = 3;
    GenerateOptions opt = {4, &eos, 1, 0};
    CHECK(generate_greedy(&m, prompts, &empty, 1, &opt, out) != 0 && strstr(err_msg(), "empty"),
          "empty prompt: %s", err_msg());
    GenerateOptions zero = {0, &eos, 1, 0};
    CHECK(generate_greedy(&m, prompts, &three, 1, &zero, out) != 0 &&
              strstr(err_msg(), "max_new_tokens"),
          "max_new_tokens 0: %s", err_msg());
    int32_t *big = calloc(5000, sizeof *big);
    const int32_t *bigp[1] = {big};
    int big_len = 5000;
    CHECK(generate_greedy(&m, bigp, &big_len, 1, &opt, out) != 0 && strstr(err_msg(), "context"),
          "over-long prompt: %s", err_msg());
    free(big);
    int32_t bad[2] = {1, 999};
    const int32_t *badp[1] = {bad};
    int two = 2;
    CHECK(generate_greedy(&m, badp, &two, 1, &opt, out) != 0 && strstr(err_msg(), "vocabulary"),
          "bad id: %s", err_msg());
    model_free(&m);
    return harness_finish("test_generate");
}
