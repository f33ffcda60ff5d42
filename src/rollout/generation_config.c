#include "rollout/generation_config.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <string.h>

static void add_eos(GenerationDefaults *g, int64_t id) {
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos_ids[i] == id) return;
    if (g->n_eos < 16 && id >= 0) g->eos_ids[g->n_eos++] = (int32_t)id;
}

static int read_eos(GenerationDefaults *g, const json_t *root, const char *path) {
    const json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    int64_t id;
    if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            if (json_as_int64(item, &id) != 0)
                return err_set("%s: key 'eos_token_id': expected integers", path);
            add_eos(g, id);
        }
        return 0;
    }
    if (json_as_int64(v, &id) != 0)
        return err_set("%s: key 'eos_token_id': expected an integer or a list", path);
    add_eos(g, id);
    return 0;
}

static int read_float(const json_t *root, const char *key, float *out, const char *path) {
    double d;
    int found = json_get_double(root, key, &d);
    if (found < 0) return err_prefix("%s", path);
    if (found) *out = (float)d;
    return 0;
}

int generation_defaults_load(GenerationDefaults *g, const char *model_dir, const Tokenizer *tok,
                             const char *tokenizer_dir) {
    memset(g, 0, sizeof *g);
    g->sampling = sampling_defaults();
    const char *files[] = {"config.json", "generation_config.json"};
    for (int f = 0; f < 2; f++) {
        char path[4096];
        if (path_join(path, sizeof path, model_dir, files[f]) != 0) return -1;
        if (!file_exists(path)) continue;
        json_t *root;
        if (json_load_path(path, &root) != 0) return -1;
        int rc = read_eos(g, root, path);
        if (rc == 0 && f == 1) {
            bool do_sample = false;
            int64_t top_k = g->sampling.top_k, max_new = 0;
            if (json_get_bool(root, "do_sample", &do_sample) < 0 ||
                json_get_int64(root, "top_k", &top_k) < 0 ||
                json_get_int64(root, "max_new_tokens", &max_new) < 0)
                rc = err_prefix("%s", path);
            if (rc == 0) rc = read_float(root, "temperature", &g->sampling.temperature, path);
            if (rc == 0) rc = read_float(root, "top_p", &g->sampling.top_p, path);
            if (rc == 0) rc = read_float(root, "min_p", &g->sampling.min_p, path);
            if (rc == 0)
                rc = read_float(root, "repetition_penalty", &g->sampling.repetition_penalty, path);
            g->sampling.do_sample = do_sample;
            g->sampling.top_k = (int)top_k;
            g->max_new_tokens = (int)max_new;
        }
        json_decref(root);
        if (rc != 0) return -1;
    }
    if (tok && tokenizer_dir) {
        ChatTemplateSource src;
        if (chat_template_source_load(tokenizer_dir, &src) == 0) {
            const char *e = json_string_value(json_object_get(src.special_tokens, "eos_token"));
            if (e) add_eos(g, tokenizer_token_to_id(tok, e, strlen(e)));
            chat_template_source_free(&src);
        }
    }
    return 0;
}
