/* The residual adds fused with the RMSNorm beside them (backend.h's add_rmsnorm and
 * rmsnorm_backward_add, kernels/cpu/rmsnorm.c; decoder_layer.h's LayerChain), and SwiGLU's
 * backward regenerating the kept tape's act (swiglu_backward_act), must give the bits of the
 * unfused ops, every one:
 *  1. the kernels against add followed by rmsnorm_forward, and rmsnorm_backward into a scratch
 *     followed by the add, compared with memcmp on ragged shapes (row counts not a multiple of
 *     the norm's row group, widths not a multiple of a vector), with the sum over either input;
 *     swiglu_backward_act against swiglu_forward and swiglu_backward;
 *  2. the model through the CPU backend against the same table with the fused ops taken out
 *     (model/ then calls add, rmsnorm, rmsnorm_backward and swiglu as before): the batch forward's
 *     log-probs, the training tape's (kept and checkpointed) and the backward's gradients, on a
 *     Llama-family fixture, one with q/k norms, and Gemma 2 (whose (1 + w) norm always takes the
 *     unfused ops, through the same layer chain);
 *  3. the layer chain itself (each layer norming the next one's input) against layers on their
 *     own: the batch forward's logits against the cached forward's, fed one token at a time (a
 *     NULL chain, other attention kernels: equal within float rounding, not bitwise). */
#include "common/error.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "model/kv_cache.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    return harness_frand(&rng_state);
}

static float *random_floats(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * frand();
    return p;
}

