/* config.json parsing: transformers v4 spellings give the same configuration as the v5 files
 * the fixtures were saved with; defaults and sliding-window rules as transformers applies them;
 * one clear error per unsupported or inconsistent setting. */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "model/config.h"

#include <math.h>
#include <string.h>

static const char *const fixtures[] = {
    "llama_rope_llama3", "llama_rope_linear", "llama_rope_dynamic", "llama_rope_yarn",
    "llama_tied",        "qwen2_bias",        "qwen3_qknorm",       "mistral_window",
    "llama_bf16",        "phi3_longrope",     "phi3_window",        "phi4_mini_partial",
    "smollm3_nope",      "smollm3_window",    "gemma2_tiny"};

/* v5 -> v4: rope_parameters becomes top-level rope_theta plus rope_scaling (with the old "type"
 * key) or null, and dtype becomes torch_dtype. */
static json_t *to_v4(const json_t *v5) {
    json_t *v4 = json_deep_copy(v5);
    json_t *rp = json_object_get(v4, "rope_parameters");
    json_t *scaling = json_deep_copy(rp);
    json_object_set(v4, "rope_theta", json_object_get(rp, "rope_theta"));
    json_object_del(scaling, "rope_theta");
    const char *type = json_string_value(json_object_get(scaling, "rope_type"));
    if (strcmp(type, "default") == 0) {
        json_object_set_new(v4, "rope_scaling", json_null());
    } else {
        json_object_set_new(scaling, "type", json_string(type));
        json_object_del(scaling, "rope_type");
        json_object_set(v4, "rope_scaling", scaling);
    }
    json_decref(scaling);
    json_object_del(v4, "rope_parameters");
    json_object_set(v4, "torch_dtype", json_object_get(v4, "dtype"));
    json_object_del(v4, "dtype");
    return v4;
}

static void test_v4_equals_v5(void) {
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/models/%s/config.json", fixtures[i]);
        json_t *v5;
        CHECK(json_load_path(harness_source_path(path), &v5) == 0, "%s", err_msg());
        json_t *v4 = to_v4(v5);
        ModelConfig a, b;
        CHECK(model_config_from_json(&a, v5, "v5") == 0, "%s: %s", fixtures[i], err_msg());
        CHECK(model_config_from_json(&b, v4, "v4") == 0, "%s: %s", fixtures[i], err_msg());
        size_t n_factors = a.rope.short_factor ? (size_t)a.rotary_dim / 2 : 0;
        CHECK(!a.rope.short_factor == !b.rope.short_factor &&
                  (!n_factors ||
                   (memcmp(a.rope.short_factor, b.rope.short_factor, n_factors * 4) == 0 &&
                    memcmp(a.rope.long_factor, b.rope.long_factor, n_factors * 4) == 0)),
              "%s: longrope factors differ", fixtures[i]);
        RopeConfig ra = a.rope, rb = b.rope; /* the rest, field by field (the lists compared) */
        ra.short_factor = ra.long_factor = rb.short_factor = rb.long_factor = NULL;
        CHECK(memcmp(&ra, &rb, sizeof ra) == 0, "%s: rope differs", fixtures[i]);
        CHECK(a.hidden_size == b.hidden_size && a.head_dim == b.head_dim &&
                  a.sliding_window == b.sliding_window &&
                  strcmp(a.weights_dtype, b.weights_dtype) == 0 &&
                  memcmp(a.layer_nope, b.layer_nope, (size_t)a.n_layers) == 0 &&
                  memcmp(a.layer_sliding, b.layer_sliding, (size_t)a.n_layers) == 0,
              "%s: fields differ", fixtures[i]);
        model_config_free(&a);
        model_config_free(&b);
        json_decref(v4);
        json_decref(v5);
    }
}

