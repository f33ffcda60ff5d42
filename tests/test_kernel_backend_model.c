/* The model end to end through tests/backend_emu.h's emulated device backend: a forward, the
 * training tape with LoRA and its backward, the cached forward and an optimizer step must give
 * bitwise the CPU backend's results; every tensor an op is given must be device memory; every op
 * of the table must be reached; and one decoder layer must call each op as often as its
 * architecture says. A model/ file that calls a kernel around the table, reads device memory from
 * the host, or relies on zeroed allocations fails here. The same for a frozen bf16 model's
 * forward and cached forward. */
#include "backend_emu.h"
#include "common/error.h"
#include "harness.h"
#include "model/activations.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "train/optimizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) {
    return harness_frand(&rng_state);
}

/* A fresh host copy of n floats of be's memory. */
static float *down(const Backend *be, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    be->copy(be, h, d, n * sizeof(float), BACKEND_DEVICE_TO_HOST);
    return h;
}

/* What one run of the model computes, copied to the host. */
typedef struct {
    float *logp, *tape_logp, *grads, *lora_grads, *logits, *params_after;
    LogitStats *stats;
    double grad_norm;
} RunResult;

static void run_result_free(RunResult *r) {
    free(r->logp), free(r->tape_logp), free(r->grads), free(r->lora_grads), free(r->logits);
    free(r->params_after), free(r->stats);
}

/* Runs everything model/ and the optimizer do on m (its backend set to be); grads in be's
 * memory. Only the emu backend needs the model's weights registered as its own. */
static void run_model(Model *m, LoraAdapter *lora, const Backend *be, RunResult *res) {
    memset(res, 0, sizeof *res);
    m->backend = be;
    if (be == &emu_backend) {
        emu_own(m->params, m->n_params * sizeof(float));
        emu_own(lora->params, lora->n_params * sizeof(float));
    }
    int B = 3, T = 24, cells = B * T;
    int32_t tokens[72];
    uint8_t mask[72];
    for (int i = 0; i < cells; i++) {
        /* row 1 repeats row 0's first 18 tokens: a shared prefix (token_layout.h); row 2 has 4
         * cells of left padding */
        int t = i % T, b = i / T;
        tokens[i] = (b == 1 && t < 18) ? (int32_t)((t * 7 + 3) % m->cfg.vocab_size)
                                       : (int32_t)((i * 7 + 3 + b) % m->cfg.vocab_size);
        mask[i] = !(b == 2 && t < 4);
    }
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = mask};
    res->logp = malloc(cells * sizeof(float));
    CHECK(model_token_logprobs(m, &batch, NULL, res->logp) == 0, "%s: logprobs: %s", be->name,
          err_msg());

    /* the training tape with gradient checkpointing, its log-probs and the backward of both the
     * base and the adapter (lora dropout on) */
    lora->training = true;
    lora->dropout_key = 99;
    m->lora = lora;
    ForwardTape tape = {0};
    res->tape_logp = malloc(cells * sizeof(float));
    res->stats = malloc(cells * sizeof *res->stats);
    CHECK(model_forward_tape(m, &batch, true, &tape) == 0, "%s: tape: %s", be->name, err_msg());
    CHECK(model_tape_logprobs_stats(m, &tape, NULL, res->tape_logp, res->stats) == 0, "tape lp");
    float *dlogp = malloc(cells * sizeof *dlogp);
    for (int i = 0; i < cells; i++)
        dlogp[i] = 0.01f * (float)((i % 5) - 2);
    float *grads = be->alloc(be, m->n_params * sizeof(float), "grads");
    float *lgrads = be->alloc(be, lora->n_params * sizeof(float), "lora grads");
    be->memset(be, grads, 0, m->n_params * sizeof(float));
    be->memset(be, lgrads, 0, lora->n_params * sizeof(float));
    CHECK(model_backward(m, &tape, NULL, dlogp, grads, lgrads) == 0, "%s: backward", be->name);
    forward_tape_free(&tape);
    lora->training = false;

    /* an optimizer step of the base from those gradients */
    ParamSpan *spans = malloc((size_t)m->n_param_tensors * sizeof *spans);
    for (int i = 0; i < m->n_param_tensors; i++)
        spans[i] = (ParamSpan){m->param_info[i].offset, m->param_info[i].numel, i % 2 == 0, false};
    AdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    AdamW opt;
    CHECK(adamw_init(&opt, &cfg, spans, m->n_param_tensors) == 0, "adamw");
    emu_own(opt.m, opt.n * sizeof(float)), emu_own(opt.v, opt.n * sizeof(float));
    res->grad_norm = grad_global_norm(be, grads, spans, m->n_param_tensors);
    grad_clip(be, grads, spans, m->n_param_tensors, 0.5 * res->grad_norm, res->grad_norm);
    res->grads = down(be, grads, m->n_params);
    res->lora_grads = down(be, lgrads, lora->n_params);
    float *saved = malloc(m->n_params * sizeof *saved);
    memcpy(saved, m->params, m->n_params * sizeof *saved);
    adamw_step(&opt, be, m->params, grads, 1e-3);
    res->params_after = malloc(m->n_params * sizeof(float));
    memcpy(res->params_after, m->params, m->n_params * sizeof(float));
    memcpy(m->params, saved, m->n_params * sizeof *saved);
    emu_disown(opt.m), emu_disown(opt.v);
    adamw_free(&opt);

    /* the cached forward with the adapter: two prompts prefilled, then a decode step of both */
    KvCache kv;
    int V = m->cfg.vocab_size;
    res->logits = malloc((size_t)4 * V * sizeof(float));
    CHECK(kv_cache_init(&kv, be, &m->cfg, 2, 16) == 0, "kv");
    CachedChunk prefill[2] = {{1, tokens, 9}, {0, tokens + T, 5}};
    CHECK(model_forward_cached(m, NULL, &kv, prefill, 2, res->logits) == 0, "%s: prefill: %s",
          be->name, err_msg());
    CachedChunk decode[2] = {{0, tokens + 40, 1}, {1, tokens + 50, 1}};
    CHECK(model_forward_cached(m, NULL, &kv, decode, 2, res->logits + 2 * V) == 0, "%s: decode: %s",
          be->name, err_msg());
    kv_cache_free(&kv);
    m->lora = NULL;

    be->free(be, grads), be->free(be, lgrads);
    free(dlogp), free(spans), free(saved);
    if (be == &emu_backend) emu_disown(m->params), emu_disown(lora->params);
    m->backend = NULL;
}

