/* AutoTokenizer's class choice and what the chosen class changes in tokenizer.json (see
 * auto_tokenizer.h for the rules and where transformers states them). */
#include "tokenizer/auto_tokenizer.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool llama_overridden(const char *model_type) {
    return model_type && bsearch(&model_type, auto_tokenizer_llama_overridden,
                                 auto_tokenizer_llama_overridden_count,
                                 sizeof auto_tokenizer_llama_overridden[0], cmp_str) != NULL;
}

/* A string member of an optional object: NULL when the object or the member is absent/null;
 * -1 with an error when the member has another type. */
static int opt_string(const json_t *obj, const char *key, const char **out, const char *file) {
    *out = NULL;
    if (!obj) return 0;
    if (json_get_string(obj, key, out) < 0) return err_prefix("%s", file);
    return 0;
}

static bool is_llama_class(const char *name) {
    return strcmp(name, "LlamaTokenizer") == 0 || strcmp(name, "LlamaTokenizerFast") == 0;
}

/* The class AutoTokenizer (or the forced class) builds is LlamaTokenizer (rule 1 of
 * auto_tokenizer.h). */
static int picks_llama(const AutoTokenizerInputs *in, const char *json_text, size_t len,
                       bool *out) {
    *out = false;
    if (in->forced_class && strcmp(in->forced_class, "AutoTokenizer") != 0) {
        *out = is_llama_class(in->forced_class);
        return 0;
    }
    const char *declared = NULL, *model_type = NULL;
    if (opt_string(in->tokenizer_config, "tokenizer_class", &declared, in->config_source) != 0)
        return -1;
    if (!declared &&
        opt_string(in->model_config, "tokenizer_class", &declared, in->model_config_source) != 0)
        return -1;
    if (opt_string(in->model_config, "model_type", &model_type, in->model_config_source) != 0)
        return -1;
    if (!declared || !is_llama_class(declared)) return 0;
    /* transformers looks for the text "ByteLevel" (quoted) anywhere in the file */
    if (memmem(json_text, len, "\"ByteLevel\"", 11)) return 0;
    *out = !llama_overridden(model_type);
    return 0;
}

/* An optional bool of tokenizer_config.json; null counts as absent. */
static int config_bool(const AutoTokenizerInputs *in, const char *key, bool dflt, bool *out) {
    *out = dflt;
    if (in->tokenizer_config && json_get_bool(in->tokenizer_config, key, out) < 0)
        return err_prefix("%s", in->config_source);
    return 0;
}

static json_t *metaspace_pretok(const char *scheme) {
    return json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", "\xe2\x96\x81",
                     "prepend_scheme", scheme, "split", 0);
}

static json_t *llama_decoder(bool add_prefix_space) {
    json_t *seq =
        json_pack("[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]", "type", "Replace", "pattern", "String",
                  "\xe2\x96\x81", "content", " ", "type", "ByteFallback", "type", "Fuse");
    if (add_prefix_space)
        json_array_append_new(seq, json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content",
                                             " ", "start", 1, "stop", 0));
    return json_pack("{s:s, s:o}", "type", "Sequence", "decoders", seq);
}

/* tokenizer_config.json's "added_tokens_decoder" ({"id": {content, flags}}) as tokenizer.json's
 * "added_tokens" array, in id order (the order transformers adds them in). */
static int added_tokens_from_config(const json_t *dec, const char *file, json_t **out) {
    *out = NULL;
    if (!json_is_object(dec))
        return err_set("%s: key 'added_tokens_decoder': expected an object of id: token", file);
    size_t n = json_object_size(dec);
    long *ids = malloc((n ? n : 1) * sizeof *ids);
    const char *key;
    json_t *v;
    size_t k = 0;
    json_object_foreach((json_t *)dec, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        if (*key == '\0' || *end != '\0' || id < 0 || id > INT32_MAX || !json_is_object(v) ||
            !json_is_string(json_object_get(v, "content"))) {
            free(ids);
            return err_set("%s: added_tokens_decoder[\"%s\"]: expected a token id mapped to "
                           "{\"content\": ..., ...}",
                           file, key);
        }
        ids[k++] = id;
    }
    /* insertion sort: a few dozen entries */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            long t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%ld", ids[i]);
        json_t *tok = json_deep_copy(json_object_get(dec, name));
        json_object_del(tok, "__type");
        json_object_set_new(tok, "id", json_integer(ids[i]));
        json_array_append_new(arr, tok);
    }
    free(ids);
    *out = arr;
    return 0;
}