static float *copy_of(const float *src, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

static bool same(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

/* 1: the forward kernel, sum written apart from a and b, over a (sum == a) and over b. */
static void check_add_rmsnorm(int n, int c) {
    size_t nc = (size_t)n * c;
    float *a = random_floats(nc, 3.0f), *b = random_floats(nc, 0.5f), *w = random_floats(c, 1.5f);
    float eps = 1e-5f;
    float *want_sum = malloc(nc * sizeof(float)), *want_out = malloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        want_sum[i] = a[i] + b[i];
    rmsnorm_forward(want_out, want_sum, w, n, c, eps);

    float *sum = malloc(nc * sizeof(float)), *out = malloc(nc * sizeof(float));
    add_rmsnorm_forward(sum, out, a, b, w, n, c, eps);
    CHECK(same(sum, want_sum, nc * 4) && same(out, want_out, nc * 4),
          "add_rmsnorm %d x %d: not the bits of add + rmsnorm", n, c);
    float *over_a = copy_of(a, nc), *over_b = copy_of(b, nc);
    add_rmsnorm_forward(over_a, out, over_a, b, w, n, c, eps);
    CHECK(same(over_a, want_sum, nc * 4) && same(out, want_out, nc * 4),
          "add_rmsnorm %d x %d, sum over a: differs", n, c);
    add_rmsnorm_forward(over_b, out, a, over_b, w, n, c, eps);
    CHECK(same(over_b, want_sum, nc * 4) && same(out, want_out, nc * 4),
          "add_rmsnorm %d x %d, sum over b: differs", n, c);

    /* and through the CPU backend's table */
    const Backend *be = backend_cpu();
    be->add_rmsnorm(be, sum, out, a, b, w, n, c, eps);
    CHECK(same(sum, want_sum, nc * 4) && same(out, want_out, nc * 4),
          "backend add_rmsnorm %d x %d: differs", n, c);
    free(a), free(b), free(w), free(want_sum), free(want_out), free(sum), free(out);
    free(over_a), free(over_b);
}

/* 1: the backward kernel, dw given (accumulated onto nonzero values) and NULL. */
static void check_rmsnorm_backward_add(int n, int c) {
    size_t nc = (size_t)n * c;
    float *dout = random_floats(nc, 1.0f), *in = random_floats(nc, 2.0f);
    float *w = random_floats(c, 1.5f), *dres0 = random_floats(nc, 0.7f);
    float *dw0 = random_floats(c, 0.1f);
    float eps = 1e-6f;
    float *want_dres = copy_of(dres0, nc), *want_dw = copy_of(dw0, c);
    float *tmp = malloc(nc * sizeof(float));
    rmsnorm_backward(tmp, want_dw, dout, in, w, n, c, eps);
    for (size_t i = 0; i < nc; i++)
        want_dres[i] = want_dres[i] + tmp[i];

    float *dres = copy_of(dres0, nc), *dw = copy_of(dw0, c);
    rmsnorm_backward_add(dres, dw, dout, in, w, n, c, eps);
    CHECK(same(dres, want_dres, nc * 4), "rmsnorm_backward_add %d x %d: dres differs", n, c);
    CHECK(same(dw, want_dw, (size_t)c * 4), "rmsnorm_backward_add %d x %d: dw differs", n, c);
    memcpy(dres, dres0, nc * sizeof(float));
    const Backend *be = backend_cpu();
    be->rmsnorm_backward_add(be, dres, NULL, dout, in, w, n, c, eps);
    CHECK(same(dres, want_dres, nc * 4), "backend rmsnorm_backward_add %d x %d (dw NULL): differs",
          n, c);
    free(dout), free(in), free(w), free(dres0), free(dw0), free(want_dres), free(want_dw);
    free(tmp), free(dres), free(dw);
}

/* 1: SwiGLU's backward writing act, against swiglu_forward and swiglu_backward apart, with dgate
 * apart from dout and over it. */
static void check_swiglu_backward_act(size_t n) {
    float *gate = random_floats(n, 6.0f), *up = random_floats(n, 2.0f);
    float *dout = random_floats(n, 1.0f);
    float *want_act = malloc(n * sizeof(float)), *want_dgate = malloc(n * sizeof(float));
    float *want_dup = malloc(n * sizeof(float));
    swiglu_forward(want_act, gate, up, n);
    swiglu_backward(want_dgate, want_dup, dout, gate, up, n);
    float *act = malloc(n * sizeof(float)), *dgate = malloc(n * sizeof(float));
    float *dup = malloc(n * sizeof(float)), *over = copy_of(dout, n);
    swiglu_backward_act(act, dgate, dup, dout, gate, up, n);
    CHECK(same(act, want_act, n * 4) && same(dgate, want_dgate, n * 4) &&
              same(dup, want_dup, n * 4),
          "swiglu_backward_act %zu: not the bits of swiglu_forward + swiglu_backward", n);
    const Backend *be = backend_cpu();
    be->swiglu_backward_act(be, act, over, dup, over, gate, up, n);
    CHECK(same(act, want_act, n * 4) && same(over, want_dgate, n * 4) && same(dup, want_dup, n * 4),
          "backend swiglu_backward_act %zu, dgate over dout: differs", n);
    free(gate), free(up), free(dout), free(want_act), free(want_dgate), free(want_dup);
    free(act), free(dgate), free(dup), free(over);
}

/* What one run of the model gives. */
typedef struct {
    float *logp, *tape_logp[2], *grads[2];
} ModelRun;

static void model_run_free(ModelRun *r) {
    free(r->logp);
    for (int i = 0; i < 2; i++)
        free(r->tape_logp[i]), free(r->grads[i]);
}

/* 2: the batch forward, then the tape kept (recompute false) and checkpointed (true), each with
 * its backward, on backend be. */
static void run_model(Model *m, const Backend *be, ModelRun *res) {
    m->backend = be;
    enum { B = 3, T = 21, CELLS = B * T };
    int32_t tokens[CELLS];
    uint8_t mask[CELLS];
    for (int i = 0; i < CELLS; i++) { /* row 1 shares row 0's first 15 tokens; row 2 padded */
        int t = i % T, b = i / T;
        tokens[i] = (b == 1 && t < 15) ? (int32_t)((t * 5 + 2) % m->cfg.vocab_size)
                                       : (int32_t)((i * 5 + 2 + b) % m->cfg.vocab_size);
        mask[i] = !(b == 2 && t < 3);
    }
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = mask};
    res->logp = malloc(CELLS * sizeof(float));
    CHECK(model_token_logprobs(m, &batch, NULL, res->logp) == 0, "logprobs: %s", err_msg());
    float dlogp[CELLS];
    for (int i = 0; i < CELLS; i++)
        dlogp[i] = 0.02f * (float)((i % 7) - 3);
    for (int rc = 0; rc < 2; rc++) {
        ForwardTape tape = {0};
        res->tape_logp[rc] = malloc(CELLS * sizeof(float));
        res->grads[rc] = calloc(m->n_params, sizeof(float));
        CHECK(model_forward_tape(m, &batch, rc == 1, &tape) == 0, "tape: %s", err_msg());
        CHECK(model_tape_logprobs(m, &tape, NULL, res->tape_logp[rc]) == 0, "tape log-probs");
        CHECK(model_backward(m, &tape, NULL, dlogp, res->grads[rc], NULL) == 0, "backward: %s",
              err_msg());
        forward_tape_free(&tape);
    }
    m->backend = NULL;
}

/* 3: model_logits (the batch forward, chained layers) against the cached forward token by token
 * (each layer on its own), on the CPU backend. */
static void check_chain_against_cached(Model *m, const char *fixture) {
    enum { T = 12 };
    int V = m->cfg.vocab_size;
    int32_t tokens[T];
    uint8_t mask[T];
    for (int t = 0; t < T; t++)
        tokens[t] = (int32_t)((t * 11 + 4) % V), mask[t] = 1;
    TokenBatch batch = {.batch = 1, .t_len = T, .tokens = tokens, .attn_mask = mask};
    float *batch_logits = malloc((size_t)T * V * sizeof(float));
    float *step_logits = malloc((size_t)V * sizeof(float));
    CHECK(model_logits(m, &batch, 0, 0, T, batch_logits) == 0, "%s: logits: %s", fixture,
          err_msg());
    KvCache kv;
    CHECK(kv_cache_init(&kv, backend_cpu(), &m->cfg, 1, T) == 0, "kv cache");
    double worst = 0, scale = 0;
    for (int t = 0; t < T; t++) {
        CachedChunk one = {0, tokens + t, 1};
        CHECK(model_forward_cached(m, NULL, &kv, &one, 1, step_logits) == 0, "%s: cached: %s",
              fixture, err_msg());
        for (int v = 0; v < V; v++) {
            double want = step_logits[v], got = batch_logits[(size_t)t * V + v];
            worst = fmax(worst, fabs(got - want));
            scale = fmax(scale, fabs(want));
        }
    }
    kv_cache_free(&kv);
    CHECK(scale > 0 && worst <= 1e-5 * scale + 1e-6,
          "%s: the batch forward's logits are %g from the cached forward's (scale %g)", fixture,
          worst, scale);
    free(batch_logits), free(step_logits);
}

static void check_model(const char *fixture) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", fixture);
    Model m;
    if (model_load(&m, harness_source_path(path)) != 0) {
        CHECK(false, "%s: %s", fixture, err_msg());
        return;
    }
    Backend unfused = *backend_cpu();
    unfused.name = "cpu without the fused norms";
    unfused.add_rmsnorm = NULL, unfused.rmsnorm_backward_add = NULL;
    unfused.swiglu_backward_act = NULL;
    ModelRun fused, plain;
    run_model(&m, backend_cpu(), &fused);
    run_model(&m, &unfused, &plain);
    enum { CELLS = 63 };
    CHECK(same(fused.logp, plain.logp, CELLS * 4), "%s: forward log-probs differ", fixture);
    for (int rc = 0; rc < 2; rc++) {
        CHECK(same(fused.tape_logp[rc], plain.tape_logp[rc], CELLS * 4),
              "%s: tape log-probs differ (recompute %d)", fixture, rc);
        CHECK(same(fused.grads[rc], plain.grads[rc], m.n_params * 4),
              "%s: gradients differ (recompute %d)", fixture, rc);
    }
    /* not vacuous: the gradients reach every layer's norms */
    double norm_grad = 0;
    for (int l = 0; l < m.cfg.n_layers; l++) {
        size_t at = (size_t)(m.layers[l].input_norm - m.params);
        norm_grad += fabsf(fused.grads[0][at]);
    }
    CHECK(norm_grad > 0, "%s: the input norms got no gradient", fixture);
    model_run_free(&fused), model_run_free(&plain);
    check_chain_against_cached(&m, fixture);
    model_free(&m);
}

int main(void) {
    const int shapes[][2] = {{1, 7}, {8, 64}, {13, 576}, {29, 33}, {64, 96}, {3, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_add_rmsnorm(shapes[i][0], shapes[i][1]);
        check_rmsnorm_backward_add(shapes[i][0], shapes[i][1]);
    }
    const size_t lengths[] = {1, 15, 16, 1000, 24577};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        check_swiglu_backward_act(lengths[i]);
    check_model("llama_text");
    check_model("qwen3_qknorm");
    check_model("gemma2_tiny");
    return harness_finish("test_norm_fusion");
}