static int parse(const char *text, ModelConfig *cfg) {
    json_t *root;
    if (json_load_text(text, strlen(text), "config.json", &root) != 0) return -1;
    int rc = model_config_from_json(cfg, root, "config.json");
    json_decref(root);
    return rc;
}

#define BASE                                                                                       \
    "\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, "                         \
    "\"num_hidden_layers\": 3, \"num_attention_heads\": 4"

static void test_defaults_and_windows(void) {
    ModelConfig c;
    CHECK(parse("{\"model_type\": \"llama\", " BASE "}", &c) == 0, "%s", err_msg());
    CHECK(c.head_dim == 8 && c.n_kv_heads == 4, "head_dim derived H/nh, nkv defaults to nh");
    CHECK(c.rope.type == ROPE_DEFAULT && c.rope.theta == 10000.0, "default rope");
    CHECK(!c.tie_word_embeddings && !c.qkv_bias && c.sliding_window == 0, "llama defaults");
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"use_sliding_window\": true, "
                "\"sliding_window\": 16, \"max_window_layers\": 1}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.qkv_bias && !c.o_bias, "qwen2 has q/k/v biases only");
    CHECK(c.sliding_window == 16 && !c.layer_sliding[0] && c.layer_sliding[1] && c.layer_sliding[2],
          "qwen2 windows the layers from max_window_layers on");
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"use_sliding_window\": false, "
                "\"sliding_window\": 16}",
                &c) == 0 &&
              !c.layer_sliding[2],
          "qwen2 without use_sliding_window has no window");
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"mistral\", " BASE ", \"sliding_window\": 8, \"layer_types\": "
                "[\"full_attention\", \"sliding_attention\", \"full_attention\"]}",
                &c) == 0,
          "%s", err_msg());
    CHECK(!c.layer_sliding[0] && c.layer_sliding[1] && !c.layer_sliding[2], "layer_types wins");
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"max_position_embeddings\": 64, "
                "\"rope_scaling\": {\"type\": \"yarn\", \"original_max_position_embeddings\": 16}}",
                &c) == 0 &&
              c.rope.factor == 4.0,
          "yarn factor defaults to max_position_embeddings / original");
    model_config_free(&c);
}

static void expect_error(const char *text, const char *want) {
    ModelConfig c;
    int rc = parse(text, &c);
    CHECK(rc != 0, "accepted: %s", text);
    if (rc == 0) {
        model_config_free(&c);
        return;
    }
    CHECK(strstr(err_msg(), want) != NULL, "message \"%s\" lacks \"%s\"", err_msg(), want);
    CHECK(strncmp(err_msg(), "config.json", 11) == 0, "message names the file: %s", err_msg());
}

static void test_errors(void) {
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 32}", "'vocab_size': missing");
    expect_error("{\"model_type\": \"gemma\", " BASE "}", "\"gemma\" is not supported");
    expect_error("{" BASE "}", "'model_type': missing");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"hidden_act\": \"gelu\"}", "'hidden_act'");
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": \"32\"}",
                 "'hidden_size': expected an integer");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"num_key_value_heads\": 3}",
                 "does not divide");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"head_dim\": 7}", "'head_dim'");
    expect_error("{\"model_type\": \"llama\", " BASE
                 ", \"rope_scaling\": {\"rope_type\": \"longrope\"}}",
                 "'short_factor': missing");
    expect_error("{\"model_type\": \"llama\", " BASE
                 ", \"rope_scaling\": {\"rope_type\": \"longrope2\"}}",
                 "\"longrope2\" is not supported");
    expect_error("{\"model_type\": \"llama\", " BASE
                 ", \"rope_scaling\": {\"rope_type\": \"linear\", "
                 "\"factor\": 0}}",
                 "factor must be positive");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"quantization_config\": {}}", "quantized");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"auto_map\": {}}", "remote code");
    expect_error("{\"model_type\": \"llama\", " BASE ", \"tie_word_embeddings\": 1}",
                 "true or false");
}

