/* QLoRA (adapter: qlora, load_in_4bit: true) over a base quantised to NF4 (model_store_nf4):
 * 1. log-probs and the adapter's gradients over the NF4 base equal those over an fp32 model
 *    holding the same dequantised matrices (and the bf16 rounding of the rest), on peft's fixture
 *    adapters (q/v with biases; all-linear): the per-panel dequantisation in the forward and the
 *    backward computes what the whole dequantised matrix would; the NF4 base has no gradient, is
 *    neither saved nor merged;
 * 2. the memory plan's weights are the bytes the quantised model holds;
 * 3. over a bf16 checkpoint (tests/fixtures/qlora, tools/reference/make_qlora_fixture.py),
 *    transformers + bitsandbytes' 4-bit load holds the NF4 state rlhf.c computes, bit for bit,
 *    and a PEFT adapter over it gives peft's log-probs (adapter on and off): those of an fp32
 *    copy of the dequantised base to fp32 rounding, those of bitsandbytes' own 4-bit matmul
 *    within its error against that copy;
 * 4. model_load_frozen (straight from the checkpoint, no fp32 copy) gives what model_load and
 *    then model_store_bf16 / model_store_nf4 give: the same NF4 states and the same log-probs, bit
 *    for bit, on fixture models with biases, q/k norms, tied embeddings, shards, bf16 storage;
 *    an untied embedding of a bf16 file is read from the file's mapping, not copied;
 * 3b. an adapter `rlhf train` trained with adapter: qlora (tests/fixtures/qlora_trained,
 *    tools/reference/make_qlora_trained_fixture.py), loaded by peft over bitsandbytes' 4-bit base:
 *    rlhf.c's log-probs with it over the straight-loaded NF4 base equal peft's, as in 3;
 * 5. `rlhf train` with rl: dpo, adapter: qlora starts at ln 2, the loss falls, and the adapter it
 *    saves loads as a PEFT adapter; bad combinations are clear errors; rl: grpo runs over it. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/float16.h"
#include "common/json_util.h"
#include "config/train_config.h"
#include "frozen_base.h"
#include "harness.h"
#include "io/safetensors.h"
#include "kernels/cpu/nf4.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/lora.h"
#include "train/memory_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An fp32 model computing what the NF4 one does: each layer matrix replaced by the dequantised
 * values of q's matrix, everything else rounded to bf16. */
static void fill_reference(Model *ref, const Model *q) {
    for (size_t i = 0; i < ref->n_params; i++)
        ref->params[i] = bf16_to_f32(f32_to_bf16(ref->params[i]));
    for (int l = 0; l < ref->cfg.n_layers; l++) {
        LayerWeights *w = &ref->layers[l];
        float *matrices[LORA_N_MODULES] = {w->wq,     w->wk,   w->wv,    w->wo,
                                           w->w_gate, w->w_up, w->w_down};
        for (int k = 0; k < LORA_N_MODULES; k++) {
            const Nf4Weight *n = &q->nf4[(size_t)l * LORA_N_MODULES + k];
            nf4_dequantize(matrices[k], n, 0, n->numel);
        }
    }
}

static void check_gradients(const char *adapter) {
    char base[64], base_dir[4096], adir[4096];
    frozen_base_fixture(adapter, base, sizeof base, base_dir, adir);

    Model plain, quant;
    CHECK(model_load(&plain, base_dir) == 0, "%s", err_msg());
    CHECK(model_load(&quant, base_dir) == 0, "%s", err_msg());
    CHECK(model_store_nf4(&quant, true) == 0 && quant.params == NULL && quant.nf4 != NULL, "%s",
          err_msg());
    CHECK(quant.layers[0].wq == NULL && quant.layers[0].wq16 == NULL && quant.layers[0].wq4,
          "%s: the NF4 model holds no fp32 or bf16 matrices", adapter);
    fill_reference(&plain, &quant);
    err_clear();
    CHECK(model_store_nf4(&quant, true) != 0 && strstr(err_msg(), "already"),
          "quantising twice is refused: %s", err_msg());
    LoraAdapter a;
    CHECK(lora_load(&a, &plain.cfg, adir) == 0, "%s: %s", adapter, err_msg());
    plain.lora = quant.lora = &a;

    frozen_base_check_adapter(&plain, &quant, &a, base, adapter, "NF4");
    err_clear();
    CHECK(lora_merge(&quant, &a) != 0, "merging into the NF4 base is refused");
    err_clear();
    CHECK(model_save_weights(&quant, harness_tmp_path("nf4-save"), ST_F32,
                             MODEL_DEFAULT_MAX_SHARD_BYTES) != 0,
          "saving the NF4 base is refused");

    /* the memory plan counts what the quantised model holds */
    TrainConfig cfg;
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "base_model: m\ndatasets:\n  - path: d.jsonl\nlearning_rate: 1e-4\n"
             "adapter: qlora\nload_in_4bit: true\nlora_r: %d\nlora_target_linear: true\n",
             a.r);
    CHECK(train_config_load_text(&cfg, yaml, "plan.yaml") == 0, "%s", err_msg());
    double held = 0;
    for (size_t i = 0; i < (size_t)quant.cfg.n_layers * LORA_N_MODULES; i++)
        held += (double)nf4_bytes(quant.nf4[i].numel);
    size_t rest = quant.n_params;
    for (size_t i = 0; i < (size_t)quant.cfg.n_layers * LORA_N_MODULES; i++)
        rest -= quant.nf4[i].numel;
    held += 2.0 * (double)rest;
    MemoryPlan plan = memory_plan_make(&cfg, &quant.cfg);
    double lora_bytes = 4.0 * (double)memory_plan_lora_params(&cfg, &quant.cfg);
    CHECK(fabs(plan.weights - lora_bytes - held) < 1, "%s: plan %.0f bytes, the model holds %.0f",
          adapter, plan.weights - lora_bytes, held);
    train_config_free(&cfg);
    lora_free(&a);
    model_free(&plain);
    model_free(&quant);
}

