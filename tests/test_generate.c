/* Greedy decoding against transformers' generate() (tests/fixtures/generate, made by
 * tools/reference/make_generate_fixtures.py): batched prompts of unequal length, per-sequence
 * stop on eos, token-for-token equal; the same at any batch size (continuous batching), and with
 * a bf16 checkpoint's weights kept in bf16. With dynamic-NTK and longrope RoPE, whose
 * frequencies follow the batch's length, the longest prompt stops early and still counts, and
 * Phi-3 recomputes every sequence when the batch first reaches past the original context, as
 * transformers' generate does (tools/reference/make_phi3_fixtures.py). Sampling from torch's
 * generator (GenerateOptions.torch_rng) picks transformers' tokens under the same seed. */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"
#include "model/forward.h"
#include "model/packed_model.h"
#include "rollout/generate.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const models[] = {"llama_rope_llama3", "llama_tied",     "qwen2_bias",
                                     "qwen3_qknorm",      "mistral_window", "llama_bf16",
                                     "phi3_window",       "smollm3_nope",   "smollm3_window",
                                     "gemma2_tiny",       "gemma3_tiny"};

/* bf16_storage: the weights kept in bf16 (rlhf generate --bf16), for a checkpoint stored in bf16,
 * where that rounds nothing: the same tokens as transformers. one_batch: only all prompts in one
 * batch (max_batch 0), for RoPE whose frequencies follow the whole batch's length (dynamic NTK,
 * longrope), where another batching is another computation in transformers too. */
static void check_model_batches(const char *name, bool bf16_storage, bool one_batch) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/generate/%s.json", name);
    json_t *fx;
    CHECK(json_load_path(harness_source_path(path), &fx) == 0, "%s", err_msg());
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    Model m;
    CHECK(model_load(&m, harness_source_path(path)) == 0, "%s", err_msg());
    if (bf16_storage) CHECK(model_store_bf16(&m) == 0, "%s", err_msg());
    json_t *prompts = json_object_get(fx, "prompts"), *want = json_object_get(fx, "completions");
    int n = (int)json_array_size(prompts);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        json_t *p = json_array_get(prompts, (size_t)i);
        lens[i] = (int)json_array_size(p);
        ids[i] = malloc((size_t)lens[i] * sizeof **ids);
        for (int t = 0; t < lens[i]; t++)
            ids[i][t] = (int32_t)json_integer_value(json_array_get(p, (size_t)t));
    }
    int32_t eos = (int32_t)json_integer_value(json_object_get(fx, "eos_token_id"));
    int batches[] = {0, 1, 2};
    for (int bi = 0; bi < (one_batch ? 1 : 3); bi++) {
        GenerateOptions opt = {.max_new_tokens =
                                   (int)json_integer_value(json_object_get(fx, "max_new_tokens")),
                               .eos_ids = &eos,
                               .n_eos = 1,
                               .max_batch = batches[bi],
                               .sampling = sampling_defaults()};
        Completion *out = calloc((size_t)n, sizeof *out);
        CHECK(generate(&m, (const int32_t *const *)ids, lens, n, &opt, out) == 0, "%s: %s", name,
              err_msg());
        for (int i = 0; i < n; i++) {
            json_t *w = json_array_get(want, (size_t)i);
            bool same = out[i].len == (int)json_array_size(w);
            for (int t = 0; same && t < out[i].len; t++)
                same = out[i].ids[t] == (int32_t)json_integer_value(json_array_get(w, (size_t)t));
            CHECK(same,
                  "%s%s, max_batch %d, prompt %d: %d tokens differ from transformers' generate",
                  name, bf16_storage ? " (weights kept in bf16)" : "", batches[bi], i, out[i].len);
        }
        completions_free(out, n);
        free(out);
    }
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    model_free(&m);
    json_decref(fx);
}

static void check_model(const char *name, bool bf16_storage) {
    check_model_batches(name, bf16_storage, false);
}

