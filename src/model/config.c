#include "model/config.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "model/config_longrope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *model_type;
    const char *architecture;
    ModelArch arch;
} known_families[] = {
    {"llama", "LlamaForCausalLM", ARCH_LLAMA},    {"mistral", "MistralForCausalLM", ARCH_MISTRAL},
    {"qwen2", "Qwen2ForCausalLM", ARCH_QWEN2},    {"qwen3", "Qwen3ForCausalLM", ARCH_QWEN3},
    {"phi3", "Phi3ForCausalLM", ARCH_PHI3},       {"smollm3", "SmolLM3ForCausalLM", ARCH_SMOLLM3},
    {"gemma2", "Gemma2ForCausalLM", ARCH_GEMMA2}, {"gemma3_text", "Gemma3ForCausalLM", ARCH_GEMMA3},
};
#define N_FAMILIES (sizeof known_families / sizeof *known_families)

const char *model_arch_name(ModelArch arch) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (known_families[i].arch == arch) return known_families[i].architecture;
    return "?";
}

/* A required positive integer. */
static int get_size(const json_t *root, const char *key, int *out) {
    int64_t v;
    int found = json_get_int64(root, key, &v);
    if (found < 0) return -1;
    if (found == 0) return err_set("key '%s': missing (a positive integer is required)", key);
    if (v <= 0 || v > (1 << 30))
        return err_set("key '%s': %lld is not a valid size", key, (long long)v);
    *out = (int)v;
    return 0;
}

static int get_double_or(const json_t *obj, const char *key, double fallback, double *out) {
    *out = fallback;
    return json_get_double(obj, key, out) < 0 ? -1 : 0;
}

static int parse_family(ModelConfig *cfg, const json_t *root) {
    const char *model_type = NULL;
    if (json_get_string(root, "model_type", &model_type) < 0) return -1;
    if (!model_type)
        return err_set("key 'model_type': missing (expected llama, mistral, qwen2, qwen3, phi3, "
                       "smollm3, gemma2 or gemma3_text)");
    /* AutoModelForCausalLM builds Gemma3ForConditionalGeneration for this type: the vision tower
     * and the text tower under model.language_model (language_model.model on the Hub). */
    if (strcmp(model_type, "gemma3") == 0)
        return err_set("key 'model_type': \"gemma3\" is the multimodal "
                       "Gemma3ForConditionalGeneration (text_config, vision tower), which is not "
                       "supported; its text tower is a Gemma3ForCausalLM (model_type "
                       "gemma3_text): save that with transformers and train it, or use a "
                       "text-only checkpoint (gemma-3-1b, gemma-3-270m)");
    for (size_t i = 0; i < N_FAMILIES; i++) {
        if (strcmp(model_type, known_families[i].model_type) == 0) {
            cfg->arch = known_families[i].arch;
            return 0;
        }
    }
    return err_set("key 'model_type': \"%s\" is not supported (expected llama, mistral, qwen2, "
                   "qwen3, phi3, smollm3, gemma2 or gemma3_text)",
                   model_type);
}

static int parse_rope_type(const char *s, RopeType *out) {
    static const struct {
        const char *name;
        RopeType type;
    } types[] = {{"default", ROPE_DEFAULT}, {"linear", ROPE_LINEAR}, {"dynamic", ROPE_DYNAMIC},
                 {"llama3", ROPE_LLAMA3},   {"yarn", ROPE_YARN},     {"longrope", ROPE_LONGROPE}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        if (strcmp(s, types[i].name) == 0) {
            *out = types[i].type;
            return 0;
        }
    }
    return err_set("RoPE type \"%s\" is not supported (expected default, linear, dynamic, "
                   "llama3, yarn or longrope)",
                   s);
}

/* The rotary dims of a head (Phi-4-mini: 0.75): top-level partial_rotary_factor, the RoPE dict
 * p's value winning, as standardize_rope_params only fills it in from the top level. */