/* fixture: tests/fixtures/qlora (peft's own random adapter; the base through model_load and
 * model_store_nf4) or tests/fixtures/qlora_trained (the adapter `rlhf train` saved; the base
 * through model_load_frozen, as training loads it, its untied bf16 embedding left in the file). */
static void check_against_peft(const char *fixture, bool frozen) {
    char path[4096];
    Model m;
    snprintf(path, sizeof path, "%s/model", harness_source_path(fixture));
    if (frozen) {
        CHECK(model_load_frozen(&m, path, true, true) == 0, "%s", err_msg());
        CHECK(m.embed_map != NULL, "%s: the untied bf16 embedding is left in its file", fixture);
    } else {
        CHECK(model_load(&m, path) == 0, "%s", err_msg());
        CHECK(model_store_nf4(&m, true) == 0, "%s", err_msg());
    }
    SafetensorsFile f;
    snprintf(path, sizeof path, "%s/quant.safetensors", harness_source_path(fixture));
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    const Nf4Weight *q = m.layers[0].wq4;
    const SafetensorsTensor *packed = safetensors_find(&f, "packed"),
                            *qabsmax = safetensors_find(&f, "qabsmax"),
                            *absmax2 = safetensors_find(&f, "absmax2"),
                            *offset = safetensors_find(&f, "offset");
    CHECK(packed && qabsmax && absmax2 && offset, "quant.safetensors holds the NF4 state");
    if (packed && qabsmax && absmax2 && offset)
        CHECK((size_t)packed->numel == (q->numel + 1) / 2 &&
                  memcmp(packed->data, q->packed, (size_t)packed->numel) == 0 &&
                  (size_t)qabsmax->numel == nf4_blocks(q->numel) &&
                  memcmp(qabsmax->data, q->qabsmax, (size_t)qabsmax->numel) == 0 &&
                  memcmp(absmax2->data, q->absmax2, (size_t)absmax2->nbytes) == 0 &&
                  memcmp(offset->data, &q->offset, 4) == 0,
              "layer 0's q_proj: the NF4 state differs from what transformers + bitsandbytes "
              "hold after a 4-bit load");
    safetensors_close(&f);

    json_t *ref;
    snprintf(path, sizeof path, "%s/reference.json", harness_source_path(fixture));
    CHECK(json_load_path(path, &ref) == 0, "%s", err_msg());
    json_t *ids = json_object_get(ref, "input_ids"), *mask = json_object_get(ref, "attention_mask");
    int B = (int)json_array_size(ids), T = (int)json_array_size(json_array_get(ids, 0));
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens);
    uint8_t *attn = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] =
                (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            attn[b * T + t] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(mask, b), t));
        }
    LoraAdapter a;
    char adir[4096];
    snprintf(adir, sizeof adir, "%s/adapter", harness_source_path(fixture));
    CHECK(lora_load(&a, &m.cfg, adir) == 0, "%s", err_msg());
    m.lora = &a;
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = attn};
    float *logp = calloc((size_t)B * T, sizeof *logp);
    /* exact: over an fp32 copy of the dequantised matrices, fp32 arithmetic as ours; bnb: over
     * bitsandbytes' own 4-bit matmul, whose error against exact the fixture records */
    const char *exact[2] = {"token_logp_adapter_dequant", "token_logp_base_dequant"};
    const char *bnb[2] = {"token_logp_adapter", "token_logp_base"};
    double bnb_error = json_number_value(json_object_get(ref, "bnb_error"));
    for (int pass = 0; pass < 2; pass++) {
        a.enabled = pass == 0;
        CHECK(model_token_logprobs(&m, &batch, NULL, logp) == 0, "%s", err_msg());
        double off_exact = 0, off_bnb = 0;
        for (int b = 0; b < B; b++)
            for (int t = 1; t < T; t++) {
                if (!attn[b * T + t]) continue;
                double x = json_number_value(
                    json_array_get(json_array_get(json_object_get(ref, exact[pass]), b), t));
                double y = json_number_value(
                    json_array_get(json_array_get(json_object_get(ref, bnb[pass]), b), t));
                off_exact = fmax(off_exact, fabs(logp[b * T + t] - x) / fmax(1.0, fabs(x)));
                off_bnb = fmax(off_bnb, fabs(logp[b * T + t] - y));
            }
        CHECK(off_exact <= 1e-5, "%s %s: off by %.3g", fixture, exact[pass], off_exact);
        CHECK(bnb_error > 0 && off_bnb <= 1.5 * bnb_error,
              "%s %s: off by %.3g, bitsandbytes' own error %.3g", fixture, bnb[pass], off_bnb,
              bnb_error);
    }
    free(logp), free(tokens), free(attn);
    json_decref(ref);
    lora_free(&a);
    model_free(&m);
}