/* The same tokens, and log-probs equal to 1e-4: the batch's row count changes OpenBLAS's
 * summation order, hence the last bits of the logits (a fixed-order GEMM would make them
 * bitwise equal; see the note on issue 7). */
static bool same_completions(const Completion *a, const Completion *b, int n) {
    for (int i = 0; i < n; i++) {
        if (a[i].len != b[i].len) return false;
        if (memcmp(a[i].ids, b[i].ids, (size_t)a[i].len * sizeof *a[i].ids) != 0) return false;
        for (int t = 0; t < a[i].len; t++)
            if (fabsf(a[i].logprobs[t] - b[i].logprobs[t]) > 1e-4f) return false;
    }
    return true;
}

/* Sampled text depends on the seed only: the same at batch 1 and 16, and at 1 or 2 threads. */
static void test_sampling_independence(void) {
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_tied")) == 0, "%s",
          err_msg());
    int32_t p0[] = {5, 9, 11}, p1[] = {7, 3, 2, 8, 1, 40, 66}, p2[] = {100},
            p3[] = {12, 13, 14, 15};
    const int32_t *prompts[] = {p0, p1, p2, p3};
    int lens[] = {3, 7, 1, 4};
    int32_t eos = 2;
    GenerateOptions opt = {.max_new_tokens = 10,
                           .eos_ids = &eos,
                           .n_eos = 1,
                           .n_per_prompt = 4,
                           .sampling = {true, 0.9f, 0, 0.95f, 0.0f, 1.1f},
                           .seed = 42};
    Completion a[16], b[16], c[16], d[16];
    opt.max_batch = 1;
    CHECK(generate(&m, prompts, lens, 4, &opt, a) == 0, "%s", err_msg());
    opt.max_batch = 16;
    GenerateStats stats;
    opt.stats = &stats;
    double wall = omp_get_wtime();
    CHECK(generate(&m, prompts, lens, 4, &opt, b) == 0, "%s", err_msg());
    wall = omp_get_wtime() - wall;
    opt.stats = NULL;
    /* the step times are parts of the call's time */
    CHECK(stats.prefill_seconds > 0 && stats.decode_seconds > 0 && stats.pack_seconds >= 0 &&
              stats.prefill_seconds + stats.decode_seconds + stats.pack_seconds <= wall,
          "step times: prefill %g s, decode %g s, packing %g s, of a %g s call",
          stats.prefill_seconds, stats.decode_seconds, stats.pack_seconds, wall);
    /* the 4 completions of a prompt share its prefill: 3 + 7 + 1 + 4 prompt tokens, once */
    CHECK(stats.prefill_tokens == 15, "%ld prompt tokens prefilled, 15 expected",
          stats.prefill_tokens);
    CHECK(same_completions(a, b, 16), "batch 1 and batch 16 give the same tokens and log-probs");
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK(generate(&m, prompts, lens, 4, &opt, c) == 0, "%s", err_msg());
    omp_set_num_threads(threads);
    CHECK(same_completions(b, c, 16), "1 thread and %d threads give the same tokens", threads);
    opt.seed = 43;
    CHECK(generate(&m, prompts, lens, 4, &opt, d) == 0, "%s", err_msg());
    CHECK(!same_completions(b, d, 16), "another seed gives other samples");
    bool differ = false;
    for (int k = 1; k < 4; k++)
        differ |= a[0].len != a[k].len || memcmp(a[0].ids, a[k].ids, (size_t)a[0].len * 4) != 0;
    CHECK(differ, "the completions of one prompt differ from each other");
    int positive = 0;
    for (int i = 0; i < 16; i++)
        for (int t = 0; t < a[i].len; t++)
            positive += a[i].logprobs[t] > 0;
    CHECK(positive == 0, "%d log-probs above 0", positive);
    completions_free(a, 16);
    completions_free(b, 16);
    completions_free(c, 16);
    completions_free(d, 16);
    model_free(&m);
}

