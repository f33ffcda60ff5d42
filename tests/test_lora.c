/* LoRA against peft (tests/fixtures/lora, made by tools/reference/make_lora_fixtures.py and
 * make_rlhf_adapter_fixtures.py):
 * per-token log-probs with the adapter, and with it switched off (the reference policy); the
 * incremental (KV-cache) forward with an adapter; the reference policy (adapter off, or a
 * separate model); adapter gradients; save/reload; merging. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "io/safetensors.h"
#include "model/backward.h"
#include "model/lora.h"
#include "model/reference_policy.h"

#include <math.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

/* The ones without rlhf_ were made and saved by peft (the phi3_* on Phi-3's fused qkv_proj and
 * gate_up_proj; smollm3_* on a SmolLM3 with NoPE and sliding layers; gemma2_*, gemma3_* on Gemma 2,
 * 3); the rlhf_* ones trained and saved by rlhf.c and then loaded by peft
 * (tools/reference/make_rlhf_adapter_fixtures.py; rlhf_phi3_* on the fused modules, trained on
 * phi3_text and loaded onto phi3_window, which has the same layer shapes; rlhf_smollm3_* trained
 * on smollm3_text, loaded onto smollm3_nope; rlhf_gemma2_* trained on models/tiny-arith-gemma2
 * and loaded onto gemma2_tiny, rlhf_gemma3_* on models/tiny-arith-gemma3 onto gemma3_tiny,
 * alike). */
static const char *const cases[] = {
    "qwen2_qv",           "llama_all_linear",        "qwen3_rslora",      "phi3_all_linear",
    "phi3_qkv_gate_up",   "rlhf_all_linear_rslora",  "rlhf_qvo",          "rlhf_phi3_qkv_gate_up",
    "smollm3_all_linear", "rlhf_smollm3_all_linear", "gemma2_all_linear", "rlhf_gemma2_all_linear",
    "gemma3_all_linear",  "rlhf_gemma3_all_linear"};

static void load_batch(const char *base, int32_t **tokens, uint8_t **mask, int *B, int *T) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/models/%s/reference.json", base);
    json_t *ref;
    if (json_load_path(harness_source_path(path), &ref) != 0) exit(1);
    json_t *ids = json_object_get(ref, "input_ids"), *m = json_object_get(ref, "attention_mask");
    *B = (int)json_array_size(ids);
    *T = (int)json_array_size(json_array_get(ids, 0));
    *tokens = malloc((size_t)*B * *T * sizeof **tokens);
    *mask = malloc((size_t)*B * *T);
    for (int b = 0; b < *B; b++)
        for (int t = 0; t < *T; t++) {
            (*tokens)[b * *T + t] =
                (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            (*mask)[b * *T + t] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(m, b), t));
        }
    json_decref(ref);
}

static int compare(const float *got, json_t *want, const uint8_t *mask, int B, int T) {
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 1; t < T; t++) {
            if (!mask[b * T + t]) continue;
            double w = json_number_value(json_array_get(json_array_get(want, b), t));
            bad += !harness_close(got[b * T + t], w, 1e-4, 1e-6);
        }
    return bad;
}