static bool same(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

static void check_end_to_end(const char *fixture) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", fixture);
    Model m;
    LoraAdapter lora;
    const char *all[] = {"all-linear"};
    if (model_load(&m, harness_source_path(path)) != 0 ||
        lora_create(&lora, &m.cfg, 4, 8.0, false, 0.1, all, 1, 5) != 0) {
        CHECK(false, "%s: %s", fixture, err_msg());
        return;
    }
    for (size_t i = 0; i < lora.n_params; i++) /* B starts at zero: make the adapter count */
        lora.params[i] += 0.01f * frand();
    RunResult cpu, emu;
    run_model(&m, &lora, backend_cpu(), &cpu);
    memset(emu_op_calls, 0, sizeof emu_op_calls);
    emu_foreign_pointers = 0;
    run_model(&m, &lora, &emu_backend, &emu);
    int cells = 72, V = m.cfg.vocab_size;
    CHECK(same(cpu.logp, emu.logp, cells * 4), "%s: emu logprobs differ from cpu", fixture);
    CHECK(same(cpu.tape_logp, emu.tape_logp, cells * 4) &&
              same(cpu.stats, emu.stats, cells * sizeof *cpu.stats),
          "%s: emu tape log-probs differ", fixture);
    CHECK(same(cpu.grads, emu.grads, m.n_params * 4), "%s: emu gradients differ", fixture);
    CHECK(same(cpu.lora_grads, emu.lora_grads, lora.n_params * 4),
          "%s: emu adapter gradients differ", fixture);
    CHECK(cpu.grad_norm == emu.grad_norm && cpu.grad_norm > 0, "%s: grad norm %g vs %g", fixture,
          cpu.grad_norm, emu.grad_norm);
    CHECK(same(cpu.params_after, emu.params_after, m.n_params * 4), "%s: emu AdamW differs",
          fixture);
    CHECK(same(cpu.logits, emu.logits, (size_t)4 * V * 4), "%s: emu cached logits differ", fixture);
    CHECK(emu_foreign_pointers == 0, "%s: %d tensors given to ops were not device memory", fixture,
          emu_foreign_pointers);
    for (int op = 0; op < N_OPS; op++)
        CHECK(emu_op_calls[op] > 0 || op == OP_ADAMW8BIT,
              "%s: the model never reached the table's %s", fixture, emu_op_names[op]);

    /* one training tape without recomputation: each layer calls the table as the architecture
     * says, so a kernel called around the table shows as a missing call */
    memset(emu_op_calls, 0, sizeof emu_op_calls);
    m.backend = &emu_backend;
    emu_own(m.params, m.n_params * sizeof(float));
    emu_own(lora.params, lora.n_params * sizeof(float));
    m.lora = &lora;
    int32_t tokens[16];
    for (int i = 0; i < 16; i++)
        tokens[i] = (i * 5 + 1) % V;
    TokenBatch b = {.batch = 1, .t_len = 16, .tokens = tokens};
    ForwardTape tape = {0};
    CHECK(model_forward_tape(&m, &b, false, &tape) == 0, "tape");
    long L = m.cfg.n_layers, qk = m.cfg.qk_norm ? 2 : 0;
    long want_fwd[N_OPS] = {
        [OP_LINEAR] = 7 * L, [OP_LORA] = 7 * L,        [OP_RMSNORM] = (2 + qk) * L + 1,
        [OP_ROPE] = 2 * L,   [OP_ATTENTION] = L,       [OP_ADD] = 2 * L,
        [OP_SWIGLU] = L,     [OP_EMBEDDING_GATHER] = 1};
    for (int op = 0; op < N_OPS; op++)
        if (op != OP_COPY)
            CHECK(emu_op_calls[op] == want_fwd[op], "%s: forward called %s %ld times, want %ld",
                  fixture, emu_op_names[op], emu_op_calls[op], want_fwd[op]);
    float dlogp[16] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    float *grads = emu_backend.alloc(&emu_backend, m.n_params * sizeof(float), "grads");
    emu_backend.memset(&emu_backend, grads, 0, m.n_params * sizeof(float));
    memset(emu_op_calls, 0, sizeof emu_op_calls);
    CHECK(model_backward(&m, &tape, NULL, dlogp, grads, NULL) == 0, "backward");
    long want_bwd[N_OPS] = {[OP_LINEAR_BACKWARD] = 7 * L,
                            [OP_LORA_BACKWARD] = 7 * L,
                            [OP_RMSNORM] = 2 * L,
                            [OP_RMSNORM_BACKWARD] = (2 + qk) * L + 1,
                            [OP_ROPE_BACKWARD] = 2 * L,
                            [OP_ATTENTION_BACKWARD] = L,
                            [OP_ADD] = 5 * L,
                            [OP_SWIGLU] = L,
                            [OP_SWIGLU_BACKWARD] = L,
                            [OP_ROWS_GATHER] = 1,
                            [OP_LOGPROB_BACKWARD] = 1,
                            [OP_MEMSET] = 1,
                            [OP_ROWS_SCATTER_ADD] = 1,
                            [OP_EMBEDDING_SCATTER_ADD] = 1};
    for (int op = 0; op < N_OPS; op++)
        if (op != OP_COPY)
            CHECK(emu_op_calls[op] == want_bwd[op], "%s: backward called %s %ld times, want %ld",
                  fixture, emu_op_names[op], emu_op_calls[op], want_bwd[op]);
    emu_backend.free(&emu_backend, grads);
    forward_tape_free(&tape);
    emu_disown(m.params), emu_disown(lora.params);
    m.backend = NULL, m.lora = NULL;

    run_result_free(&cpu), run_result_free(&emu);
    lora_free(&lora);
    model_free(&m);
}