/* How far a log-prob is from the one it is held to, relative to that one (near-certain tokens,
 * whose log-prob is about 0, are measured against 1e-3). */
static double logprob_error(double got, double want) {
    return fabs(got - want) / fmax(fabs(want), 1e-3);
}

/* The packed-decoding tests' run: 8 prompts of 1 to 8 tokens (8 rows decoding together),
 * greedy, STAIRS_NEW new tokens, at max_batch (0: all at once) and with store as the packed
 * weights to keep (NULL: none kept). */
enum { STAIRS = 8, STAIRS_NEW = 20 };
static void decode_stairs(const Model *m, int max_batch, PackedModel *store,
                          Completion out[STAIRS]) {
    int32_t ids[STAIRS][STAIRS];
    const int32_t *prompts[STAIRS];
    int lens[STAIRS];
    for (int i = 0; i < STAIRS; i++) {
        lens[i] = 1 + i;
        for (int t = 0; t < lens[i]; t++)
            ids[i][t] = (int32_t)((7 * i + 13 * t + 3) % m->cfg.vocab_size);
        prompts[i] = ids[i];
    }
    GenerateOptions opt = {.max_new_tokens = STAIRS_NEW,
                           .sampling = sampling_defaults(),
                           .max_batch = max_batch,
                           .packed = store};
    CHECK(generate(m, prompts, lens, STAIRS, &opt, out) == 0, "%s", err_msg());
}

/* Several sequences decoding together for many steps run on the weights packed once
 * (model/packed_model.h): the same greedy tokens and log-probs as the plain products, which
 * check_model holds to transformers. Run at max_batch 4 (too few rows to pack) and 8 (packed),
 * and 8 again in the same store (refilled in place: the same bytes). */
static void test_packed_decoding(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    Model m;
    CHECK(model_load(&m, harness_source_path(path)) == 0, "%s", err_msg());
    enum { N = STAIRS };
    PackedModel store = {0};
    Completion plain[N], packed[N], again[N];
    decode_stairs(&m, 4, NULL, plain);
    decode_stairs(&m, 0, &store, packed);
    CHECK(store.block != NULL, "%s: 8 sequences over %d steps were decoded on packed weights", name,
          STAIRS_NEW);
    const float *block = store.block;
    decode_stairs(&m, 0, &store, again);
    CHECK(store.block == block, "%s: the store was refilled in place", name);
    CHECK(same_completions(plain, packed, N), "%s: packed decoding gives the plain tokens", name);
    bool bitwise = true;
    for (int i = 0; i < N; i++)
        bitwise &=
            packed[i].len == again[i].len && memcmp(packed[i].logprobs, again[i].logprobs,
                                                    (size_t)packed[i].len * sizeof(float)) == 0;
    CHECK(bitwise, "%s: a refilled store gives the same log-probs, bit for bit", name);
    completions_free(plain, N);
    completions_free(packed, N);
    completions_free(again, N);
    packed_model_free(&store);
    model_free(&m);
}

/* A model kept in bf16 decodes on bf16 packed weights where the CPU has bf16 dot products
 * (packed_bf16_available), or on AMX tiles with gemm_bf16's cached packing where gemm_bf16 runs
 * on AMX (packed_amx_available): its products then round their inputs to bf16 too, so the tokens
 * are held to the plain bf16-weight products' (fp32 arithmetic) by log-prob, over each pair of
 * completions' common start, which must be most of them. Measured (Zen 5, panels): all 160
 * tokens the same, worst log-prob 0.97e-2 relative; the bound is 2e-2 so that another CPU's
 * summing of a dot product's pair does not fail it, while a wrong product is off by far more.
 * Run on each path this machine has, forced through gemm_bf16_force: the default (AMX where
 * present) and the panels (GEMM_BF16_NONE: not AMX). */