#define LONGROPE(shorts)                                                                           \
    "\"rope_scaling\": {\"type\": \"su\", \"short_factor\": " shorts                               \
    ", \"long_factor\": [1, 2, 3, 4]}"

/* Phi3Config and _compute_longrope_parameters: "su" means longrope; the top-level
 * original_max_position_embeddings (default 4096) is the switch point and, against
 * max_position_embeddings, sets the attention factor; a sliding window covers every layer. */
static void test_phi3(void) {
    ModelConfig c;
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"max_position_embeddings\": 131072, "
                "\"original_max_position_embeddings\": 4096, " LONGROPE("[1, 1, 1.5, 2]") "}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.fused_qkv_mlp && c.rope.type == ROPE_LONGROPE && c.rope.original_max_position == 4096,
          "phi3 longrope from \"su\"");
    CHECK(c.rotary_dim == 8, "the whole head rotates by default");
    CHECK(c.rope.short_factor[2] == 1.5f && c.rope.long_factor[3] == 4.0f, "factor lists");
    CHECK(fabs(c.rope.attention_factor - sqrt(1 + log(32.0) / log(4096.0))) < 1e-12,
          "attention factor %g from 131072 / 4096", c.rope.attention_factor);
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"max_position_embeddings\": 2048, "
                "\"sliding_window\": 7, " LONGROPE("[1, 1, 1, 1]") "}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.rope.original_max_position == 4096 && c.rope.attention_factor == 1.0,
          "Phi3Config's default original context 4096; no extension, factor 1");
    CHECK(c.sliding_window == 7 && c.layer_sliding[0] && c.layer_sliding[2], "window everywhere");
    model_config_free(&c);

    expect_error("{\"model_type\": \"phi3\", " BASE ", " LONGROPE("[1, 1, 1]") "}",
                 "'short_factor': 3 numbers, but the rotary dims 8 need 4");
    expect_error("{\"model_type\": \"phi3\", " BASE ", " LONGROPE("[1, 1, 0, 1]") "}",
                 "'short_factor': entry 2 is 0");
    expect_error("{\"model_type\": \"phi3\", " BASE
                 ", \"partial_rotary_factor\": 0.5, " LONGROPE("[1, 1, 1, 1]") "}",
                 "'short_factor': 4 numbers, but the rotary dims 4 need 2");
    expect_error("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 0.125}",
                 "'partial_rotary_factor': 0.125 gives 1 rotary dims of head_dim 8");
    expect_error("{\"model_type\": \"phi3\", " BASE
                 ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}}",
                 "Phi-3 takes RoPE type default or longrope");
}

/* A SmolLM3 fixture's config.json parsed whole, and with the lists transformers derived from the
 * other keys (no_rope_layers from no_rope_layer_interval, layer_types from use_sliding_window)
 * removed: the same NoPE and sliding layers, so our derivation is SmolLM3Config.__post_init__'s. */
static void check_smollm3_derivation(const char *name, bool want_nope[4], bool want_sliding[4]) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/models/%s/config.json", name);
    json_t *full;
    CHECK(json_load_path(harness_source_path(path), &full) == 0, "%s", err_msg());
    json_t *derived = json_deep_copy(full);
    json_object_del(derived, "no_rope_layers");
    json_object_del(derived, "layer_types");
    ModelConfig a, b;
    CHECK(model_config_from_json(&a, full, "full") == 0, "%s: %s", name, err_msg());
    CHECK(model_config_from_json(&b, derived, "derived") == 0, "%s: %s", name, err_msg());
    CHECK(a.n_layers == 4 && b.n_layers == 4, "%s: 4 layers", name);
    for (int l = 0; l < 4 && a.n_layers == 4 && b.n_layers == 4; l++) {
        CHECK(a.layer_nope[l] == want_nope[l] && b.layer_nope[l] == want_nope[l],
              "%s: layer %d NoPE %d (listed) %d (from the interval), want %d", name, l,
              a.layer_nope[l], b.layer_nope[l], want_nope[l]);
        CHECK(a.layer_sliding[l] == want_sliding[l] && b.layer_sliding[l] == want_sliding[l],
              "%s: layer %d sliding %d (listed) %d (derived), want %d", name, l, a.layer_sliding[l],
              b.layer_sliding[l], want_sliding[l]);
    }
    model_config_free(&a);
    model_config_free(&b);
    json_decref(derived);
    json_decref(full);
}