static void check_case(const char *name) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "tests/fixtures/lora/%s", name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref;
    CHECK(json_load_path(harness_source_path(path), &ref) == 0, "%s", err_msg());
    const char *base = json_string_value(json_object_get(ref, "base"));
    char base_dir[512];
    snprintf(base_dir, sizeof base_dir, "tests/fixtures/models/%s", base);
    Model m;
    CHECK(model_load(&m, harness_source_path(base_dir)) == 0, "%s", err_msg());
    char adir[4096];
    snprintf(adir, sizeof adir, "%s", harness_source_path(dir));
    LoraAdapter a;
    CHECK(lora_load(&a, &m.cfg, adir) == 0, "%s: %s", name, err_msg());
    m.lora = &a;
    int32_t *tokens;
    uint8_t *mask;
    int B, T;
    load_batch(base, &tokens, &mask, &B, &T);
    float *logp = calloc((size_t)B * T, sizeof *logp);
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = mask};
    CHECK(model_token_logprobs(&m, &batch, NULL, logp) == 0, "%s", err_msg());
    int bad = compare(logp, json_object_get(ref, "token_logp_adapter"), mask, B, T);
    CHECK(bad == 0, "%s: %d log-probs with the adapter differ from peft's", name, bad);
    a.enabled = false;
    CHECK(model_token_logprobs(&m, &batch, NULL, logp) == 0, "%s", err_msg());
    bad = compare(logp, json_object_get(ref, "token_logp_base"), mask, B, T);
    CHECK(bad == 0, "%s: %d log-probs with the adapter switched off differ from peft's", name, bad);
    a.enabled = true;

    /* the reference policy: the adapter switched off for the call only, or a separate model */
    ReferencePolicy ref_policy;
    reference_policy_from_adapter(&ref_policy, &m, &a);
    CHECK(reference_token_logprobs(&ref_policy, &batch, NULL, logp) == 0, "%s", err_msg());
    bad = compare(logp, json_object_get(ref, "token_logp_base"), mask, B, T);
    CHECK(bad == 0 && a.enabled, "%s: reference from the switched-off adapter: %d differ", name,
          bad);
    CHECK(model_token_logprobs(&m, &batch, NULL, logp) == 0, "%s", err_msg());
    bad = compare(logp, json_object_get(ref, "token_logp_adapter"), mask, B, T);
    CHECK(bad == 0, "%s: the policy has its adapter back after a reference call", name);
    Model frozen;
    CHECK(model_load(&frozen, harness_source_path(base_dir)) == 0, "%s", err_msg());
    reference_policy_from_model(&ref_policy, &frozen);
    CHECK(reference_token_logprobs(&ref_policy, &batch, NULL, logp) == 0, "%s", err_msg());
    bad = compare(logp, json_object_get(ref, "token_logp_base"), mask, B, T);
    CHECK(bad == 0, "%s: reference from a separate model: %d differ", name, bad);
    model_free(&frozen);

    /* gradients of lora_A / lora_B for the SFT loss, base frozen */
    ForwardTape tape = {0};
    CHECK(model_forward_tape(&m, &batch, false, &tape) == 0, "%s", err_msg());
    model_tape_logprobs(&m, &tape, NULL, logp);
    int count = 0;
    double sum = 0;
    for (int i = 0; i < B * T; i++)
        if (mask[i] && i % T) sum += logp[i], count++;
    float *dlogp = calloc((size_t)B * T, sizeof *dlogp);
    for (int i = 0; i < B * T; i++)
        if (mask[i] && i % T) dlogp[i] = -1.0f / (float)count;
    CHECK(harness_close(-sum / count, json_number_value(json_object_get(ref, "loss")), 1e-5, 0),
          "%s: loss %.7f", name, -sum / count);
    float *lg = calloc(a.n_params, sizeof *lg);
    CHECK(model_backward(&m, &tape, NULL, dlogp, NULL, lg) == 0, "%s", err_msg());
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    SafetensorsFile gf;
    CHECK(safetensors_open(&gf, harness_source_path(path)) == 0, "%s", err_msg());
    CHECK((int)gf.n_tensors == a.n_info, "%s: %zu gradients for %d adapter tensors", name,
          gf.n_tensors, a.n_info);
    double worst = 0;
    for (int i = 0; i < a.n_info; i++) {
        const SafetensorsTensor *t = safetensors_find(&gf, a.info[i].name);
        CHECK(t != NULL, "%s: gradient of %s", name, a.info[i].name);
        if (!t) continue;
        float *want = malloc(a.info[i].numel * sizeof *want);
        safetensors_to_f32(t, want);
        double gscale = 0, gerr = 0;
        for (size_t k = 0; k < a.info[i].numel; k++)
            gscale = fmax(gscale, fabs(want[k])),
            gerr = fmax(gerr, fabs(lg[a.info[i].offset + k] - want[k]));
        CHECK(gerr <= 1e-4 * gscale, "%s: %s off by %.3g (max %.3g)", name, a.info[i].name, gerr,
              gscale);
        worst = fmax(worst, gerr / gscale);
        free(want);
    }
    printf("%s: %d adapter gradients match peft, worst %.2e of the largest\n", name, a.n_info,
           worst);
    safetensors_close(&gf);
    free(lg);
    free(dlogp);
    forward_tape_free(&tape);

    /* the cached forward over sequence 0 gives the full forward's last logits */
    int len = 0;
    while (len < T && mask[len])
        len++;
    int V = m.cfg.vocab_size;
    float *full = malloc((size_t)V * sizeof *full), *cached = malloc((size_t)V * sizeof *cached);
    CHECK(model_logits(&m, &batch, 0, len - 1, len, full) == 0, "%s", err_msg());
    KvCache kv;
    CHECK(kv_cache_init(&kv, model_backend(&m), &m.cfg, 1, len) == 0, "kv");
    CachedChunk first = {0, tokens, len - 3}, rest = {0, tokens + len - 3, 3};
    CHECK(model_forward_cached(&m, NULL, &kv, &first, 1, cached) == 0 &&
              model_forward_cached(&m, NULL, &kv, &rest, 1, cached) == 0,
          "%s", err_msg());
    double scale = 0, err = 0;
    for (int j = 0; j < V; j++)
        scale = fmax(scale, fabs(full[j])), err = fmax(err, fabs(full[j] - cached[j]));
    CHECK(err <= 1e-4 * scale, "%s: cached logits off by %.3g (scale %.3g)", name, err, scale);
    kv_cache_free(&kv);

    /* save and read back: the same adapter */
    char saved[4096];
    snprintf(saved, sizeof saved, "%s/%s", harness_tmpdir(), name);
    mkdir(saved, 0755);
    /* the base model the fixture's adapter names (rlhf_phi3_*: trained on phi3_text) */
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", adir);
    json_t *acfg;
    CHECK(json_load_path(cfg_path, &acfg) == 0, "%s", err_msg());
    const char *named = json_string_value(json_object_get(acfg, "base_model_name_or_path"));
    char base_name[512];
    snprintf(base_name, sizeof base_name, "%s", named ? named : base_dir);
    json_decref(acfg);
    CHECK(lora_save(&a, saved, base_name) == 0, "save: %s", err_msg());
    LoraAdapter back;
    CHECK(lora_load(&back, &m.cfg, saved) == 0, "reload: %s", err_msg());
    CHECK(back.n_params == a.n_params && memcmp(back.params, a.params, a.n_params * 4) == 0 &&
              back.scaling == a.scaling && back.r == a.r,
          "%s: the saved adapter reads back the same", name);
    lora_free(&back);
    if (strncmp(name, "rlhf_", 5) == 0) { /* the writer still writes what peft was shown */
        const char *files[] = {"adapter_config.json", "adapter_model.safetensors"};
        for (int f = 0; f < 2; f++) {
            char mine[4200], theirs[4200];
            snprintf(mine, sizeof mine, "%s/%s", saved, files[f]);
            snprintf(theirs, sizeof theirs, "%s/%s", adir, files[f]);
            CHECK(harness_same_file(mine, theirs), "%s: %s re-saved differs from the fixture", name,
                  files[f]);
        }
    }

    /* merging equals peft's merge_and_unload to 1e-5 of each tensor's scale */
    m.lora = NULL;
    CHECK(lora_merge(&m, &a) == 0, "merge");
    snprintf(path, sizeof path, "%s/merged.safetensors", dir);
    SafetensorsFile mf;
    CHECK(safetensors_open(&mf, harness_source_path(path)) == 0, "%s", err_msg());
    int merged_bad = 0;
    for (int p = 0; p < m.n_param_tensors; p++) {
        const SafetensorsTensor *t = safetensors_find(&mf, m.param_info[p].name);
        if (!t) {
            merged_bad++;
            continue;
        }
        float *want = malloc(m.param_info[p].numel * sizeof *want);
        safetensors_to_f32(t, want);
        double ms = 0, me = 0;
        for (size_t k = 0; k < m.param_info[p].numel; k++)
            ms = fmax(ms, fabs(want[k])),
            me = fmax(me, fabs(m.params[m.param_info[p].offset + k] - want[k]));
        merged_bad += me > 1e-5 * ms;
        free(want);
    }
    CHECK(merged_bad == 0, "%s: %d merged tensors differ from peft's merge_and_unload", name,
          merged_bad);

    /* rlhf merge-lora writes those merged weights (fp32 base: bit for bit) */
    char out[4096];
    snprintf(out, sizeof out, "%s/%s-merged", harness_tmpdir(), name);
    char *args[] = {"--base", (char *)harness_source_path(base_dir), "--adapter", adir, "--out",
                    out};
    CHECK(cli_merge_lora(6, args) == CLI_EXIT_OK, "merge-lora: %s", err_msg());
    Model written;
    CHECK(model_load(&written, out) == 0, "the merged directory loads: %s", err_msg());
    CHECK(written.n_params == m.n_params &&
              memcmp(written.params, m.params, m.n_params * sizeof(float)) == 0,
          "%s: merge-lora's output differs from the merged weights", name);
    model_free(&written);
    safetensors_close(&mf);
    free(full);
    free(cached);
    free(logp);
    free(tokens);
    free(mask);
    lora_free(&a);
    model_free(&m);
    json_decref(ref);
}

