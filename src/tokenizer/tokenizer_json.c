/* Loading tokenizer.json: the top level, and the JSON helpers the component parsers share. */
#include "tokenizer/tok_internal.h"

#include "tokenizer/auto_tokenizer.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tokjson_type(const json_t *j, const char *where) {
    if (!json_is_object(j)) {
        err_set("%s: expected an object with a \"type\"", where);
        return NULL;
    }
    const json_t *t = json_object_get(j, "type");
    if (!json_is_string(t)) {
        err_set("%s: key 'type': expected a string", where);
        return NULL;
    }
    return json_string_value(t);
}

int tokjson_bool(const json_t *j, const char *key, bool dflt, bool *out, const char *where) {
    *out = dflt;
    if (json_get_bool(j, key, out) < 0) return err_prefix("%s", where);
    return 0;
}

int tokjson_string(const json_t *j, const char *key, const char **out, size_t *len,
                   const char *where) {
    const json_t *v = json_object_get(j, key);
    if (!json_is_string(v)) return err_set("%s: key '%s': expected a string", where, key);
    *out = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

int tokjson_pattern(const json_t *j, const char *key, TokRegex **re, const char *where) {
    const json_t *p = json_object_get(j, key);
    const json_t *s = json_is_object(p) ? json_object_get(p, "String") : NULL;
    const json_t *r = json_is_object(p) ? json_object_get(p, "Regex") : NULL;
    if (!(json_is_string(s) || json_is_string(r)))
        return err_set("%s: key '%s': expected {\"String\": \"...\"} or {\"Regex\": \"...\"}",
                       where, key);
    const json_t *v = s ? s : r;
    if (tokregex_compile(re, json_string_value(v), json_string_length(v), s != NULL) != 0)
        return err_prefix("%s: key '%s'", where, key);
    return 0;
}

int tokjson_char(const json_t *j, const char *key, uint32_t *cp, const char *where) {
    const char *s = NULL;
    size_t len = 0;
    if (tokjson_string(j, key, &s, &len, where) != 0) return -1;
    if (!utf8_single_char(s, len, cp))
        return err_set("%s: key '%s': expected exactly one character, got \"%s\"", where, key, s);
    return 0;
}

/* Metaspace's prepend_scheme, with the older add_prefix_space (false => "never"). */
int tokjson_prepend_scheme(const json_t *j, PrependScheme *out, const char *where) {
    *out = PREPEND_ALWAYS;
    const json_t *v = json_object_get(j, "prepend_scheme");
    if (v && !json_is_null(v)) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(s, "always") == 0)
            *out = PREPEND_ALWAYS;
        else if (strcmp(s, "first") == 0)
            *out = PREPEND_FIRST;
        else if (strcmp(s, "never") == 0)
            *out = PREPEND_NEVER;
        else
            return err_set("%s: key 'prepend_scheme': expected \"always\", \"first\" or "
                           "\"never\"",
                           where);
    }
    bool add_prefix_space = true;
    if (tokjson_bool(j, "add_prefix_space", true, &add_prefix_space, where) != 0) return -1;
    if (!add_prefix_space) {
        if (*out != PREPEND_NEVER && v && !json_is_null(v))
            return err_set("%s: add_prefix_space false does not match prepend_scheme", where);
        *out = PREPEND_NEVER;
    }
    return 0;
}

/* An optional component: absent or null leaves *out NULL. */
#define PARSE_OPTIONAL(TYPE, parse, key, field)                                                    \
    do {                                                                                           \
        const json_t *v_ = json_object_get(root, key);                                             \
        if (v_ && !json_is_null(v_)) {                                                             \
            impl->field = xcalloc(1, sizeof(TYPE));                                                \
            if (parse(impl->field, v_, key) != 0) return -1;                                       \
        }                                                                                          \
    } while (0)

static int parse_root(TokenizerImpl *impl, const json_t *root) {
    if (!json_is_object(root)) return err_set("expected a JSON object at the top level");
    const json_t *version = json_object_get(root, "version");
    if (version && !(json_is_string(version) && strcmp(json_string_value(version), "1.0") == 0))
        return err_set("key 'version': unsupported tokenizer.json version (expected \"1.0\")");
    const json_t *model = json_object_get(root, "model");
    if (!model) return err_set("missing key 'model'");
    const char *type = tokjson_type(model, "model");
    if (!type) return -1;
    if (strcmp(type, "BPE") != 0)
        return err_set("model: unsupported model type \"%s\" (supported: BPE)", type);
    if (bpe_parse(&impl->bpe, model, "model") != 0) return -1;
    PARSE_OPTIONAL(Normalizer, normalizer_parse, "normalizer", normalizer);
    PARSE_OPTIONAL(PreTokenizer, pretok_parse, "pre_tokenizer", pretok);
    PARSE_OPTIONAL(PostProcessor, postproc_parse, "post_processor", post);
    PARSE_OPTIONAL(Decoder, decoder_parse, "decoder", decoder);
    return added_vocab_build(&impl->added, json_object_get(root, "added_tokens"), impl->bpe,
                             impl->normalizer);
}

static void impl_free(TokenizerImpl *impl) {
    if (!impl) return;
    bpe_free(impl->bpe);
    if (impl->normalizer) normalizer_free(impl->normalizer);
    if (impl->pretok) pretok_free(impl->pretok);
    if (impl->post) postproc_free(impl->post);
    if (impl->decoder) decoder_free(impl->decoder);
    free(impl->normalizer);
    free(impl->pretok);
    free(impl->post);
    free(impl->decoder);
    added_vocab_free(&impl->added);
    free(impl);
}