static void check_frozen_load(const char *base) {
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", base);
    TokenBatch b = frozen_base_batch(base);
    size_t cells = (size_t)b.batch * b.t_len;
    for (int nf4 = 0; nf4 < 2; nf4++) {
        Model want, got;
        CHECK(model_load(&want, harness_source_path(dir)) == 0, "%s", err_msg());
        CHECK((nf4 ? model_store_nf4(&want, true) : model_store_bf16(&want)) == 0, "%s", err_msg());
        CHECK(model_load_frozen(&got, harness_source_path(dir), nf4, true) == 0, "%s: %s", base,
              err_msg());
        CHECK(got.params == NULL && (nf4 ? got.nf4 != NULL : got.nf4 == NULL), "%s: frozen storage",
              base);
        /* an untied embedding stored in bf16 is left in its file (model/embed_map.c) */
        bool bf16_file = strcmp(got.cfg.weights_dtype, "bfloat16") == 0;
        CHECK((got.embed_map != NULL) == (bf16_file && !got.cfg.tie_word_embeddings),
              "%s: embedding %s its file", base, got.embed_map ? "left in" : "copied out of");
        for (size_t i = 0; nf4 && i < (size_t)got.cfg.n_layers * LORA_N_MODULES; i++) {
            const Nf4Weight *x = &want.nf4[i], *y = &got.nf4[i];
            CHECK(x->numel == y->numel && memcmp(x->packed, y->packed, (x->numel + 1) / 2) == 0 &&
                      memcmp(x->absmax, y->absmax, nf4_blocks(x->numel) * sizeof(float)) == 0 &&
                      x->offset == y->offset,
                  "%s: NF4 matrix %zu differs when loaded straight", base, i);
        }
        float *lw = calloc(cells, sizeof *lw), *lg = calloc(cells, sizeof *lg);
        CHECK(model_token_logprobs(&want, &b, NULL, lw) == 0 &&
                  model_token_logprobs(&got, &b, NULL, lg) == 0,
              "%s", err_msg());
        CHECK(memcmp(lw, lg, cells * sizeof *lw) == 0,
              "%s (%s): log-probs of the straight load differ", base, nf4 ? "nf4" : "bf16");
        free(lw), free(lg);
        model_free(&want);
        model_free(&got);
    }
    free((void *)b.tokens), free((void *)b.attn_mask);
}

static char config[4096];

static int train(const char *const *kv, int n) {
    char *args[16];
    args[0] = config;
    for (int i = 0; i < 2 * n; i++)
        args[1 + i] = (char *)kv[i];
    return cli_train(1 + 2 * n, args);
}

