/* LoRA over a frozen base kept in bf16 (model_store_bf16; `adapter: lora` with `bf16: true`):
 * 1. the adapter's gradients over the bf16 base equal those over an fp32 model holding the same
 *    bf16-rounded weights (peft's fixture adapters on two models: q/v with biases, all-linear);
 *    the bf16 base itself has no gradient (a clear error);
 * 2. the kernels, on shapes that span several widened panels (weights) and vocabulary tiles
 *    (lm_head): din = dout · W and the lm_head's dhidden over bf16 weights equal those over their
 *    fp32 widening;
 * 3. a DPO run with adapter: lora and bf16: true, on a checkpoint stored in bf16 (so keeping the
 *    base in bf16 rounds nothing), starts at ln 2 and trains the adapter the fp32 base trains;
 * 4. a NaN in an untied bf16 embedding, the one tensor model_load_frozen leaves in its file
 *    (model/embed_map.c) and so only reads to check, is refused at load (bf16 base and NF4 base,
 *    and `rlhf train` with adapter: lora, bf16: true) with an error naming the tensor and the
 *    index, and nothing written to output_dir. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/float16.h"
#include "common/json_util.h"
#include "frozen_base.h"
#include "harness.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "kernels/cpu/kernels.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_gradients(const char *adapter) {
    char base[64], base_dir[4096], adir[4096];
    frozen_base_fixture(adapter, base, sizeof base, base_dir, adir);

    Model rounded, half;
    CHECK(model_load(&rounded, base_dir) == 0, "%s", err_msg());
    CHECK(model_load(&half, base_dir) == 0, "%s", err_msg());
    for (size_t i = 0; i < rounded.n_params; i++) /* the fp32 copy of the rounded weights */
        rounded.params[i] = bf16_to_f32(f32_to_bf16(rounded.params[i]));
    CHECK(model_store_bf16(&half) == 0 && half.params == NULL, "%s", err_msg());
    LoraAdapter a;
    CHECK(lora_load(&a, &rounded.cfg, adir) == 0, "%s: %s", adapter, err_msg());
    rounded.lora = half.lora = &a;

    frozen_base_check_adapter(&rounded, &half, &a, base, adapter, "bf16");
    lora_free(&a);
    model_free(&rounded);
    model_free(&half);
}

/* Largest difference between two runs' adapter_model.safetensors, relative to the first's
 * largest entry per tensor; -1 when they cannot be read or differ in tensors. */
static double adapter_gap(const char *a_dir, const char *b_dir) {
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/adapter_model.safetensors", a_dir);
    snprintf(pb, sizeof pb, "%s/adapter_model.safetensors", b_dir);
    SafetensorsFile fa, fb;
    if (safetensors_open(&fa, pa) != 0) return -1;
    if (safetensors_open(&fb, pb) != 0) {
        safetensors_close(&fa);
        return -1;
    }
    double worst = fa.n_tensors == fb.n_tensors && fa.n_tensors > 0 ? 0 : -1;
    for (size_t t = 0; t < fa.n_tensors && worst >= 0; t++) {
        const SafetensorsTensor *x = &fa.tensors[t], *y = safetensors_find(&fb, x->name);
        if (!y || y->numel != x->numel) {
            worst = -1;
            break;
        }
        float *u = malloc((size_t)x->numel * sizeof *u), *v = malloc((size_t)x->numel * sizeof *v);
        safetensors_to_f32(x, u);
        safetensors_to_f32(y, v);
        double scale = 0, err = 0;
        for (int64_t k = 0; k < x->numel; k++)
            scale = fmax(scale, fabs(u[k])), err = fmax(err, fabs(u[k] - v[k]));
        if (scale > 0) worst = fmax(worst, err / scale);
        free(u), free(v);
    }
    safetensors_close(&fa);
    safetensors_close(&fb);
    return worst;
}

