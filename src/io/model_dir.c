#include "io/model_dir.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int copy_if_present(const char *from_dir, const char *to_dir, const char *name) {
    char from[4096], to[4096];
    if (path_join(from, sizeof from, from_dir, name) || path_join(to, sizeof to, to_dir, name))
        return -1;
    if (!file_exists(from)) return 0;
    char *data;
    size_t len;
    if (read_file(from, &data, &len) != 0) return -1;
    int rc = write_file_atomic(to, data, len);
    free(data);
    return rc;
}

static const char *dtype_config_name(SafetensorsDtype dt) {
    return dt == ST_BF16 ? "bfloat16" : dt == ST_F16 ? "float16" : "float32";
}

SafetensorsDtype model_dir_source_dtype(const Model *m) {
    if (strcmp(m->cfg.weights_dtype, "bfloat16") == 0) return ST_BF16;
    if (strcmp(m->cfg.weights_dtype, "float16") == 0) return ST_F16;
    return ST_F32;
}

/* config.json as it was, with its dtype keys naming the dtype actually written. */
static int write_config(const char *model_dir, const char *out_dir, SafetensorsDtype dtype) {
    char from[4096], to[4096];
    if (path_join(from, sizeof from, model_dir, "config.json") ||
        path_join(to, sizeof to, out_dir, "config.json"))
        return -1;
    json_t *cfg;
    if (json_load_path(from, &cfg) != 0) return -1;
    const char *keys[] = {"dtype", "torch_dtype"};
    for (int i = 0; i < 2; i++)
        if (json_object_get(cfg, keys[i]))
            json_object_set_new(cfg, keys[i], json_string(dtype_config_name(dtype)));
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(cfg);
    if (!text) return err_set("%s: cannot serialise", to);
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len] = '\n';
    int rc = write_file_atomic(to, text, len + 1);
    free(text);
    return rc;
}

/* generation_config.json and the tokenizer files, those that exist. */
static int copy_companion_files(const char *model_dir, const char *tokenizer_dir,
                                const char *out_dir) {
    if (copy_if_present(model_dir, out_dir, "generation_config.json") != 0) return -1;
    static const char *const tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json",
                                                  "special_tokens_map.json", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof tokenizer_files / sizeof *tokenizer_files; i++)
        if (copy_if_present(tokenizer_dir, out_dir, tokenizer_files[i]) != 0) return -1;
    return 0;
}

int model_dir_write(const Model *m, const char *model_dir, const char *tokenizer_dir,
                    const char *out_dir, SafetensorsDtype dtype) {
    if (make_dirs(out_dir) != 0) return -1;
    if (model_save_weights(m, out_dir, dtype, MODEL_DEFAULT_MAX_SHARD_BYTES) != 0) return -1;
    if (write_config(model_dir, out_dir, dtype) != 0) return -1;
    return copy_companion_files(model_dir, tokenizer_dir, out_dir);
}

int model_dir_write_adapter(const LoraAdapter *a, const char *model_dir, const char *base_id,
                            const char *tokenizer_dir, const char *out_dir) {
    if (make_dirs(out_dir) != 0) return -1;
    char absolute[PATH_MAX];
    if (!base_id && !realpath(model_dir, absolute))
        return err_set("%s: cannot resolve the base model's directory: %s", model_dir,
                       strerror(errno));
    if (lora_save(a, out_dir, base_id ? base_id : absolute) != 0) return -1;
    if (copy_if_present(model_dir, out_dir, "config.json") != 0) return -1;
    return copy_companion_files(model_dir, tokenizer_dir, out_dir);
}