void tokenizer_free(Tokenizer *tok) {
    if (!tok) return;
    impl_free(tok->impl);
    tok->impl = NULL;
    tok->vocab_size = tok->n_tokens = 0;
}

/* Builds the tokenizer from tokenizer.json's text; with `in`, after the rewrite of
 * auto_tokenizer.h (what AutoTokenizer builds from the directory). */
static int load_text(Tokenizer *tok, const char *json_text, size_t len, const char *source,
                     const AutoTokenizerInputs *in) {
    memset(tok, 0, sizeof *tok);
    /* Vocabularies may hold "\u0000": allow NUL in strings (all our reads use lengths). */
    json_error_t jerr;
    json_t *root = json_loadb(json_text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root)
        return err_set("%s:%d:%d: invalid JSON: %s", source, jerr.line, jerr.column, jerr.text);
    bool split_special = false;
    if (in && (!json_is_object(root) ||
               auto_tokenizer_rewrite(root, json_text, len, in, &split_special) != 0)) {
        if (!json_is_object(root)) err_set("%s: expected a JSON object at the top level", source);
        json_decref(root);
        return -1;
    }
    TokenizerImpl *impl = xcalloc(1, sizeof *impl);
    int rc = parse_root(impl, root);
    json_decref(root);
    if (rc != 0) {
        impl_free(impl);
        return err_prefix("%s", source);
    }
    impl->encode_special_tokens = split_special;
    tok->impl = impl;
    tok->vocab_size = bpe_vocab_count(impl->bpe);
    /* len(tokenizer): model vocab plus added tokens whose id is not a model id */
    int32_t n = tok->vocab_size;
    for (size_t i = 0; i < impl->added.n; i++)
        if (!bpe_id_to_token(impl->bpe, impl->added.tokens[i].id, NULL)) n++;
    tok->n_tokens = n;
    return 0;
}

int tokenizer_load_json(Tokenizer *tok, const char *json_text, size_t len, const char *source) {
    return load_text(tok, json_text, len, source, NULL);
}

/* Reads dir/name when it exists (*root NULL when not). */
static int load_optional(const char *dir, const char *name, char *path, size_t cap, json_t **root) {
    *root = NULL;
    if (path_join(path, cap, dir, name) != 0) return -1;
    return file_exists(path) ? json_load_path(path, root) : 0;
}

const char *const tokenizer_load_classes[] = {"AutoTokenizer",      "PreTrainedTokenizerFast",
                                              "TokenizersBackend",  "LlamaTokenizer",
                                              "LlamaTokenizerFast", NULL};

int tokenizer_load_options(Tokenizer *tok, const char *path, const TokenizerLoadOptions *opts) {
    memset(tok, 0, sizeof *tok);
    if (opts && opts->tokenizer_class) {
        bool known = false;
        for (size_t i = 0; tokenizer_load_classes[i]; i++)
            known |= strcmp(opts->tokenizer_class, tokenizer_load_classes[i]) == 0;
        if (!known)
            return err_set("tokenizer class \"%s\" is not built (expected AutoTokenizer, "
                           "PreTrainedTokenizerFast, TokenizersBackend, LlamaTokenizer or "
                           "LlamaTokenizerFast)",
                           opts->tokenizer_class);
    }
    char file[4096], config_path[4096], model_config_path[4096];
    bool is_dir = dir_exists(path);
    if (is_dir) {
        if (path_join(file, sizeof file, path, "tokenizer.json") != 0) return -1;
        if (!file_exists(file))
            return err_set("%s: no tokenizer.json in this directory (only the tokenizer.json "
                           "format of the `tokenizers` library is supported)",
                           path);
    } else {
        if (snprintf(file, sizeof file, "%s", path) >= (int)sizeof file)
            return err_set("%s: path too long", path);
    }
    /* A directory is what AutoTokenizer.from_pretrained reads: tokenizer_config.json and
     * config.json beside tokenizer.json decide the class (auto_tokenizer.h). A file is read
     * as tokenizers.Tokenizer.from_file reads it. */
    json_t *config = NULL, *model_config = NULL;
    if (is_dir && (load_optional(path, "tokenizer_config.json", config_path, sizeof config_path,
                                 &config) != 0 ||
                   load_optional(path, "config.json", model_config_path, sizeof model_config_path,
                                 &model_config) != 0)) {
        json_decref(config);
        return -1;
    }
    if ((config && !json_is_object(config)) || (model_config && !json_is_object(model_config))) {
        err_set("%s: expected a JSON object",
                config && !json_is_object(config) ? config_path : model_config_path);
        json_decref(config);
        json_decref(model_config);
        return -1;
    }
    char *text;
    size_t len;
    int rc = read_file(file, &text, &len);
    if (rc == 0) {
        AutoTokenizerInputs in = {config,
                                  model_config,
                                  opts ? opts->legacy : -1,
                                  opts ? opts->tokenizer_class : NULL,
                                  config_path,
                                  model_config_path};
        rc = load_text(tok, text, len, file, is_dir ? &in : NULL);
        free(text);
    }
    json_decref(config);
    json_decref(model_config);
    return rc;
}

int tokenizer_load(Tokenizer *tok, const char *path) {
    return tokenizer_load_options(tok, path, NULL);
}