/* SmolLM3Config: NoPE layers from no_rope_layers or every no_rope_layer_interval-th layer, the
 * window on the NoPE layers only, Llama's biases, its defaults (theta 2e6, tied, pad 128004). */
static void test_smollm3(void) {
    check_smollm3_derivation("smollm3_nope", (bool[4]){0, 1, 0, 1}, (bool[4]){0, 0, 0, 0});
    check_smollm3_derivation("smollm3_window", (bool[4]){0, 1, 0, 1}, (bool[4]){0, 1, 0, 1});

    ModelConfig c;
    CHECK(parse("{\"model_type\": \"smollm3\", \"vocab_size\": 200000, \"hidden_size\": 32, "
                "\"intermediate_size\": 64, \"num_hidden_layers\": 8, \"num_attention_heads\": 4}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.rope.theta == 2000000.0 && c.tie_word_embeddings && c.pad_token_id == 128004 &&
              !c.qkv_bias && c.sliding_window == 0,
          "SmolLM3Config's defaults");
    for (int l = 0; l < 8; l++)
        CHECK(c.layer_nope[l] == (l == 3 || l == 7), "default interval 4: layer %d", l);
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"smollm3\", " BASE ", \"pad_token_id\": null, "
                "\"attention_bias\": true, \"no_rope_layers\": [0, 1, 1, 0, 0], "
                "\"use_sliding_window\": false, \"sliding_window\": 5}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.pad_token_id == -1 && c.qkv_bias && c.o_bias, "null pad, attention_bias");
    CHECK(c.layer_nope[0] && !c.layer_nope[1] && !c.layer_nope[2], "the list's first L entries");
    CHECK(!c.layer_sliding[0], "no window without use_sliding_window");
    model_config_free(&c);

    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"no_rope_layers\": [0, 0, 0]}", &c) == 0 &&
              !c.layer_nope[0],
          "only SmolLM3 reads no_rope_layers");
    model_config_free(&c);

    expect_error("{\"model_type\": \"smollm3\", " BASE ", \"no_rope_layers\": [1, 0]}",
                 "'no_rope_layers': expected a list of at least 3");
    expect_error("{\"model_type\": \"smollm3\", " BASE ", \"no_rope_layers\": [1, \"0\", 1]}",
                 "'no_rope_layers': entry 1 is not an integer");
    expect_error("{\"model_type\": \"smollm3\", " BASE ", \"no_rope_layer_interval\": 0}",
                 "'no_rope_layer_interval': 0 is not a positive integer");
    expect_error("{\"model_type\": \"smollm3\", " BASE ", \"layer_types\": [\"full_attention\", "
                 "\"sliding_attention\", \"full_attention\"]}",
                 "layer 1 is \"sliding_attention\" but sliding_window is not set");
    expect_error(
        "{\"model_type\": \"smollm3\", " BASE ", \"sliding_window\": 4, "
        "\"layer_types\": [\"full_attention\", \"chunked_attention\", \"full_attention\"]}",
        "'layer_types': entry 1 is not");
}

/* Gemma2Config's defaults (configuration_gemma2.py: head_dim 256, query_pre_attn_scalar 256,
 * soft caps 50 and 30, sliding_window 4096 on the even layers, tied, pad 0); null turns a soft
 * cap off; what the family cannot run is refused. */