static void check_dpo_run(void) {
    char text[8192];
    const char *model = harness_source_path("tests/fixtures/models/llama_text");
    harness_write_arith_pairs("pairs.jsonl", 16);
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: 0.1\ndatasets:\n  - path: %s\n"
             "sequence_len: 64\nmicro_batch_size: 4\nmax_steps: 6\nlearning_rate: 2e-2\n"
             "lr_scheduler: constant\nwarmup_steps: 0\nseed: 3\nbf16: true\n"
             "adapter: qlora\nload_in_4bit: true\nlora_r: 4\nlora_alpha: 8\n"
             "lora_target_linear: true\n",
             model, harness_tmp_path("pairs.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("qlora.yaml"));
    harness_write_file(config, text, strlen(text));
    const char *out = harness_tmp_path("qlora-out");
    const char *kv[] = {"--output_dir", out};
    CHECK(train(kv, 1) == CLI_EXIT_OK, "qlora dpo: %s", err_msg());
    json_t *metrics = harness_read_metrics(out);
    size_t steps = json_array_size(metrics);
    double first = harness_metric(metrics, 0, "loss"),
           last = harness_metric(metrics, steps - 1, "loss");
    CHECK(fabs(first - log(2.0)) < 1e-5, "qlora step 1: loss %.7f (ln 2)", first);
    CHECK(steps >= 6 && last < first - 0.05, "qlora: the loss falls (%.4f -> %.4f over %zu)", first,
          last, steps);
    json_decref(metrics);
    /* the base was quantised: step 1's log-probs (policy = base) are near those of the bf16 base
     * without quantisation, but not equal to them */
    const char *bf16_out = harness_tmp_path("lora-bf16-out");
    const char *plain[] = {"--output_dir",   bf16_out, "--adapter",   "lora",
                           "--load_in_4bit", "false",  "--max_steps", "1"};
    CHECK(train(plain, 4) == CLI_EXIT_OK, "lora over bf16: %s", err_msg());
    json_t *m16 = harness_read_metrics(bf16_out);
    metrics = harness_read_metrics(out);
    double lp4 = harness_metric(metrics, 0, "logps/chosen"),
           lp16 = harness_metric(m16, 0, "logps/chosen");
    CHECK(fabs(lp4 - lp16) > 1e-4 && fabs(lp4 - lp16) < 0.2 * fabs(lp16),
          "step 1 logps/chosen: NF4 base %.6f, bf16 base %.6f", lp4, lp16);
    json_decref(m16);
    json_decref(metrics);
    /* the saved adapter is a PEFT adapter over the base */
    ModelConfig mc;
    CHECK(model_config_load(&mc, model) == 0, "%s", err_msg());
    LoraAdapter a;
    CHECK(lora_load(&a, &mc, out) == 0 && a.r == 4, "the QLoRA adapter loads: %s", err_msg());
    lora_free(&a);
    model_config_free(&mc);

    /* load_in_4bit with adapter: lora: a clear error before anything runs */
    const char *lora[] = {"--output_dir", harness_tmp_path("lora4"), "--adapter", "lora"};
    err_clear();
    CHECK(train(lora, 2) == CLI_EXIT_FAILURE && strstr(err_msg(), "needs adapter: qlora"),
          "load_in_4bit with adapter: lora: %s", err_msg());
}

/* GRPO over the NF4 base: rollouts generate through the NF4 matrices (no packed copy), the
 * reference is the base with the adapter off (KL 0 at step 1), and the adapter trains. */
static void check_grpo_run(void) {
    char text[4096], path[4200];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n  beta: 0.05\n"
             "  reward_funcs:\n    - {function: builtin.length, target: 3}\n"
             "micro_batch_size: 8\nmax_steps: 2\nlearning_rate: 5e-3\nseed: 5\nbf16: true\n"
             "adapter: qlora\nload_in_4bit: true\nlora_r: 4\nlora_target_linear: true\n",
             harness_source_path("tests/fixtures/models/llama_text"), harness_write_grpo_prompts());
    snprintf(path, sizeof path, "%s", harness_tmp_path("grpo_qlora.yaml"));
    harness_write_file(path, text, strlen(text));
    const char *out = harness_tmp_path("grpo-qlora-out");
    char *args[] = {path, "--output_dir", (char *)out};
    CHECK(cli_train(3, args) == CLI_EXIT_OK, "grpo qlora: %s", err_msg());
    json_t *m = harness_read_metrics(out);
    CHECK(json_array_size(m) == 2 && fabs(harness_metric(m, 0, "kl")) < 1e-6,
          "grpo qlora: 2 steps, step 1 kl %.3g (0: the reference is the base)",
          harness_metric(m, 0, "kl"));
    json_decref(m);
}

int main(void) {
    check_gradients("qwen2_qv");
    check_gradients("llama_all_linear");
    check_against_peft("tests/fixtures/qlora", false);
    check_against_peft("tests/fixtures/qlora_trained", true);
    const char *frozen[] = {"qwen2_bias", "qwen3_qknorm", "llama_tied", "llama_sharded",
                            "llama_bf16"};
    for (size_t i = 0; i < sizeof frozen / sizeof *frozen; i++)
        check_frozen_load(frozen[i]);
    check_dpo_run();
    check_grpo_run();
    return harness_finish("test_qlora");
}
