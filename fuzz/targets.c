#include "targets.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "fuzz_util.h"

#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const FuzzTarget fuzz_targets[] = {
    {"json",
     fuzz_json,
     {"tests/fixtures/models/*/config.json", "tests/fixtures/lora/*/adapter_config.json"}},
    {"model_config", fuzz_model_config, {"tests/fixtures/models/*/config.json"}},
    {"tokenizer_json", fuzz_tokenizer_json, {"tests/fixtures/tokenizers/*/tokenizer.json"}},
    {"tokenizer_encode", fuzz_tokenizer_encode, {"tests/fixtures/tokenizers/corpus.jsonl"}},
    {"chat_template",
     fuzz_chat_template,
     {"src/chat/templates/*.jinja", "template@tests/fixtures/chat_templates/*.json"}},
    {"safetensors",
     fuzz_safetensors,
     {"tests/fixtures/lora/*/adapter_model.safetensors",
      "tests/fixtures/models/qwen2_bias/model.safetensors"}},
    {"train_config", fuzz_train_config, {"examples/*.yaml"}},
    {"dataset_rows", fuzz_dataset_rows, {"examples/data/*.jsonl"}},
    {"lora_config", fuzz_lora_config, {"tests/fixtures/lora/*/adapter_config.json"}},
};
const size_t n_fuzz_targets = sizeof fuzz_targets / sizeof fuzz_targets[0];

/* The string member `key` of the JSON file `path`, as a seed; files without it are skipped. */
static int json_member_seed(const char *path, const char *key,
                            int (*fn)(void *, const char *, const uint8_t *, size_t), void *ctx) {
    json_t *root;
    if (json_load_path(path, &root) != 0) return -1; /* the project's reader: bignums, NUL */
    const json_t *v = json_object_get(root, key);
    int rc = json_is_string(v)
                 ? fn(ctx, path, (const uint8_t *)json_string_value(v), json_string_length(v))
                 : 0;
    json_decref(root);
    return rc;
}

int fuzz_seeds_foreach(const FuzzTarget *t,
                       int (*fn)(void *ctx, const char *name, const uint8_t *data, size_t len),
                       void *ctx) {
    int rc = 0;
    for (int s = 0; rc == 0 && s < 6 && t->seeds[s]; s++) {
        const char *pattern = t->seeds[s], *at = strchr(pattern, '@');
        char key[64] = "";
        if (at) {
            snprintf(key, sizeof key, "%.*s", (int)(at - pattern), pattern);
            pattern = at + 1;
        }
        glob_t g;
        if (glob(fuzz_source_path(pattern), 0, NULL, &g) != 0) continue; /* no match: no seeds */
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
            const char *path = g.gl_pathv[i];
            if (key[0]) {
                rc = json_member_seed(path, key, fn, ctx);
                continue;
            }
            char *text;
            size_t len;
            if (read_file(path, &text, &len) != 0) {
                rc = -1;
                break;
            }
            rc = fn(ctx, path, (const uint8_t *)text, len);
            free(text);
        }
        globfree(&g);
    }
    return rc;
}