/* Log-probs and a prefill's logits of m on be (emu: m's bf16 weights registered as its own). */
static void run_frozen(Model *m, const Backend *be, float *logp, float *logits) {
    size_t n_small = 0;
    for (int i = 0; i < m->n_param_tensors; i++)
        if (m->param_info[i].ndim == 1) n_small += m->param_info[i].numel;
    if (be == &emu_backend) {
        emu_own(m->params16, m->n_params * sizeof *m->params16);
        emu_own(m->params_small, (n_small ? n_small : 1) * sizeof(float));
    }
    m->backend = be;
    int32_t tokens[40];
    for (int i = 0; i < 40; i++)
        tokens[i] = (int32_t)((i * 11 + 2) % m->cfg.vocab_size);
    TokenBatch b = {.batch = 2, .t_len = 20, .tokens = tokens};
    CHECK(model_token_logprobs(m, &b, NULL, logp) == 0, "%s: bf16 logprobs: %s", be->name,
          err_msg());
    KvCache kv;
    CHECK(kv_cache_init(&kv, be, &m->cfg, 2, 24) == 0, "kv");
    CachedChunk prefill[2] = {{0, tokens, 20}, {1, tokens + 20, 7}};
    CHECK(model_forward_cached(m, NULL, &kv, prefill, 2, logits) == 0, "%s: bf16 prefill: %s",
          be->name, err_msg());
    kv_cache_free(&kv);
    m->backend = NULL;
    if (be == &emu_backend) emu_disown(m->params16), emu_disown(m->params_small);
}