static int parse_rotary_dim(ModelConfig *cfg, const json_t *root, const json_t *p) {
    double partial = 1.0;
    if (json_get_double(root, "partial_rotary_factor", &partial) < 0 ||
        (p && json_get_double(p, "partial_rotary_factor", &partial) < 0))
        return -1;
    double rot = floor(cfg->head_dim * partial); /* Python's int() of a positive number */
    if (!(partial > 0 && partial <= 1) || rot < 2 || (int)rot % 2 != 0)
        return err_set("key 'partial_rotary_factor': %g gives %g rotary dims of head_dim %d (a "
                       "factor in (0, 1] giving an even number is required)",
                       partial, rot, cfg->head_dim);
    cfg->rotary_dim = (int)rot;
    return 0;
}

/* One RoPE parameter dict p (NULL: none, the default type) into r: its rope_type (or older
 * "type"), its rope_theta or else `theta`, and the scaling type's keys. `key` names p in
 * messages. */
static int parse_rope_dict(ModelConfig *cfg, const json_t *root, const json_t *p, const char *key,
                           double theta, RopeConfig *r) {
    /* rope_type wins over the older "type" spelling: read "type" first, then let it override. */
    const char *type = "default";
    if (p && (json_get_string(p, "type", &type) < 0 || json_get_string(p, "rope_type", &type) < 0))
        return err_prefix("key '%s'", key);
    if (cfg->arch == ARCH_PHI3) type = phi3_rope_type(type);
    if (parse_rope_type(type, &r->type) != 0) return err_prefix("key '%s'", key);
    if (cfg->arch == ARCH_PHI3 && r->type != ROPE_DEFAULT && r->type != ROPE_LONGROPE)
        return err_set("key '%s': Phi-3 takes RoPE type default or longrope, not \"%s\"", key,
                       type);
    /* Gemma3RotaryEmbedding keeps one set of frequencies per layer type: the dynamic and longrope
     * updates, which recompute them from the batch's length, are not built per layer type here. */
    if (cfg->arch == ARCH_GEMMA3 && (r->type == ROPE_DYNAMIC || r->type == ROPE_LONGROPE))
        return err_set("key '%s': Gemma 3 takes RoPE type default, linear, llama3 or yarn, not "
                       "\"%s\"",
                       key, type);
    if (get_double_or(p, "rope_theta", theta, &r->theta) != 0) return err_prefix("key '%s'", key);
    if (r->theta <= 0) return err_set("key 'rope_theta': must be positive");

    double max_pos = (double)cfg->max_position_embeddings;
    if (get_double_or(p, "factor", 1.0, &r->factor) != 0 ||
        get_double_or(p, "low_freq_factor", 1.0, &r->low_freq_factor) != 0 ||
        get_double_or(p, "high_freq_factor", 4.0, &r->high_freq_factor) != 0 ||
        get_double_or(p, "original_max_position_embeddings", max_pos, &r->original_max_position) !=
            0 ||
        get_double_or(p, "attention_factor", -1.0, &r->attention_factor) != 0 ||
        get_double_or(p, "beta_fast", 32.0, &r->beta_fast) != 0 ||
        get_double_or(p, "beta_slow", 1.0, &r->beta_slow) != 0 ||
        get_double_or(p, "mscale", 0.0, &r->mscale) != 0 ||
        get_double_or(p, "mscale_all_dim", 0.0, &r->mscale_all_dim) != 0)
        return err_prefix("key '%s'", key);
    if (r->type == ROPE_LONGROPE) {
        if (!p) return err_set("key '%s': longrope needs short_factor and long_factor", key);
        return longrope_parse(cfg, root, p) == 0 ? 0 : err_prefix("key '%s'", key);
    }
    r->truncate = true;
    if (p && json_get_bool(p, "truncate", &r->truncate) < 0) return err_prefix("key '%s'", key);
    if (r->type == ROPE_YARN && (!p || !json_object_get(p, "factor")))
        r->factor = max_pos / r->original_max_position; /* transformers' fallback */
    if (r->type != ROPE_DEFAULT && r->factor <= 0)
        return err_set("key '%s': factor must be positive", key);
    if (r->type == ROPE_LLAMA3 && r->high_freq_factor <= r->low_freq_factor)
        return err_set("key '%s': high_freq_factor must exceed low_freq_factor", key);
    return 0;
}