static void check_packed_bf16_decoding(GemmBf16Path path) {
    GemmBf16Path before = gemm_bf16_path();
    if (!gemm_bf16_force(path)) {
        fprintf(stderr, "bf16 packed decoding on %s: skipped, this CPU has no such path\n",
                gemm_bf16_path_name(path));
        return;
    }
    bool amx = packed_amx_available(), panels = !amx && packed_bf16_available();
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_bf16")) == 0, "%s",
          err_msg());
    CHECK(model_store_bf16(&m) == 0, "%s", err_msg());
    enum { N = STAIRS };
    PackedModel store = {0};
    Completion plain[N], packed[N];
    decode_stairs(&m, 4, NULL, plain);
    decode_stairs(&m, 0, &store, packed);
    CHECK((store.layers != NULL) == (amx || panels),
          "8 sequences of a bf16 model over %d steps %s on packed weights", STAIRS_NEW,
          amx || panels ? "were decoded" : "were not decoded (no bf16 dot products)");
    CHECK(!amx || (store.block == NULL && packed_weight_is_amx(&store.layers[0]) &&
                   packed_weight_is_amx(&store.lm_head)),
          "bf16 decoding on AMX: every matrix the cache's packing, no copy of the store's own");
    CHECK(amx || !store.layers || store.layers[0].panels16 != NULL,
          "bf16 decoding without AMX: the AVX512_BF16 panels");
    int common = 0, total = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        int t = 0;
        for (; t < plain[i].len && t < packed[i].len && plain[i].ids[t] == packed[i].ids[t]; t++) {
            worst = fmax(worst, logprob_error(packed[i].logprobs[t], plain[i].logprobs[t]));
        }
        common += t, total += plain[i].len;
    }
    const char *on = amx ? "AMX tiles" : panels ? "bf16 panels" : "plain products";
    fprintf(stderr, "bf16 decoding on %s: %d of %d tokens the same, worst log-prob error %.3g\n",
            on, common, total, worst);
    CHECK(2 * common > total, "bf16 decoding on %s: only %d of %d tokens as the plain products'",
          on, common, total);
    CHECK(worst < 2e-2, "bf16 decoding on %s: log-probs %.3g relative from the plain products'", on,
          worst);
    completions_free(plain, N);
    completions_free(packed, N);
    packed_model_free(&store);
    model_free(&m);
    gemm_bf16_force(before);
}

static void test_packed_bf16_decoding(void) {
    check_packed_bf16_decoding(GEMM_BF16_AMX);
    check_packed_bf16_decoding(GEMM_BF16_NONE);
}

/* GRPO's generation with bf16: true: fp32 weights under bf16 autocast decode on AMX tiles with
 * the packing gemm_bf16's cache keeps for the autocast training products (no copy of the
 * store's own), and each packed product is autocast_linear_forward's own (the same packing of
 * x, the same cached W, the same tile order, the same rounding of the output): the same tokens
 * and log-probs bit for bit as decoding without the store (max_batch 4: too few rows to pack,
 * every product autocast_linear_forward). Without AMX, no store is built (autocast does not
 * multiply fp32 panels). */
static void test_autocast_decoding(void) {
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/qwen2_bias")) == 0, "%s",
          err_msg());
    m.backend = backend_cpu_autocast();
    enum { N = STAIRS };
    PackedModel store = {0};
    Completion plain[N], packed[N];
    decode_stairs(&m, 4, NULL, plain);
    decode_stairs(&m, 0, &store, packed);
    bool amx = packed_amx_available();
    CHECK((store.layers != NULL) == amx && store.block == NULL, "fp32 weights under autocast: %s",
          amx ? "the AMX form, no copy" : "no packed store");
    CHECK(!amx || packed_weight_is_amx(&store.lm_head), "autocast decoding: lm_head on AMX");
    bool bitwise = true;
    for (int i = 0; i < N; i++)
        bitwise &=
            plain[i].len == packed[i].len &&
            memcmp(plain[i].ids, packed[i].ids, (size_t)plain[i].len * sizeof(int32_t)) == 0 &&
            memcmp(plain[i].logprobs, packed[i].logprobs, (size_t)plain[i].len * sizeof(float)) ==
                0;
    CHECK(bitwise, "autocast decoding on AMX: the tokens and log-probs of the plain autocast "
                   "products, bit for bit");
    completions_free(plain, N);
    completions_free(packed, N);
    packed_model_free(&store);
    model_free(&m);
}

