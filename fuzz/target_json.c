/* JSON text (config.json, tokenizer.json, adapter_config.json, dataset rows) and model
 * config.json: every JSON file the project reads goes through json_load_text. */
#include "common/json_util.h"
#include "model/config.h"
#include "targets.h"

int fuzz_json(const uint8_t *data, size_t size) {
    json_t *root = NULL;
    if (json_load_text((const char *)data, size, "fuzz", &root) == 0) json_decref(root);
    return 0;
}

int fuzz_model_config(const uint8_t *data, size_t size) {
    json_t *root = NULL;
    if (json_load_text((const char *)data, size, "fuzz", &root) != 0) return 0;
    ModelConfig cfg;
    if (model_config_from_json(&cfg, root, "fuzz") == 0) model_config_free(&cfg);
    json_decref(root);
    return 0;
}