static void test_gemma2(void) {
    ModelConfig c;
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE "}", &c) == 0, "%s", err_msg());
    CHECK(c.arch == ARCH_GEMMA2 && c.gemma_norms && c.embed_scaled &&
              c.mlp_act == MLP_ACT_GELU_TANH && c.head_dim == 256 && c.tie_word_embeddings &&
              c.pad_token_id == 0,
          "gemma2 defaults");
    CHECK(c.attn_scale == (float)(1.0 / 16.0) && c.attn_softcap == 50.0f &&
              c.final_softcap == 30.0f,
          "scale 256^-1/2, soft caps 50 and 30 (got %g, %g, %g)", c.attn_scale, c.attn_softcap,
          c.final_softcap);
    CHECK(c.sliding_window == 4096 && c.layer_sliding[0] && !c.layer_sliding[1] &&
              c.layer_sliding[2],
          "sliding on even layers");
    model_config_free(&c);
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE ", \"head_dim\": 8, "
                "\"query_pre_attn_scalar\": 24, \"attn_logit_softcapping\": null, "
                "\"final_logit_softcapping\": null, \"layer_types\": [\"full_attention\", "
                "\"sliding_attention\", \"full_attention\"]}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0, "null: no soft cap");
    CHECK(c.attn_scale == (float)pow(24.0, -0.5), "query_pre_attn_scalar 24");
    CHECK(!c.layer_sliding[0] && c.layer_sliding[1] && !c.layer_sliding[2], "layer_types");
    model_config_free(&c);
    expect_error("{\"model_type\": \"gemma2\", " BASE ", \"hidden_activation\": \"gelu\"}",
                 "key 'hidden_activation': \"gelu\" is not supported (expected gelu_pytorch_tanh)");
    expect_error("{\"model_type\": \"gemma2\", " BASE ", \"use_bidirectional_attention\": true}",
                 "key 'use_bidirectional_attention': true is not supported");
    expect_error("{\"model_type\": \"gemma2\", " BASE ", \"final_logit_softcapping\": -1}",
                 "key 'final_logit_softcapping': -1 is not a soft-capping value");
    expect_error("{\"model_type\": \"gemma2\", " BASE ", \"query_pre_attn_scalar\": 0}",
                 "key 'query_pre_attn_scalar': 0 is not a positive number");
    expect_error("{\"model_type\": \"gemma4_text\", " BASE "}",
                 "\"gemma4_text\" is not supported (expected llama, mistral, qwen2, qwen3, phi3, "
                 "smollm3, gemma2 or gemma3_text)");
}

/* One field of two parsed configs compared bytewise. */
#define SAME(a, b, field) (memcmp(&(a).field, &(b).field, sizeof(a).field) == 0)

/* Gemma3TextConfig's defaults (configuration_gemma3.py: head_dim 256, query_pre_attn_scalar 256,
 * no soft caps, sliding_window 4096 on all layers but each sliding_window_pattern-th (6), global
 * RoPE base 1e6, local 1e4, q/k norms, tied, pad 0); gemma3_tiny's config.json (transformers 5's
 * keys) and config_v4.json (the Hub checkpoints' keys, which make_gemma2_fixtures.py checked
 * transformers reads into the same rope_parameters and layer_types) parse alike; the multimodal
 * gemma3 and what the family cannot run are refused. */