/* The worst relative difference between the log-probs generate() gave n completions and the
 * training forward's over the same tokens (each prompt and its completion scored in one pass:
 * an independent path, with no KV cache and OpenBLAS's products). With greedy, each new token
 * must also be its logits row's argmax there. */
static double worst_against_forward(const Model *m, const int32_t *const *prompts, const int *lens,
                                    const Completion *out, int n, bool greedy) {
    int V = m->cfg.vocab_size;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        int T = lens[i] + out[i].len;
        int32_t *tokens = malloc((size_t)T * sizeof *tokens);
        memcpy(tokens, prompts[i], (size_t)lens[i] * sizeof *tokens);
        memcpy(tokens + lens[i], out[i].ids, (size_t)out[i].len * sizeof *tokens);
        TokenBatch b = {.batch = 1, .t_len = T, .tokens = tokens};
        float *logp = malloc((size_t)T * sizeof *logp);
        float *logits = malloc((size_t)out[i].len * V * sizeof *logits);
        CHECK(model_token_logprobs(m, &b, NULL, logp) == 0, "%s", err_msg());
        CHECK(model_logits(m, &b, 0, lens[i] - 1, T - 1, logits) == 0, "%s", err_msg());
        for (int t = 0; t < out[i].len; t++) {
            worst = fmax(worst, logprob_error(out[i].logprobs[t], logp[lens[i] + t]));
            const float *row = logits + (size_t)t * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            CHECK(!greedy || best == out[i].ids[t],
                  "prompt %d, new token %d: %d, where the forward's argmax is %d", i, t,
                  out[i].ids[t], best);
        }
        free(tokens);
        free(logp);
        free(logits);
    }
    return worst;
}

/* Long prompts and few new tokens: the prefill alone repays packing the weights where the packed
 * product suits that many rows (AVX-512 builds, packed_model_worth): fp32, 8 prompts of 80 tokens
 * (640 rows); a model kept in bf16, whose packed products are bf16 dot products (where the CPU
 * has them), one prompt of 80. The tokens and log-probs are held to the training forward's: in
 * fp32 to 1e-4, greedy tokens the same; in bf16 to 2e-2, as the packed bf16 products round their
 * inputs to bf16 (the bound of test_packed_bf16_decoding). */
static void test_packed_prefill(const char *name, int n_prompts) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    Model m;
    CHECK(model_load(&m, harness_source_path(path)) == 0, "%s", err_msg());
    bool bf16 = strcmp(name, "llama_bf16") == 0;
    if (bf16) CHECK(model_store_bf16(&m) == 0, "%s", err_msg());
    enum { N = 8, LEN = 80, NEW = 3 };
    static int32_t ids[N][LEN];
    const int32_t *prompts[N];
    int lens[N];
    for (int i = 0; i < n_prompts; i++) {
        lens[i] = LEN;
        for (int t = 0; t < LEN; t++)
            ids[i][t] = (int32_t)((5 * i + 11 * t + 1) % m.cfg.vocab_size);
        prompts[i] = ids[i];
    }
    GenerateOptions opt = {.max_new_tokens = NEW, .sampling = sampling_defaults()};
    Completion out[N];
    PackedModel store = {0};
    opt.packed = &store;
    CHECK(generate(&m, prompts, lens, n_prompts, &opt, out) == 0, "%s", err_msg());
    int rows = n_prompts * LEN;
    bool amx = bf16 && packed_amx_available(); /* the AMX form: every product that suits */
    bool expect = packed_matmul_suits(rows) && (!bf16 || amx || packed_bf16_available());
    CHECK((store.layers != NULL) == expect, "%s: a prefill of %d rows %s packed weights", name,
          rows, expect ? "multiplies" : "does not multiply");
    double worst = worst_against_forward(&m, prompts, lens, out, n_prompts, !bf16);
    fprintf(stderr, "%s: prefill of %d rows%s, worst log-prob error %.3g against the forward\n",
            name, rows, store.layers ? " on packed weights" : "", worst);
    CHECK(worst <= (bf16 ? 2e-2 : 1e-4),
          "%s: prefill and decoding log-probs %.3g relative from the training forward's", name,
          worst);
    completions_free(out, n_prompts);
    packed_model_free(&store);
    model_free(&m);
}