/* lora_create refuses a rank <= 0, an empty target list and targets that match nothing. */
static void check_create_errors(void) {
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_text")) == 0, "%s",
          err_msg());
    const char *qv[] = {"q_proj", "v_proj"}, *gpt2[] = {"c_attn", "attn.q_proj"};
    LoraAdapter a;
    CHECK(lora_create(&a, &m.cfg, 0, 8, false, 0, qv, 2, 1) != 0 &&
              strstr(err_msg(), "lora_r must be positive"),
          "r 0: %s", err_msg());
    CHECK(lora_create(&a, &m.cfg, -3, 8, false, 0, qv, 2, 1) != 0, "r -3");
    CHECK(lora_create(&a, &m.cfg, 4, 8, false, 0, qv, 0, 1) != 0 && strstr(err_msg(), "empty"),
          "no targets: %s", err_msg());
    CHECK(lora_create(&a, &m.cfg, 4, 8, false, 0, gpt2, 2, 1) != 0 &&
              strstr(err_msg(), "matches no module"),
          "targets matching nothing: %s", err_msg());
    model_free(&m);
    /* Phi-3 has no q_proj of its own: the message names its fused modules */
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/phi3_window")) == 0, "%s",
          err_msg());
    CHECK(lora_create(&a, &m.cfg, 4, 8, false, 0, qv, 2, 1) != 0 &&
              strstr(err_msg(), "(it has qkv_proj, o_proj, gate_up_proj, down_proj)"),
          "phi3 q_proj: %s", err_msg());
    const char *fused[] = {"qkv_proj"};
    CHECK(lora_create(&a, &m.cfg, 4, 8, false, 0, fused, 1, 1) == 0 && a.n_info == 4 &&
              a.info[1].shape[0] == 64 && strstr(a.info[1].name, "self_attn.qkv_proj.lora_B"),
          "phi3 qkv_proj: one A and one B (64 = q 32 + k 16 + v 16 rows) per layer");
    lora_free(&a);
    model_free(&m);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(cases[i]);
    check_create_errors();
    return harness_finish("test_lora");
}