/* An optional RoPE object: root[key] when it is an object, NULL when absent or null. */
static int rope_object(const json_t *root, const char *key, const json_t **out) {
    *out = json_object_get(root, key);
    if (*out && json_is_null(*out)) *out = NULL;
    if (*out && !json_is_object(*out)) return err_set("key '%s': expected an object or null", key);
    return 0;
}

/* Gemma3TextConfig.convert_rope_params_to_dict: rope_parameters is keyed by layer type. The
 * full-attention layers take rope_parameters.full_attention updated by rope_scaling (v4: the
 * 4B+ checkpoints' linear factor 8), rope_theta defaulting to the top-level rope_theta, else
 * 1e6; the sliding layers take rope_parameters.sliding_attention, rope_theta defaulting to
 * rope_local_base_freq, else 1e4. */
static int parse_gemma3_rope(ModelConfig *cfg, const json_t *root) {
    const json_t *params, *scaling;
    if (rope_object(root, "rope_parameters", &params) != 0 ||
        rope_object(root, "rope_scaling", &scaling) != 0)
        return -1;
    const json_t *full = NULL, *sliding = NULL;
    if (params) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)params, k, v) {
            if (strcmp(k, "full_attention") != 0 && strcmp(k, "sliding_attention") != 0)
                return err_set("key 'rope_parameters': Gemma 3 keys it by layer type "
                               "(full_attention, sliding_attention), not \"%s\"",
                               k);
        }
        if (rope_object(params, "full_attention", &full) != 0 ||
            rope_object(params, "sliding_attention", &sliding) != 0)
            return err_prefix("key 'rope_parameters'");
    }
    double global_theta = 1000000.0, local_theta = 10000.0;
    if (get_double_or(root, "rope_theta", global_theta, &global_theta) != 0 ||
        get_double_or(root, "rope_local_base_freq", local_theta, &local_theta) != 0)
        return -1;
    json_t *merged = full ? json_deep_copy(full) : json_object();
    if (scaling) json_object_update(merged, (json_t *)scaling);
    const char *global_key = scaling ? "rope_scaling" : "rope_parameters.full_attention";
    int rc =
        parse_rotary_dim(cfg, root, merged) != 0 ||
                parse_rope_dict(cfg, root, merged, global_key, global_theta, &cfg->rope) != 0 ||
                parse_rope_dict(cfg, root, sliding, "rope_parameters.sliding_attention",
                                local_theta, &cfg->rope_local) != 0
            ? -1
            : 0;
    json_decref(merged);
    cfg->local_rope = true;
    return rc;
}

/* hf-formats.md §2.3: rope_parameters (v5) or rope_scaling (v4), then top-level rope_theta. */
static int parse_rope(ModelConfig *cfg, const json_t *root) {
    if (cfg->arch == ARCH_GEMMA3) return parse_gemma3_rope(cfg, root);
    const char *key = "rope_parameters";
    const json_t *p;
    if (rope_object(root, key, &p) != 0) return -1;
    if (!p) {
        key = "rope_scaling";
        if (rope_object(root, key, &p) != 0) return -1;
    }
    if (parse_rotary_dim(cfg, root, p) != 0) return -1;
    /* the family's default_theta in transformers: SmolLM3Config's is 2e6 */
    double top_theta;
    double default_theta = cfg->arch == ARCH_SMOLLM3 ? 2000000.0 : 10000.0;
    if (get_double_or(root, "rope_theta", default_theta, &top_theta) != 0) return -1;
    return parse_rope_dict(cfg, root, p, key, top_theta, &cfg->rope);
}

/* SmolLM3's NoPE layers (SmolLM3Config.__post_init__): no_rope_layers[l] == 0 marks layer l as
 * applying no RoPE (the list may be longer than the layers; SmolLM3Attention reads entry l only);
 * without the list every no_rope_layer_interval-th layer is one ((l + 1) % interval == 0). */