static void test_gemma3(void) {
    ModelConfig c;
    CHECK(parse("{\"model_type\": \"gemma3_text\", \"vocab_size\": 64, \"hidden_size\": 32, "
                "\"intermediate_size\": 64, \"num_hidden_layers\": 7, \"num_attention_heads\": 4}",
                &c) == 0,
          "%s", err_msg());
    CHECK(c.arch == ARCH_GEMMA3 && c.gemma_norms && c.qk_norm && c.embed_scaled &&
              c.mlp_act == MLP_ACT_GELU_TANH && c.head_dim == 256 && c.tie_word_embeddings &&
              c.pad_token_id == 0 && c.max_position_embeddings == 131072,
          "gemma3 defaults");
    CHECK(c.attn_scale == (float)(1.0 / 16.0) && c.attn_softcap == 0 && c.final_softcap == 0,
          "scale 256^-1/2, no soft caps (got %g, %g, %g)", c.attn_scale, c.attn_softcap,
          c.final_softcap);
    CHECK(c.local_rope && c.rope.type == ROPE_DEFAULT && c.rope.theta == 1e6 &&
              c.rope_local.type == ROPE_DEFAULT && c.rope_local.theta == 1e4,
          "RoPE bases 1e6 global, 1e4 local (got %g, %g)", c.rope.theta, c.rope_local.theta);
    for (int l = 0; l < 7; l++)
        CHECK(c.layer_sliding[l] == (l != 5), "pattern 6: layer %d sliding %d", l,
              c.layer_sliding[l]);
    CHECK(c.sliding_window == 4096, "window 4096");
    model_config_free(&c);

    json_t *v5 = NULL, *v4 = NULL;
    CHECK(
        json_load_path(harness_source_path("tests/fixtures/models/gemma3_tiny/config.json"), &v5) ==
                0 &&
            json_load_path(harness_source_path("tests/fixtures/models/gemma3_tiny/config_v4.json"),
                           &v4) == 0,
        "%s", err_msg());
    ModelConfig a, b;
    CHECK(model_config_from_json(&a, v5, "v5") == 0, "%s", err_msg());
    CHECK(model_config_from_json(&b, v4, "v4") == 0, "%s", err_msg());
    CHECK(SAME(a, b, rope) && SAME(a, b, rope_local) && a.local_rope && b.local_rope,
          "v4 and v5 RoPE differ");
    CHECK(a.rope.type == ROPE_LINEAR && a.rope.factor == 4.0 && a.rope.theta == 1e4 &&
              a.rope_local.type == ROPE_DEFAULT && a.rope_local.theta == 100.0,
          "gemma3_tiny: linear x4 on 1e4 globally, 100 locally");
    CHECK(a.sliding_window == b.sliding_window && a.n_layers == 3 &&
              memcmp(a.layer_sliding, b.layer_sliding, 3) == 0 && a.layer_sliding[0] &&
              !a.layer_sliding[1] && a.layer_sliding[2],
          "layer types differ");
    CHECK(strcmp(a.weights_dtype, b.weights_dtype) == 0, "dtype");
    model_config_free(&a);
    model_config_free(&b);
    json_decref(v4);
    json_decref(v5);

    expect_error("{\"model_type\": \"gemma3\", \"text_config\": {}}",
                 "\"gemma3\" is the multimodal Gemma3ForConditionalGeneration");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window\": null}",
                 "key 'sliding_window': null or 0, but layer 0 is a sliding_attention layer");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window_pattern\": 0}",
                 "key 'sliding_window_pattern': 0 is not a positive integer");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"layer_types\": "
                 "[\"full_attention\", \"full_attention\"]}",
                 "key 'layer_types': expected a list of 3 entries");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"rope_parameters\": "
                 "{\"rope_type\": \"linear\", \"factor\": 8}}",
                 "Gemma 3 keys it by layer type (full_attention, sliding_attention), not");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"rope_scaling\": "
                 "{\"rope_type\": \"dynamic\", \"factor\": 2}}",
                 "key 'rope_scaling': Gemma 3 takes RoPE type default, linear, llama3 or yarn");
    expect_error("{\"model_type\": \"gemma3_text\", " BASE ", \"use_bidirectional_attention\": "
                 "true}",
                 "key 'use_bidirectional_attention': true is not supported");
}

int main(void) {
    test_v4_equals_v5();
    test_defaults_and_windows();
    test_errors();
    test_phi3();
    test_smollm3();
    test_gemma2();
    test_gemma3();
    return harness_finish("test_config");
}
