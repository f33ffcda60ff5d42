/* Finding a tokenizer directory's chat template and special tokens the way transformers 5
 * does (PreTrainedTokenizerBase.from_pretrained / get_chat_template), and the built-in
 * templates selectable by Axolotl's names. */
#include "chat/chat_template.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* Generated from the .jinja files in src/chat/templates by cmake/embed_chat_templates.cmake. */
extern const char *const chat_builtin_template_names[];
extern const char *const chat_builtin_template_texts[];

const char *chat_template_builtin(const char *name) {
    for (size_t i = 0; chat_builtin_template_names[i]; i++)
        if (strcmp(chat_builtin_template_names[i], name) == 0)
            return chat_builtin_template_texts[i];
    return NULL;
}

const char *const *chat_template_builtin_names(void) {
    return chat_builtin_template_names;
}

void chat_template_source_free(ChatTemplateSource *src) {
    if (!src) return;
    for (size_t i = 0; i < src->ntemplates; i++) {
        free(src->names[i]);
        free(src->templates[i]);
    }
    free(src->names);
    free(src->templates);
    free(src->origin);
    json_decref(src->special_tokens);
    memset(src, 0, sizeof *src);
}

static void add_template(ChatTemplateSource *src, const char *name, const char *text, size_t len) {
    for (size_t i = 0; i < src->ntemplates; i++)
        if (strcmp(src->names[i], name) == 0) {
            free(src->templates[i]);
            src->templates[i] = xmalloc(len + 1);
            memcpy(src->templates[i], text, len);
            src->templates[i][len] = '\0';
            return;
        }
    src->names = xrealloc(src->names, (src->ntemplates + 1) * sizeof *src->names);
    src->templates = xrealloc(src->templates, (src->ntemplates + 1) * sizeof *src->templates);
    src->names[src->ntemplates] = xstrdup(name);
    src->templates[src->ntemplates] = xmalloc(len + 1);
    memcpy(src->templates[src->ntemplates], text, len);
    src->templates[src->ntemplates][len] = '\0';
    src->ntemplates++;
}

static int add_template_file(ChatTemplateSource *src, const char *name, const char *path) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    add_template(src, name, text, len);
    free(text);
    return 0;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* chat_template.jinja and additional_chat_templates/<name>.jinja. */
static int load_jinja_files(ChatTemplateSource *src, const char *dir) {
    char path[4096];
    if (path_join(path, sizeof path, dir, "chat_template.jinja") != 0) return -1;
    if (file_exists(path)) {
        if (add_template_file(src, "default", path) != 0) return -1;
        src->origin = xstrdup(path);
    }
    char extra[4096];
    if (path_join(extra, sizeof extra, dir, "additional_chat_templates") != 0) return -1;
    if (!dir_exists(extra)) return 0;
    DIR *d = opendir(extra);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l <= 6 || strcmp(e->d_name + l - 6, ".jinja") != 0) continue;
        names = xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, compare_strings);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) {
            char file[4200];
            snprintf(file, sizeof file, "%s/%s", extra, names[i]);
            names[i][strlen(names[i]) - 6] = '\0';
            rc = add_template_file(src, names[i], file);
            if (rc == 0 && !src->origin) src->origin = xstrdup(extra);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* tokenizer_config.json / chat_template.json "chat_template": a string, or a list of
 * {"name", "template"}. */
static int load_config_templates(ChatTemplateSource *src, const json_t *value, const char *path) {
    if (json_is_string(value)) {
        add_template(src, "default", json_string_value(value), json_string_length(value));
    } else if (json_is_array(value)) {
        size_t i;
        json_t *item;
        json_array_foreach(value, i, item) {
            const json_t *name = json_object_get(item, "name"),
                         *text = json_object_get(item, "template");
            if (!json_is_string(name) || !json_is_string(text))
                return err_set(
                    "%s: chat_template[%zu]: expected {\"name\": string, \"template\": string}",
                    path, i);
            add_template(src, json_string_value(name), json_string_value(text),
                         json_string_length(text));
        }
    } else if (value && !json_is_null(value)) { /* an absent key is no template */
        return err_set("%s: chat_template: expected a string or a list of {\"name\", \"template\"}",
                       path);
    }
    if (src->ntemplates) src->origin = xstrdup(path);
    return 0;
}

/* A special token's text: a string, or an AddedToken dict {"content": ...}. NULL for null
 * or anything else. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static const char *const named_tokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

/* transformers 5's special_tokens_map: the named tokens, then every other "*_token" key
 * holding a token, then a name->token "extra_special_tokens" dict. */
static void collect_special_tokens(json_t *out, const json_t *config) {
    for (size_t i = 0; i < sizeof named_tokens / sizeof *named_tokens; i++) {
        const char *t = token_text(json_object_get(config, named_tokens[i]));
        if (t && !json_object_get(out, named_tokens[i]))
            json_object_set_new(out, named_tokens[i], json_string(t));
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)config, key, v) {
        size_t l = strlen(key);
        if (l < 6 || strcmp(key + l - 6, "_token") != 0 || json_object_get(out, key)) continue;
        const char *t = token_text(v);
        if (t) json_object_set_new(out, key, json_string(t));
    }
    const json_t *extra = json_object_get(config, "extra_special_tokens");
    if (json_is_object(extra)) {
        json_object_foreach((json_t *)extra, key, v) {
            const char *t = token_text(v);
            if (t && !json_object_get(out, key)) json_object_set_new(out, key, json_string(t));
        }
    }
}