static int parse_nope_layers(ModelConfig *cfg, const json_t *root) {
    cfg->layer_nope = xcalloc((size_t)cfg->n_layers, sizeof *cfg->layer_nope);
    if (cfg->arch != ARCH_SMOLLM3) return 0;
    const json_t *list = json_object_get(root, "no_rope_layers");
    if (list && !json_is_null(list)) {
        if (!json_is_array(list) || (int)json_array_size(list) < cfg->n_layers)
            return err_set("key 'no_rope_layers': expected a list of at least %d 0/1 entries (one "
                           "per layer, 0 = no RoPE) or null",
                           cfg->n_layers);
        for (int l = 0; l < cfg->n_layers; l++) {
            const json_t *e = json_array_get(list, (size_t)l);
            if (!json_is_integer(e) && !json_is_boolean(e))
                return err_set("key 'no_rope_layers': entry %d is not an integer (1 = RoPE, 0 = "
                               "none)",
                               l);
            cfg->layer_nope[l] = json_is_integer(e) ? json_integer_value(e) == 0 : json_is_false(e);
        }
        return 0;
    }
    int64_t interval = 4;
    if (json_get_int64(root, "no_rope_layer_interval", &interval) < 0) return -1;
    if (interval <= 0)
        return err_set("key 'no_rope_layer_interval': %lld is not a positive integer",
                       (long long)interval);
    for (int l = 0; l < cfg->n_layers; l++)
        cfg->layer_nope[l] = (l + 1) % interval == 0;
    return 0;
}

/* layer_types, a list of "full_attention" / "sliding_attention" per layer, into
 * cfg->layer_sliding. */
static int read_layer_types(ModelConfig *cfg, const json_t *types) {
    if (!json_is_array(types) || (int)json_array_size(types) != cfg->n_layers)
        return err_set("key 'layer_types': expected a list of %d entries (one per layer)",
                       cfg->n_layers);
    for (int l = 0; l < cfg->n_layers; l++) {
        const char *t = json_string_value(json_array_get(types, (size_t)l));
        if (!t || (strcmp(t, "sliding_attention") != 0 && strcmp(t, "full_attention") != 0))
            return err_set("key 'layer_types': entry %d is not \"full_attention\" or "
                           "\"sliding_attention\"",
                           l);
        cfg->layer_sliding[l] = strcmp(t, "sliding_attention") == 0;
    }
    return 0;
}

/* SmolLM3's sliding layers: layer_types as given, else (SmolLM3Config.__post_init__) the NoPE
 * layers when use_sliding_window is true and sliding_window is set. transformers builds the
 * windowed mask for every "sliding_attention" layer whatever use_sliding_window says, and fails
 * without a window: so do we. */