/* Sampling as transformers' generate() samples under torch.manual_seed (tests/fixtures/generate/
 * torch_sampled.json, tools/reference/make_torch_sampling_fixtures.py): each prompt repeated
 * n_per_prompt times in consecutive rows, temperature / top-k / top-p, an eos that stops some rows
 * early while the others go on. Every token equal, and the generator left where torch's is (its
 * next two float64 uniform_ draws bit for bit): as many exponentials drawn, finished rows
 * included. */
static void test_torch_sampled(void) {
    json_t *fx;
    CHECK(json_load_path(harness_source_path("tests/fixtures/generate/torch_sampled.json"), &fx) ==
              0,
          "%s", err_msg());
    size_t c;
    json_t *k;
    int n_cases = 0;
    json_array_foreach(json_object_get(fx, "cases"), c, k) {
        const char *name = json_string_value(json_object_get(k, "model"));
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
        Model m;
        CHECK(model_load(&m, harness_source_path(path)) == 0, "%s", err_msg());
        json_t *prompts = json_object_get(k, "prompts"), *want = json_object_get(k, "completions");
        json_t *smp = json_object_get(k, "sampling");
        int n = (int)json_array_size(prompts);
        int per = (int)json_integer_value(json_object_get(k, "n_per_prompt"));
        int32_t **ids = calloc((size_t)n, sizeof *ids);
        int *lens = calloc((size_t)n, sizeof *lens);
        for (int i = 0; i < n; i++) {
            json_t *p = json_array_get(prompts, (size_t)i);
            lens[i] = (int)json_array_size(p);
            ids[i] = malloc((size_t)lens[i] * sizeof **ids);
            for (int t = 0; t < lens[i]; t++)
                ids[i][t] = (int32_t)json_integer_value(json_array_get(p, (size_t)t));
        }
        int32_t eos = (int32_t)json_integer_value(json_object_get(k, "eos_token_id"));
        TorchGenerator g;
        torch_generator_seed(&g, json_integer_value(json_object_get(k, "seed")));
        SamplingParams sp = sampling_defaults();
        sp.do_sample = true;
        sp.temperature = (float)json_number_value(json_object_get(smp, "temperature"));
        sp.top_k = (int)json_integer_value(json_object_get(smp, "top_k"));
        sp.top_p = (float)json_number_value(json_object_get(smp, "top_p"));
        GenerateOptions opt = {
            .max_new_tokens = (int)json_integer_value(json_object_get(k, "max_new_tokens")),
            .eos_ids = &eos,
            .n_eos = 1,
            .max_batch = 2, /* ignored: torch's draws decode the whole batch together */
            .n_per_prompt = per,
            .sampling = sp,
            .torch_rng = &g};
        Completion *out = calloc((size_t)n * per, sizeof *out);
        CHECK(generate(&m, (const int32_t *const *)ids, lens, n, &opt, out) == 0, "%s: %s", name,
              err_msg());
        int early = 0;
        for (int j = 0; j < n * per; j++) {
            json_t *w = json_array_get(want, (size_t)j);
            bool same = out[j].len == (int)json_array_size(w);
            for (int t = 0; same && t < out[j].len; t++)
                same = out[j].ids[t] == (int32_t)json_integer_value(json_array_get(w, (size_t)t));
            CHECK(same, "%s, row %d: %d tokens, transformers' generate %zu (or other tokens)", name,
                  j, out[j].len, json_array_size(w));
            early += out[j].len < opt.max_new_tokens;
        }
        double next[2];
        torch_uniform_f64(&g, next, 2, 0, 1);
        for (int i = 0; i < 2; i++) {
            uint64_t bits;
            memcpy(&bits, &next[i], sizeof bits);
            const char *hex = json_string_value(json_array_get(json_object_get(k, "after"), i));
            CHECK(hex && bits == strtoull(hex, NULL, 16),
                  "%s: the generator after generate() is not torch's (draw %d)", name, i);
        }
        CHECK(early > 0, "%s: some rows stop early (else the case shows less)", name);
        completions_free(out, n * per);
        free(out);
        for (int i = 0; i < n; i++)
            free(ids[i]);
        free(ids);
        free(lens);
        model_free(&m);
        n_cases++;
    }
    CHECK(n_cases >= 3, "%d torch-sampled cases", n_cases);
    json_decref(fx);
}