int chat_template_source_load(const char *dir, ChatTemplateSource *out) {
    memset(out, 0, sizeof *out);
    if (!dir_exists(dir)) return err_set("%s: not a directory", dir);
    out->special_tokens = json_object();
    char path[4096];
    json_t *config = NULL;
    if (path_join(path, sizeof path, dir, "tokenizer_config.json") != 0) goto fail;
    if (file_exists(path) && json_load_path(path, &config) != 0) goto fail;
    if (config && !json_is_object(config)) {
        err_set("%s: expected a JSON object", path);
        goto fail;
    }
    if (load_jinja_files(out, dir) != 0) goto fail;
    if (out->ntemplates == 0 && config &&
        load_config_templates(out, json_object_get(config, "chat_template"), path) != 0)
        goto fail;
    if (out->ntemplates == 0) {
        /* Processors' legacy chat_template.json {"chat_template": ...}. */
        char legacy[4096];
        if (path_join(legacy, sizeof legacy, dir, "chat_template.json") != 0) goto fail;
        if (file_exists(legacy)) {
            json_t *j;
            if (json_load_path(legacy, &j) != 0) goto fail;
            int rc = json_is_object(j)
                         ? load_config_templates(out, json_object_get(j, "chat_template"), legacy)
                         : err_set("%s: expected a JSON object", legacy);
            json_decref(j);
            if (rc != 0) goto fail;
        }
    }
    if (config) collect_special_tokens(out->special_tokens, config);
    /* transformers 5 reads special_tokens_map.json only when tokenizer_config.json has no
     * added_tokens_decoder, and then its entries override the config's. */
    char map_path[4096];
    if (path_join(map_path, sizeof map_path, dir, "special_tokens_map.json") != 0) goto fail;
    if (file_exists(map_path) && !(config && json_object_get(config, "added_tokens_decoder"))) {
        json_t *map;
        if (json_load_path(map_path, &map) != 0) goto fail;
        if (!json_is_object(map)) {
            json_decref(map);
            err_set("%s: expected a JSON object", map_path);
            goto fail;
        }
        const char *key;
        json_t *v;
        json_object_foreach(map, key, v) {
            size_t l = strlen(key);
            if (l < 6 || strcmp(key + l - 6, "_token") != 0) continue;
            const char *t = token_text(v);
            if (t)
                json_object_set_new(out->special_tokens, key, json_string(t));
            else if (json_is_null(v))
                json_object_del(out->special_tokens, key);
        }
        json_t *extra = json_object_get(map, "extra_special_tokens");
        if (json_is_object(extra)) collect_special_tokens(out->special_tokens, map);
        json_decref(map);
    }
    json_decref(config);
    return 0;
fail:
    json_decref(config);
    chat_template_source_free(out);
    return -1;
}

const char *chat_template_source_pick(const ChatTemplateSource *src, bool has_tools) {
    const char *def = NULL, *tool_use = NULL;
    for (size_t i = 0; i < src->ntemplates; i++) {
        if (strcmp(src->names[i], "default") == 0) def = src->templates[i];
        if (strcmp(src->names[i], "tool_use") == 0) tool_use = src->templates[i];
    }
    if (has_tools && tool_use) return tool_use;
    if (def) return def;
    if (src->ntemplates == 0) {
        err_set("no chat template: the directory has no chat_template.jinja and its "
                "tokenizer_config.json "
                "has no \"chat_template\"");
        return NULL;
    }
    char names[1024] = "";
    for (size_t i = 0; i < src->ntemplates; i++) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s'%s'", i ? ", " : "", src->names[i]);
    }
    err_set("%s: several chat templates and none named 'default' (names: %s)",
            src->origin ? src->origin : "?", names);
    return NULL;
}