static void check_dpo_run(void) {
    Model m;
    char text_bf16[4096], config[4096], text[8192];
    const char *src = harness_source_path("tests/fixtures/models/llama_text");
    snprintf(text_bf16, sizeof text_bf16, "%s", harness_tmp_path("text_bf16"));
    CHECK(model_load(&m, src) == 0 && model_dir_write(&m, src, src, text_bf16, ST_BF16) == 0,
          "a bf16 copy of llama_text: %s", err_msg());
    model_free(&m);
    harness_write_arith_pairs("pairs.jsonl", 16);
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: 0.1\ndatasets:\n  - path: %s\n"
             "sequence_len: 64\nmicro_batch_size: 4\nmax_steps: 3\nlearning_rate: 2e-2\n"
             "lr_scheduler: constant\nwarmup_steps: 0\nseed: 3\n"
             "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n",
             text_bf16, harness_tmp_path("pairs.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("dpo_lora.yaml"));
    harness_write_file(config, text, strlen(text));
    /* bf16: true also trains in mixed precision (autocast), so the run to compare with is the
     * same config over the fp32 checkpoint: its base rounded to bf16 at load must train the
     * very adapter the bf16 checkpoint trains (the storage against an fp32 copy of the same
     * values is checked per product above) */
    char fp32_out[4096], bf16_out[4096];
    snprintf(fp32_out, sizeof fp32_out, "%s", harness_tmp_path("base_fp32"));
    snprintf(bf16_out, sizeof bf16_out, "%s", harness_tmp_path("base_bf16"));
    char *a[] = {config, "--output_dir", fp32_out, "--base_model", (char *)src, "--bf16", "true"};
    char *b[] = {config, "--output_dir", bf16_out, "--bf16", "true"};
    CHECK(cli_train(7, a) == CLI_EXIT_OK, "fp32 checkpoint: %s", err_msg());
    CHECK(cli_train(5, b) == CLI_EXIT_OK, "bf16 checkpoint: %s", err_msg());
    json_t *metrics = harness_read_metrics(bf16_out);
    CHECK(fabs(harness_metric(metrics, 0, "loss") - log(2.0)) < 1e-5,
          "bf16 base, step 1: loss %.7f (ln 2)", harness_metric(metrics, 0, "loss"));
    json_decref(metrics);
    double gap = adapter_gap(fp32_out, bf16_out);
    CHECK(gap == 0,
          "adapter over the bf16 checkpoint off the rounded fp32 one's by %.3g of its "
          "scale",
          gap);
}

static float rand_unit(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* The largest |x - y| relative to max |x| over n values. */
static double rel_gap(const float *x, const float *y, size_t n) {
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(x[i])), err = fmax(err, fabs(x[i] - y[i]));
    return scale > 0 ? err / scale : 1.0;
}

static void check_kernels(void) {
    unsigned seed = 7;
    /* 600 rows of 8192: three panels of 256 rows (matmul_frozen.c) */
    int n = 3, in_dim = 8192, out_dim = 600;
    size_t nw = (size_t)out_dim * in_dim;
    uint16_t *w16 = malloc(nw * sizeof *w16);
    float *w = malloc(nw * sizeof *w), *dout = malloc((size_t)n * out_dim * sizeof *dout);
    for (size_t i = 0; i < nw; i++)
        w16[i] = f32_to_bf16(rand_unit(&seed)), w[i] = bf16_to_f32(w16[i]);
    for (int i = 0; i < n * out_dim; i++)
        dout[i] = rand_unit(&seed);
    float *want = malloc((size_t)n * in_dim * sizeof *want);
    float *got = malloc((size_t)n * in_dim * sizeof *got);
    matmul_backward(want, NULL, NULL, dout, NULL, w, n, in_dim, out_dim);
    linear_backward(got, NULL, NULL, dout, NULL, (WeightRef){.bf16 = w16}, n, in_dim, out_dim);
    double gap = rel_gap(want, got, (size_t)n * in_dim);
    CHECK(gap <= 1e-5, "din through bf16 W (3 panels) off by %.3g", gap);

    /* lm_head of 5000 x 16: two vocabulary tiles of 4096 (fused_logprob.c) */
    int rows = 5, h = 16, vocab = 5000;
    float *hidden = malloc((size_t)rows * h * sizeof *hidden), dlogp[5];
    int32_t target[5] = {3, 4095, 4096, 4999, 17};
    for (int i = 0; i < rows * h; i++)
        hidden[i] = rand_unit(&seed);
    for (int r = 0; r < rows; r++)
        dlogp[r] = rand_unit(&seed);
    fused_logprob_backward(want, NULL, dlogp, hidden, target, w, rows, h, vocab);
    fused_logprob_backward_weights(got, NULL, dlogp, hidden, target, (WeightRef){.bf16 = w16}, rows,
                                   h, vocab);
    gap = rel_gap(want, got, (size_t)rows * h);
    CHECK(gap <= 1e-5, "lm_head dhidden through bf16 W (2 tiles) off by %.3g", gap);
    free(w16), free(w), free(dout), free(want), free(got), free(hidden);
}

/* Item 4: an untied copy of llama_text stored in bf16 (tokenizer and all, so `rlhf train` runs
 * on it) whose embedding holds a bf16 NaN at one index; the clean copy's embedding is checked to
 * be the mapped one, so the NaN goes down the path that only checks. */
static void check_nan_in_mapped_embedding(void) {
    Model m;
    char dir[4096], path[4200];
    const char *untied = harness_write_untied_llama_text();
    snprintf(dir, sizeof dir, "%s", harness_tmp_path("untied_bf16_nan"));
    CHECK(model_load(&m, untied) == 0 && model_dir_write(&m, untied, untied, dir, ST_BF16) == 0,
          "an untied bf16 copy of llama_text: %s", err_msg());
    model_free(&m);
    CHECK(model_load_frozen(&m, dir, false, true) == 0 && m.embed_map != NULL,
          "the clean untied bf16 copy loads with its embedding left in the file: %s", err_msg());
    size_t numel = (size_t)m.cfg.vocab_size * m.cfg.hidden_size;
    model_free(&m);

    /* the NaN (bf16 0x7fc0) near the end of the table: a check that stops early misses it */
    size_t nan_at = numel - 3, len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    const SafetensorsTensor *t = safetensors_find(&f, "model.embed_tokens.weight");
    CHECK(t && t->dtype == ST_BF16 && (size_t)t->numel == numel, "the copy's embedding is bf16");
    size_t at = t ? (size_t)((const char *)t->data - (const char *)f.map) + 2 * nan_at : 0;
    safetensors_close(&f);
    char *bytes = NULL;
    CHECK(read_file(path, &bytes, &len) == 0 && at + 2 <= len, "%s", err_msg());
    if (!bytes || at + 2 > len) return;
    bytes[at] = (char)0xc0, bytes[at + 1] = 0x7f; /* little-endian 0x7fc0 */
    harness_write_file(path, bytes, len);
    free(bytes);

    char want[128];
    snprintf(want, sizeof want, "tensor \"model.embed_tokens.weight\" holds NaN at flat index %zu",
             nan_at);
    for (int nf4 = 0; nf4 < 2; nf4++) {
        err_clear();
        CHECK(model_load_frozen(&m, dir, nf4, true) != 0,
              "a NaN in the mapped embedding: loaded (%s)", nf4 ? "NF4" : "bf16");
        CHECK(strstr(err_msg(), want) && strstr(err_msg(), dir),
              "%s base: the error \"%s\" lacks \"%s\"", nf4 ? "NF4" : "bf16", err_msg(), want);
        printf("refused at load (%s base): %s\n", nf4 ? "NF4" : "bf16", err_msg());
    }

    harness_write_arith_pairs("nan_pairs.jsonl", 4);
    char text[8192], config[4096], out[4096];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\ndatasets:\n  - path: %s\nsequence_len: 64\n"
             "micro_batch_size: 2\nmax_steps: 1\nlearning_rate: 1e-3\nadapter: lora\nlora_r: "
             "4\nlora_alpha: 8\n"
             "lora_target_linear: true\nbf16: true\n",
             dir, harness_tmp_path("nan_pairs.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("nan_embed.yaml"));
    harness_write_file(config, text, strlen(text));
    snprintf(out, sizeof out, "%s", harness_tmp_path("nan_embed_out"));
    char *args[] = {config, "--output_dir", out};
    err_clear();
    CHECK(cli_train(3, args) != CLI_EXIT_OK, "rlhf train over the NaN embedding: trained");
    CHECK(strstr(err_msg(), want) != NULL, "rlhf train: the error \"%s\" lacks \"%s\"", err_msg(),
          want);
    CHECK(!dir_exists(out), "rlhf train refused the base but made %s", out);
}

int main(void) {
    check_nan_in_mapped_embedding();
    check_kernels();
    check_gradients("qwen2_qv");
    check_gradients("llama_all_linear");
    check_dpo_run();
    return harness_finish("test_lora_bf16_base");
}