/* 6 prompts x 2 completions of qwen2_bias sampled from torch's generator (seed 5, TRL's
 * defaults), the prompts given once each with n_per_prompt = per (shared) or each repeated per
 * times in consecutive rows with n_per_prompt 1; the generator's next two uniform_ draws in
 * after[2], the prefill rows run in *prefill_rows. */
static void torch_sample_rows(const Model *m, bool shared, Completion *out, double after[2],
                              long *prefill_rows) {
    enum { PROMPTS = 6, PER = 2 };
    static const int32_t p0[] = {5, 9, 2, 7, 1}, p1[] = {3, 3}, p2[] = {8, 1, 4, 6, 2, 9, 11},
                         p3[] = {4}, p4[] = {2, 7, 7}, p5[] = {10, 6, 1, 3};
    const int32_t *const once[PROMPTS] = {p0, p1, p2, p3, p4, p5};
    const int once_lens[PROMPTS] = {5, 2, 7, 1, 3, 4};
    const int32_t *rows[PROMPTS * PER];
    int lens[PROMPTS * PER];
    for (int j = 0; j < PROMPTS * PER; j++)
        rows[j] = once[j / PER], lens[j] = once_lens[j / PER];
    TorchGenerator g;
    torch_generator_seed(&g, 5);
    SamplingParams sp = sampling_defaults();
    sp.do_sample = true, sp.top_k = 0;
    GenerateStats stats;
    GenerateOptions opt = {.max_new_tokens = 16,
                           .n_per_prompt = shared ? PER : 1,
                           .sampling = sp,
                           .torch_rng = &g,
                           .stats = &stats};
    CHECK(generate(m, shared ? once : rows, shared ? once_lens : lens,
                   shared ? PROMPTS : PROMPTS * PER, &opt, out) == 0,
          "%s", err_msg());
    torch_uniform_f64(&g, after, 2, 0, 1);
    *prefill_rows = stats.prefill_tokens;
}

/* Under torch's draws the completions of a prompt share its prefill within the step that
 * prefills it (generate.c, share_prefills_in_step) where the products are the packed ones: the
 * same tokens, log-probs (bit for bit) and generator after as prefilling every row, in fp32 and
 * under bf16 autocast (AMX tiles here); and one prefill per prompt where it applies. */