/* Rule 1: the backend LlamaTokenizer.__init__ builds. */
static int rewrite_llama(json_t *root, const AutoTokenizerInputs *in) {
    bool add_prefix_space, legacy;
    if (config_bool(in, "add_prefix_space", true, &add_prefix_space) != 0 ||
        config_bool(in, "legacy", false, &legacy) != 0)
        return -1;
    if (in->legacy >= 0) legacy = in->legacy != 0;
    const char *scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";

    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return err_set("missing key 'model'");
    const json_t *type = json_object_get(model, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0)
        return err_set("model: LlamaTokenizer (%s) needs a BPE model", in->config_source);
    json_object_set_new(model, "unk_token", json_null());
    json_object_set_new(model, "dropout", json_null());
    json_object_set_new(model, "continuing_subword_prefix", json_null());
    json_object_set_new(model, "end_of_word_suffix", json_null());
    json_object_set_new(model, "fuse_unk", json_true());
    json_object_set_new(model, "byte_fallback", json_true());
    json_object_set_new(model, "ignore_merges", json_false());
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer", metaspace_pretok(scheme));
    json_object_set_new(root, "decoder", llama_decoder(add_prefix_space));

    const json_t *dec =
        in->tokenizer_config ? json_object_get(in->tokenizer_config, "added_tokens_decoder") : NULL;
    if (dec && !json_is_null(dec)) {
        json_t *added;
        if (added_tokens_from_config(dec, in->config_source, &added) != 0) return -1;
        json_object_set_new(root, "added_tokens", added);
    }
    return 0;
}

/* Whether an added token has this content. */
static bool is_added(const json_t *added, const char *content) {
    size_t i;
    json_t *t;
    json_array_foreach(added, i, t) {
        const json_t *c = json_object_get(t, "content");
        if (json_is_string(c) && strcmp(json_string_value(c), content) == 0) return true;
    }
    return false;
}

/* Appends a special token named in tokenizer_config.json (`v`: a string, or a serialized
 * AddedToken whose flags it keeps) unless an added token already has its content. Its id is
 * the one added_vocab_build gives every added token, as tokenizers' AddedVocabulary does: its
 * vocabulary id, else the next id after the vocabulary and the tokens before it. */
static int add_named(json_t *root, const json_t *v, const char *key, const char *file) {
    if (!v || json_is_null(v)) return 0;
    const json_t *content = json_is_object(v) ? json_object_get(v, "content") : v;
    if (!json_is_string(content))
        return err_set("%s: key '%s': expected a token string or {\"content\": ...}", file, key);
    const char *s = json_string_value(content);
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_array(added)) {
        added = json_array();
        json_object_set_new(root, "added_tokens", added);
    }
    if (*s == '\0' || is_added(added, s)) return 0;
    json_t *tok = json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", s, "single_word", 0,
                            "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
    if (json_is_object(v)) { /* a serialized AddedToken keeps its flags, but is special */
        static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (size_t f = 0; f < 4; f++)
            if (json_is_boolean(json_object_get(v, flags[f])))
                json_object_set(tok, flags[f], json_object_get(v, flags[f]));
    }
    json_array_append_new(added, tok);
    return 0;
}

/* Rule 4: the special tokens tokenizer_config.json names that no added token has are added, in
 * transformers' order: bos, eos, unk, sep, pad, cls, mask (LlamaTokenizer's defaults <s>, </s>,
 * <unk> for keys left out), the model-specific ones (a dict
 * "extra_special_tokens"), then the extra ones (a list "extra_special_tokens", else
 * "additional_special_tokens"). */
static int add_named_special_tokens(json_t *root, const AutoTokenizerInputs *in, bool llama) {
    static const char *const named[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    /* LlamaTokenizer's defaults for a key the config leaves out (null stays none) */
    static const char *const llama_defaults[] = {"<s>", "</s>", "<unk>", NULL, NULL, NULL, NULL};
    const json_t *cfg = in->tokenizer_config;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const json_t *v = json_object_get(cfg, named[i]);
        json_t *dflt = !v && llama && llama_defaults[i] ? json_string(llama_defaults[i]) : NULL;
        int rc = add_named(root, dflt ? dflt : v, named[i], in->config_source);
        json_decref(dflt);
        if (rc != 0) return -1;
    }
    const json_t *extra = json_object_get(cfg, "extra_special_tokens");
    const json_t *extras = extra;
    if (json_is_object(extra)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)extra, k, v) {
            if (add_named(root, v, "extra_special_tokens", in->config_source) != 0) return -1;
        }
        extras = NULL;
    }
    if (!json_is_array(extras) || json_array_size(extras) == 0)
        extras = json_object_get(cfg, "additional_special_tokens");
    if (extras && !json_is_null(extras) && !json_is_array(extras))
        return err_set("%s: key '%s': expected a list of tokens", in->config_source,
                       extras == extra ? "extra_special_tokens" : "additional_special_tokens");
    size_t i;
    json_t *v;
    json_array_foreach(extras, i, v) {
        if (add_named(root, v, "extra_special_tokens", in->config_source) != 0) return -1;
    }
    return 0;
}

int auto_tokenizer_rewrite(json_t *root, const char *json_text, size_t len,
                           const AutoTokenizerInputs *in, bool *split_special_tokens) {
    *split_special_tokens = false;
    bool llama;
    if (picks_llama(in, json_text, len, &llama) != 0) return -1;
    if (llama && rewrite_llama(root, in) != 0) return -1;
    if (in->tokenizer_config && add_named_special_tokens(root, in, llama) != 0) return -1;
    return config_bool(in, "split_special_tokens", false, split_special_tokens);
}