/* A frozen model kept in bf16 (model_store_bf16, as a bf16 reference): its forward and the cached
 * forward through emu give the CPU's bits (bf16 weights in linear, embedding_gather, logprob). */
static void check_bf16(const char *fixture) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", fixture);
    Model m;
    if (model_load(&m, harness_source_path(path)) != 0 || model_store_bf16(&m) != 0) {
        CHECK(false, "%s: %s", fixture, err_msg());
        return;
    }
    size_t V = (size_t)m.cfg.vocab_size;
    float *lp[2] = {malloc(40 * sizeof(float)), malloc(40 * sizeof(float))};
    float *lg[2] = {malloc(2 * V * sizeof(float)), malloc(2 * V * sizeof(float))};
    emu_foreign_pointers = 0;
    run_frozen(&m, backend_cpu(), lp[0], lg[0]);
    run_frozen(&m, &emu_backend, lp[1], lg[1]);
    CHECK(same(lp[0], lp[1], 40 * sizeof(float)), "%s bf16: emu logprobs differ", fixture);
    CHECK(same(lg[0], lg[1], 2 * V * sizeof(float)), "%s bf16: emu cached logits differ", fixture);
    CHECK(emu_foreign_pointers == 0, "%s bf16: %d tensors were not device memory", fixture,
          emu_foreign_pointers);
    free(lp[0]), free(lp[1]), free(lg[0]), free(lg[1]);
    model_free(&m);
}

/* A backend without backend.h's Gemma 2 group (the emulated device, as the CUDA one) refuses a
 * Gemma 2 or Gemma 3 model (fixture `name`) with an error naming the backend, in the batch
 * forward and in decoding, before any op runs. */
static void check_gemma_refused(const char *name) {
    Model m;
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    if (model_load(&m, harness_source_path(path)) != 0) {
        CHECK(false, "%s: %s", name, err_msg());
        return;
    }
    m.backend = &emu_backend;
    int32_t tokens[4] = {1, 5, 9, 3};
    TokenBatch b = {.batch = 1, .t_len = 4, .tokens = tokens};
    float logp[4];
    memset(emu_op_calls, 0, sizeof emu_op_calls);
    CHECK(model_token_logprobs(&m, &b, NULL, logp) != 0 &&
              strstr(err_msg(), "emu backend has no Gemma 2 kernels") != NULL,
          "%s on a backend without its kernels is refused: %s", name, err_msg());
    KvCache kv;
    CHECK(kv_cache_init(&kv, &emu_backend, &m.cfg, 1, 8) == 0, "%s", err_msg());
    CachedChunk chunk = {.slot = 0, .tokens = tokens, .n_tokens = 4};
    float logits[128];
    CHECK(model_forward_cached(&m, NULL, &kv, &chunk, 1, logits) != 0 &&
              strstr(err_msg(), "no Gemma 2 kernels") != NULL,
          "decoding refused too: %s", err_msg());
    kv_cache_free(&kv);
    long calls = 0;
    for (int op = 0; op < N_OPS; op++)
        calls += emu_op_calls[op];
    CHECK(calls == 0, "refused before any op ran (%ld calls)", calls);
    model_free(&m);
}

int main(void) {
    check_gemma_refused("gemma2_tiny");
    check_gemma_refused("gemma3_tiny");
    /* biases (qwen2_bias), a sliding window (mistral_window), q/k norms (qwen3_qknorm) */
    check_end_to_end("qwen3_qknorm");
    check_end_to_end("mistral_window");
    check_end_to_end("qwen2_bias");
    check_bf16("llama_bf16");
    check_bf16("qwen3_qknorm");
    CHECK(emu_live_ranges() == 0, "%d emu allocations left", emu_live_ranges());
    return harness_finish("test_kernel_backend_model");
}