static int parse_smollm3_window(ModelConfig *cfg, const json_t *root, int64_t window) {
    const json_t *types = json_object_get(root, "layer_types");
    if (types && !json_is_null(types)) {
        if (read_layer_types(cfg, types) < 0) return -1;
        for (int l = 0; l < cfg->n_layers; l++)
            if (cfg->layer_sliding[l] && window == 0)
                return err_set("key 'layer_types': layer %d is \"sliding_attention\" but "
                               "sliding_window is not set",
                               l);
    } else {
        bool use_window = false;
        if (json_get_bool(root, "use_sliding_window", &use_window) < 0) return -1;
        for (int l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = use_window && window > 0 && cfg->layer_nope[l];
    }
    cfg->sliding_window = (int)(window > (1 << 30) ? (1 << 30) : window);
    return 0;
}

/* Gemma 3's sliding layers (Gemma3TextConfig.__post_init__): layer_types as given, else every
 * layer but each sliding_window_pattern-th ((l + 1) % pattern != 0; 6 when absent). A sliding
 * layer also takes the local RoPE. transformers fails on a sliding layer without a window: so do
 * we. */
static int parse_gemma3_window(ModelConfig *cfg, const json_t *root, int64_t window) {
    const json_t *types = json_object_get(root, "layer_types");
    if (types && !json_is_null(types)) {
        if (read_layer_types(cfg, types) < 0) return -1;
    } else {
        int64_t pattern = 6;
        if (json_get_int64(root, "sliding_window_pattern", &pattern) < 0) return -1;
        if (pattern <= 0)
            return err_set("key 'sliding_window_pattern': %lld is not a positive integer",
                           (long long)pattern);
        for (int l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = (l + 1) % pattern != 0;
    }
    for (int l = 0; l < cfg->n_layers; l++)
        if (cfg->layer_sliding[l] && window == 0)
            return err_set("key 'sliding_window': null or 0, but layer %d is a sliding_attention "
                           "layer (a window length is required)",
                           l);
    cfg->sliding_window = (int)(window > (1 << 30) ? (1 << 30) : window);
    return 0;
}

/* Which layers attend through a sliding window (hf-formats.md §2.2). */
static int parse_sliding_window(ModelConfig *cfg, const json_t *root) {
    cfg->layer_sliding = xcalloc((size_t)cfg->n_layers, sizeof *cfg->layer_sliding);
    /* Gemma2Config's and Gemma3TextConfig's default; in Gemma 3 null is none */
    int64_t window = cfg->arch == ARCH_GEMMA2 || cfg->arch == ARCH_GEMMA3 ? 4096 : 0;
    const json_t *given = json_object_get(root, "sliding_window");
    if (cfg->arch == ARCH_GEMMA3 && given && json_is_null(given)) window = 0;
    if (json_get_int64(root, "sliding_window", &window) < 0) return -1;
    if (window < 0) return err_set("key 'sliding_window': must be positive or null");
    if (cfg->arch == ARCH_SMOLLM3) return parse_smollm3_window(cfg, root, window);
    if (cfg->arch == ARCH_GEMMA3) return parse_gemma3_window(cfg, root, window);
    /* Mistral and Phi-3 build a sliding-window mask for every layer when sliding_window is set. */
    bool use_window =
        cfg->arch == ARCH_MISTRAL || cfg->arch == ARCH_PHI3 || cfg->arch == ARCH_GEMMA2;
    if (cfg->arch == ARCH_QWEN2 || cfg->arch == ARCH_QWEN3) {
        use_window = false;
        if (json_get_bool(root, "use_sliding_window", &use_window) < 0) return -1;
    }
    if (cfg->arch == ARCH_LLAMA || window == 0) use_window = false;
    if (!use_window) return 0;
    cfg->sliding_window = (int)(window > (1 << 30) ? (1 << 30) : window);

    const json_t *types = json_object_get(root, "layer_types");
    if (types && json_is_array(types)) {
        if ((int)json_array_size(types) != cfg->n_layers)
            return err_set("key 'layer_types': %zu entries for %d layers", json_array_size(types),
                           cfg->n_layers);
        for (int l = 0; l < cfg->n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (!t) return err_set("key 'layer_types': entry %d is not a string", l);
            cfg->layer_sliding[l] = strcmp(t, "sliding_attention") == 0;
        }
        return 0;
    }
    if (cfg->arch == ARCH_GEMMA2) { /* Gemma2Config: sliding on even layers, full on odd ones */
        for (int l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = l % 2 == 0;
        return 0;
    }
    int64_t max_window_layers = 0;
    if (cfg->arch == ARCH_QWEN2 || cfg->arch == ARCH_QWEN3) {
        max_window_layers = 28;
        if (json_get_int64(root, "max_window_layers", &max_window_layers) < 0) return -1;
    }
    for (int l = 0; l < cfg->n_layers; l++)
        cfg->layer_sliding[l] = l >= max_window_layers;
    return 0;
}

/* A soft-capping value of Gemma2Config: absent gives the default, null none (0). */
static int get_softcap(const json_t *root, const char *key, double fallback, float *out) {
    const json_t *v = json_object_get(root, key);
    double cap = fallback;
    if (v && json_is_null(v))
        cap = 0.0;
    else if (json_get_double(root, key, &cap) < 0)
        return -1;
    if (!(cap >= 0) || isinf(cap))
        return err_set("key '%s': %g is not a soft-capping value (a positive number or null)", key,
                       cap);
    *out = (float)cap;
    return 0;
}

/* Gemma2Config's and Gemma3TextConfig's own keys (transformers' modeling_gemma2.py,
 * modeling_gemma3.py): GELU-tanh MLP, (1 + w) norms around each block, sqrt(H)-scaled embeddings,
 * query_pre_attn_scalar and the two soft caps (Gemma 2: 50 and 30 by default; Gemma 3: none by
 * default), and Gemma 3's (1 + w) q/k norms. */
static int parse_gemma(ModelConfig *cfg, const json_t *root) {
    const char *act = "gelu_pytorch_tanh";
    if (json_get_string(root, "hidden_activation", &act) < 0) return -1;
    if (strcmp(act, "gelu_pytorch_tanh") != 0)
        return err_set("key 'hidden_activation': \"%s\" is not supported (expected "
                       "gelu_pytorch_tanh)",
                       act);
    bool bidirectional = false;
    if (json_get_bool(root, "use_bidirectional_attention", &bidirectional) < 0) return -1;
    if (bidirectional)
        return err_set("key 'use_bidirectional_attention': true is not supported (a causal LM "
                       "attends causally)");
    double scalar = 256.0;
    if (json_get_double(root, "query_pre_attn_scalar", &scalar) < 0) return -1;
    if (!(scalar > 0) || isinf(scalar))
        return err_set("key 'query_pre_attn_scalar': %g is not a positive number", scalar);
    cfg->attn_scale = (float)pow(scalar, -0.5); /* Python's scalar**-0.5, applied as fp32 */
    cfg->gemma_norms = true;
    cfg->mlp_act = MLP_ACT_GELU_TANH;
    cfg->embed_scaled = true;
    cfg->qk_norm = cfg->arch == ARCH_GEMMA3;
    bool gemma2 = cfg->arch == ARCH_GEMMA2;
    return get_softcap(root, "attn_logit_softcapping", gemma2 ? 50.0 : 0.0, &cfg->attn_softcap) !=
                       0 ||
                   get_softcap(root, "final_logit_softcapping", gemma2 ? 30.0 : 0.0,
                               &cfg->final_softcap) != 0
               ? -1
               : 0;
}

static int parse_config(ModelConfig *cfg, const json_t *root) {
    if (!json_is_object(root)) return err_set("expected a JSON object");
    if (json_object_get(root, "quantization_config"))
        return err_set("key 'quantization_config': quantized checkpoints are not supported");
    if (json_object_get(root, "auto_map"))
        return err_set("key 'auto_map': models with remote code are not supported");
    if (parse_family(cfg, root) != 0) return -1;
    if (get_size(root, "vocab_size", &cfg->vocab_size) != 0 ||
        get_size(root, "hidden_size", &cfg->hidden_size) != 0 ||
        get_size(root, "intermediate_size", &cfg->intermediate_size) != 0 ||
        get_size(root, "num_hidden_layers", &cfg->n_layers) != 0 ||
        get_size(root, "num_attention_heads", &cfg->n_heads) != 0)
        return -1;

    int64_t v = cfg->n_heads;
    if (json_get_int64(root, "num_key_value_heads", &v) < 0) return -1;
    if (v <= 0 || cfg->n_heads % v != 0)
        return err_set("key 'num_key_value_heads': %lld does not divide num_attention_heads %d",
                       (long long)v, cfg->n_heads);
    cfg->n_kv_heads = (int)v;

    bool gemma = cfg->arch == ARCH_GEMMA2 || cfg->arch == ARCH_GEMMA3;
    v = gemma ? 256 : cfg->hidden_size / cfg->n_heads; /* Gemma2Config, Gemma3TextConfig: 256 */
    if (json_get_int64(root, "head_dim", &v) < 0) return -1;
    if (v <= 0 || v % 2 != 0)
        return err_set("key 'head_dim': %lld is not a positive even number", (long long)v);
    cfg->head_dim = (int)v;

    if (gemma) {
        if (parse_gemma(cfg, root) != 0) return -1;
    } else {
        const char *act = "silu";
        if (json_get_string(root, "hidden_act", &act) < 0) return -1;
        if (strcmp(act, "silu") != 0)
            return err_set("key 'hidden_act': \"%s\" is not supported (expected silu)", act);
        cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim); /* as attention's default */
    }

    if (get_double_or(root, "rms_norm_eps", 1e-6, &cfg->rms_norm_eps) != 0) return -1;
    int64_t default_max_pos = cfg->arch == ARCH_LLAMA     ? 2048
                              : cfg->arch == ARCH_MISTRAL ? 131072
                              : cfg->arch == ARCH_PHI3    ? 4096
                              : cfg->arch == ARCH_GEMMA2  ? 8192
                              : cfg->arch == ARCH_GEMMA3  ? 131072
                                                          : 32768;
    cfg->max_position_embeddings = default_max_pos;
    if (json_get_int64(root, "max_position_embeddings", &cfg->max_position_embeddings) < 0)
        return -1;

    /* the configs' defaults: SmolLM3Config, Gemma2Config and Gemma3TextConfig tie */
    cfg->tie_word_embeddings = cfg->arch == ARCH_SMOLLM3 || gemma;
    if (json_get_bool(root, "tie_word_embeddings", &cfg->tie_word_embeddings) < 0) return -1;

    bool attention_bias = false, mlp_bias = false;
    if (json_get_bool(root, "attention_bias", &attention_bias) < 0 ||
        json_get_bool(root, "mlp_bias", &mlp_bias) < 0)
        return -1;
    switch (cfg->arch) {
    case ARCH_LLAMA:
    case ARCH_SMOLLM3: /* SmolLM3Attention and its MLP are Llama's */
        cfg->qkv_bias = cfg->o_bias = attention_bias;
        cfg->mlp_bias = mlp_bias;
        break;
    case ARCH_MISTRAL:
        break;
    case ARCH_QWEN2:
        cfg->qkv_bias = true; /* hard-wired in Qwen2Attention */
        break;
    case ARCH_QWEN3:
        cfg->qkv_bias = cfg->o_bias = attention_bias;
        cfg->qk_norm = true;
        break;
    case ARCH_PHI3: /* no biases; fused qkv_proj and gate_up_proj */
        cfg->fused_qkv_mlp = true;
        break;
    case ARCH_GEMMA2: /* attention_bias on q, k, v and o; no MLP bias */
    case ARCH_GEMMA3:
        cfg->qkv_bias = cfg->o_bias = attention_bias;
        break;
    }

    const char *dtype = NULL;
    if (json_get_string(root, "torch_dtype", &dtype) < 0 ||
        json_get_string(root, "dtype", &dtype) < 0)
        return -1;
    snprintf(cfg->weights_dtype, sizeof cfg->weights_dtype, "%s", dtype ? dtype : "");

    /* SmolLM3Config's default is 128004 when the key is absent (null is None: no padding row);
     * Gemma2Config's and Gemma3TextConfig's is 0 */
    int64_t pad = gemma                                                                 ? 0
                  : cfg->arch == ARCH_SMOLLM3 && !json_object_get(root, "pad_token_id") ? 128004
                                                                                        : -1;
    if (json_get_int64(root, "pad_token_id", &pad) < 0) return -1;
    cfg->pad_token_id = pad >= 0 && pad < cfg->vocab_size ? (int)pad : -1;

    if (parse_rope(cfg, root) != 0 || parse_nope_layers(cfg, root) != 0) return -1;
    return parse_sliding_window(cfg, root);
}

int model_config_from_json(ModelConfig *cfg, const json_t *root, const char *source) {
    memset(cfg, 0, sizeof *cfg);
    if (parse_config(cfg, root) != 0) {
        model_config_free(cfg);
        return err_prefix("%s", source);
    }
    return 0;
}

int model_config_load(ModelConfig *cfg, const char *dir) {
    char path[4096];
    if (path_join(path, sizeof path, dir, "config.json") != 0) return -1;
    if (!file_exists(path))
        return err_set("%s: not found (is %s a Hugging Face model directory?)", path, dir);
    json_t *root;
    if (json_load_path(path, &root) != 0) return -1;
    int rc = model_config_from_json(cfg, root, path);
    json_decref(root);
    return rc;
}

void model_config_free(ModelConfig *cfg) {
    free(cfg->layer_sliding);
    free(cfg->layer_nope);
    cfg->layer_sliding = cfg->layer_nope = NULL;
    free(cfg->rope.short_factor);
    free(cfg->rope.long_factor);
    cfg->rope.short_factor = cfg->rope.long_factor = NULL;
}