static void test_torch_shared_prefill(void) {
    enum { N = 12 };
    for (int autocast = 0; autocast < 2; autocast++) {
        Model m;
        CHECK(model_load(&m, harness_source_path("tests/fixtures/models/qwen2_bias")) == 0, "%s",
              err_msg());
        if (autocast) m.backend = backend_cpu_autocast();
        const char *name = autocast ? "bf16 autocast" : "fp32";
        Completion shared[N], rows[N];
        double after_shared[2], after_rows[2];
        long prefill_shared, prefill_rows;
        torch_sample_rows(&m, true, shared, after_shared, &prefill_shared);
        torch_sample_rows(&m, false, rows, after_rows, &prefill_rows);
        bool same = memcmp(after_shared, after_rows, sizeof after_rows) == 0;
        for (int j = 0; j < N; j++)
            same &=
                shared[j].len == rows[j].len &&
                memcmp(shared[j].ids, rows[j].ids, (size_t)rows[j].len * sizeof(int32_t)) == 0 &&
                memcmp(shared[j].logprobs, rows[j].logprobs, (size_t)rows[j].len * sizeof(float)) ==
                    0;
        CHECK(same,
              "%s, torch's draws: a prompt's completions sharing its prefill give other "
              "tokens, log-probs or generator state than prefilling each",
              name);
        /* packed (so shared) where packing pays for these 12 rows over 16 steps */
        bool packs = packed_model_worth(&m, N, 16, prefill_rows) && packed_matmul_suits(6);
        CHECK(prefill_rows == 2 * 22, "%s: %ld prefill rows without sharing", name, prefill_rows);
        CHECK(prefill_shared == (packs ? 22 : prefill_rows),
              "%s: %ld prefill rows shared (packed: %d)", name, prefill_shared, packs);
        completions_free(shared, N);
        completions_free(rows, N);
        model_free(&m);
    }
}

int main(void) {
    test_torch_shared_prefill();
    test_packed_prefill("llama_tied", 8);
    test_packed_prefill("llama_bf16", 1);
    test_packed_decoding("llama_tied");
    test_packed_decoding("qwen2_bias");
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        check_model(models[i], false);
    check_model("llama_bf16", true);
    /* the longest prompt stops on eos at its second token; transformers keeps counting its
     * positions for every row's frequencies (issue 34 item 8) */
    check_model_batches("llama_rope_dynamic", false, true);
    check_model_batches("phi3_longrope", false, true);
    check_model_batches("phi4_mini_partial", false, true);
    test_packed_bf16_decoding();
    test_autocast_decoding();
    test_sampling_independence();
    test_torch_sampled();

    /* bad requests */
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_tied")) == 0, "%s",
          err_msg());
    int32_t p[3] = {1, 2, 3}, eos = 2;
    const int32_t *prompts[1] = {p};
    Completion out[1];
    int empty = 0, three = 3;
    GenerateOptions opt = {
        .max_new_tokens = 4, .eos_ids = &eos, .n_eos = 1, .sampling = sampling_defaults()};
    CHECK(generate(&m, prompts, &empty, 1, &opt, out) != 0 && strstr(err_msg(), "empty"),
          "empty prompt: %s", err_msg());
    GenerateOptions zero = opt;
    zero.max_new_tokens = 0;
    CHECK(generate(&m, prompts, &three, 1, &zero, out) != 0 && strstr(err_msg(), "max_new_tokens"),
          "max_new_tokens 0: %s", err_msg());
    int32_t *big = calloc(5000, sizeof *big);
    const int32_t *bigp[1] = {big};
    int big_len = 5000;
    CHECK(generate(&m, bigp, &big_len, 1, &opt, out) != 0 && strstr(err_msg(), "context"),
          "over-long prompt: %s", err_msg());
    free(big);
    int32_t bad[2] = {1, 999};
    const int32_t *badp[1] = {bad};
    int two = 2;
    CHECK(generate(&m, badp, &two, 1, &opt, out) != 0 && strstr(err_msg(), "vocabulary"),
          "bad id: %s", err_msg());
    model_free(&m);
    return harness_finish("test_generate");
}
