/* A DPO training step and batch-1 decoding of a model shape on a device backend (issue 29), timed
 * on the device: built as bench_backend_step_cuda on the CUDA backend and as
 * bench_backend_step_emu on cuda-emu (a tiny shape there, to keep the program itself checked on
 * the CPU). bench/gpu_step.sh runs it beside bench/gpu_torch_step.py, which times the same step in
 * PyTorch eager on the same shapes, in one call on a lent GPU.
 *
 * The step, as `rlhf train` with rl: dpo (full fine-tuning) computes it: the reference's
 * log-probs of the completions (a forward, no tape), the policy's forward with the training tape,
 * the sigmoid DPO loss's dL/dlogp on the host, the backward, the global gradient norm, clipping
 * and an AdamW step. Weights, gradients and AdamW's moments live in the backend's memory. The
 * reference is the policy's own weights (as at step 0: the cost of a separate frozen copy is the
 * same forward). The rows are random tokens with no shared prefix, so the work is exactly what
 * PyTorch does for the same batch (rlhf train would compute a pair's shared prompt once).
 *
 * Weights are random (uniform, small): speed does not depend on the values, and METHOD.md asks
 * for no zeros. Prints one JSON line for the step and one for decoding.
 *
 * Usage: bench_backend_step CONFIG_JSON ROWS SEQ_LEN STEPS [DECODE_TOKENS] [OP_TIMES] [AUTOCAST]
 *   CONFIG_JSON: a Hugging Face config.json (bench/shapes/). ROWS: 2 x pairs; the first half of
 *   each row is its prompt, the rest its completion (scored). STEPS timed after one warm-up.
 *   DECODE_TOKENS (default 0: none): tokens decoded one at a time at batch 1 after a 32-token
 *   prompt, over the KV cache (model_forward_cached), each returning its logits to the host.
 *   OP_TIMES 1: then one more step (and the decoding) op by op (bench/op_timer.h), a JSON line
 *   of each op's total seconds.
 *   AUTOCAST 1: the backend under bf16 autocast (backend_cuda_autocast_new: bf16 operands, fp32
 *   sums, as `bf16: true` trains); the JSON lines then say "precision": "bf16_autocast" (else
 *   "fp32").
 *
 * Or: bench_backend_step grpo CONFIG_JSON PROMPTS GENERATIONS PROMPT_LEN COMPLETION_LEN STEPS
 *   [AUTOCAST]: a GRPO step, generation included (bench_backend_grpo.c). */
#include "backend_bench.h"
#include "common/error.h"
#include "kernels/cuda/backend_cuda.h"
#include "op_timer.h"
#include "model/activations.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "model/kv_cache.h"
#include "train/optimizer.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int bench_fail(const char *what) {
    fprintf(stderr, "bench_backend_step: %s: %s\n", what, err_msg());
    return 1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
uint32_t bench_next_u32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}

/* The backend this binary was built for, under bf16 autocast or not. */
static Backend *open_backend(bool autocast) {
#ifdef RLHF_CUDA_EMU
    return autocast ? backend_cuda_emu_autocast_new() : backend_cuda_emu_new();
#else
    return autocast ? backend_cuda_autocast_new() : backend_cuda_new();
#endif
}

double bench_matmul_params(const Model *m) {
    const ModelConfig *c = &m->cfg;
    double hd = c->head_dim, H = c->hidden_size, I = c->intermediate_size;
    double attn = H * (c->n_heads * hd) * 2 + H * (c->n_kv_heads * hd) * 2;
    return c->n_layers * (attn + 3 * H * I) + (double)c->vocab_size * H;
}

double bench_flops_per_token(const Model *m, int t) {
    const ModelConfig *c = &m->cfg;
    return bench_matmul_params(m) * 2 +
           c->n_layers * 2.0 * 2.0 * (t / 2.0) * c->n_heads * c->head_dim;
}

/* The sigmoid DPO loss's gradient per token (beta 0.1) from the policy's and reference's summed
 * completion log-probs, rows (2i, 2i+1) a (chosen, rejected) pair; returns the mean loss. */
static double dpo_dlogp(const float *logp, const float *ref, const uint8_t *sel, int rows, int t,
                        float *dlogp) {
    double loss = 0, beta = 0.1;
    int pairs = rows / 2;
    for (int p = 0; p < pairs; p++) {
        double s[2] = {0, 0};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < t; j++) {
                size_t at = (size_t)(2 * p + k) * t + j;
                if (sel[at]) s[k] += (double)logp[at] - ref[at];
            }
        double z = beta * (s[0] - s[1]);
        loss += log1p(exp(-z)) / pairs;
        double g = -beta / (1 + exp(z)) / pairs; /* dL/ds_chosen; dL/ds_rejected = -g */
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < t; j++) {
                size_t at = (size_t)(2 * p + k) * t + j;
                dlogp[at] = sel[at] ? (float)(k == 0 ? g : -g) : 0.0f;
            }
    }
    return loss;
}

/* AdamW's moments moved into the backend's memory, zeroed. */
static float *moments_to_device(const Backend *be, AdamW *opt) {
    float *d = be->alloc(be, 2 * opt->n * sizeof(float), "AdamW moments");
    if (!d) return NULL;
    be->memset(be, d, 0, 2 * opt->n * sizeof(float));
    for (int s = 0; s < opt->n_spans; s++) {
        opt->moments[s].m = d + (opt->moments[s].m - opt->m);
        opt->moments[s].v = d + opt->n + (opt->moments[s].v - opt->v);
    }
    return d;
}

int bench_model_open(BenchModel *bm, const char *config_path, bool autocast) {
    memset(bm, 0, sizeof *bm);
    json_error_t jerr;
    json_t *root = json_load_file(config_path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "bench_backend_step: %s:%d: %s\n", config_path, jerr.line, jerr.text);
        return 2;
    }
    ModelConfig cfg;
    int rc = model_config_from_json(&cfg, root, config_path);
    json_decref(root);
    if (rc != 0) return bench_fail("config");
    Backend *be = bm->be = open_backend(autocast);
    if (!be) return bench_fail("backend");
    Model *m = &bm->m;
    model_init_empty(m, &cfg);
    for (size_t i = 0; i < m->n_params; i++) /* uniform in [-0.02, 0.02) */
        m->params[i] = (float)(bench_next_u32() * (0.04 / 4294967296.0) - 0.02);
    float *dev_params = be->alloc(be, m->n_params * sizeof(float), "weights");
    bm->grads = be->alloc(be, m->n_params * sizeof(float), "gradients");
    if (!dev_params || !bm->grads) return bench_fail("alloc");
    be->copy(be, dev_params, m->params, m->n_params * sizeof(float), BACKEND_HOST_TO_DEVICE);
    bm->host_params = model_rebase_params(m, dev_params);
    m->backend = be;

    bm->spans = malloc((size_t)m->n_param_tensors * sizeof *bm->spans);
    for (int i = 0; i < m->n_param_tensors; i++)
        bm->spans[i] = (ParamSpan){m->param_info[i].offset, m->param_info[i].numel,
                                   m->param_info[i].ndim == 2, false};
    AdamWConfig acfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    if (adamw_init(&bm->opt, &acfg, bm->spans, m->n_param_tensors) != 0) return bench_fail("adamw");
    if (adamw_check_backend(&bm->opt, be) != 0) return bench_fail("adamw backend");
    bm->moments = moments_to_device(be, &bm->opt);
    if (!bm->moments) return bench_fail("moments");
    return 0;
}

void bench_model_close(BenchModel *bm) {
    Backend *be = bm->be;
    be->free(be, model_rebase_params(&bm->m, bm->host_params));
    be->free(be, bm->grads);
    be->free(be, bm->moments);
    adamw_free(&bm->opt);
    model_free(&bm->m);
    free(bm->spans);
    backend_cuda_free(be);
}

/* Decoding: prompt then n tokens, greedy-free (the next token is drawn at random: the cost does
 * not depend on which), batch 1. Prints its JSON line unless weight_bytes is 0. */
static int bench_decode(Model *m, const Backend *be, int n, double weight_bytes) {
    int prompt = 32, V = m->cfg.vocab_size;
    KvCache kv;
    if (kv_cache_init(&kv, be, &m->cfg, 1, prompt + n + 1) != 0) return bench_fail("kv cache");
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t tokens[32];
    for (int i = 0; i < prompt; i++)
        tokens[i] = (int32_t)(bench_next_u32() % (uint32_t)V);
    CachedChunk chunk = {.slot = 0, .tokens = tokens, .n_tokens = prompt};
    if (model_forward_cached(m, NULL, &kv, &chunk, 1, logits) != 0) return bench_fail("prefill");
    double t0 = 0;
    int warm = n < 8 ? 1 : 4; /* the first tokens (handles, scratch) are not timed */
    for (int i = 0; i < n; i++) {
        if (i == warm) be->sync(be), t0 = bench_now_seconds();
        int32_t next = (int32_t)(bench_next_u32() % (uint32_t)V);
        chunk = (CachedChunk){.slot = 0, .tokens = &next, .n_tokens = 1};
        if (model_forward_cached(m, NULL, &kv, &chunk, 1, logits) != 0) return bench_fail("decode");
    }
    be->sync(be);
    double per_token = (bench_now_seconds() - t0) / (n - warm);
    if (weight_bytes > 0) /* 0: an op-timing run, whose waits make the figure meaningless */
        printf(
            "{\"bench\": \"decode\", \"backend\": \"%s\", \"tokens\": %d, \"ms_per_token\": %.4f, "
            "\"tokens_per_s\": %.1f, \"weight_gb_per_token\": %.4f, \"achieved_gb_s\": %.1f}\n",
            be->name, n - warm, per_token * 1e3, 1 / per_token, weight_bytes / 1e9,
            weight_bytes / per_token / 1e9);
    free(logits);
    kv_cache_free(&kv);
    return 0;
}

/* What one DPO step works on. */
typedef struct {
    Model *m;
    AdamW *opt;
    const ParamSpan *spans;
    float *grads; /* backend memory */
    const TokenBatch *batch;
    const uint8_t *sel;
    float *logp, *ref, *dlogp; /* host, rows x T */
} StepState;

/* One step; phase[3] receives the seconds of the reference forward, the policy's forward and
 * backward, and the optimizer (the device waited for after each). Returns 0, or 1 after printing
 * the error. */
static int dpo_step(StepState *st, double phase[3], double *loss) {
    Model *m = st->m;
    const Backend *be = model_backend(m);
    be->sync(be);
    double t0 = bench_now_seconds();
    if (model_token_logprobs(m, st->batch, st->sel, st->ref) != 0) return bench_fail("reference");
    be->sync(be);
    double t1 = bench_now_seconds();
    ForwardTape tape = {0};
    if (model_forward_tape(m, st->batch, false, &tape) != 0) return bench_fail("forward");
    if (model_tape_logprobs(m, &tape, st->sel, st->logp) != 0) return bench_fail("tape logprobs");
    *loss = dpo_dlogp(st->logp, st->ref, st->sel, st->batch->batch, st->batch->t_len, st->dlogp);
    be->memset(be, st->grads, 0, m->n_params * sizeof(float));
    if (model_backward(m, &tape, st->sel, st->dlogp, st->grads, NULL) != 0)
        return bench_fail("backward");
    forward_tape_free(&tape);
    be->sync(be);
    double t2 = bench_now_seconds();
    double norm = grad_global_norm(be, st->grads, st->spans, m->n_param_tensors);
    grad_clip(be, st->grads, st->spans, m->n_param_tensors, 1.0, norm);
    adamw_step(st->opt, be, m->params, st->grads, 1e-6);
    be->sync(be);
    double t3 = bench_now_seconds();
    phase[0] = t1 - t0, phase[1] = t2 - t1, phase[2] = t3 - t2;
    if (backend_cuda_status(be) != 0) return bench_fail("step");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "grpo") == 0) return bench_grpo_main(argc, argv);
    if (argc < 5) {
        fprintf(stderr, "usage: bench_backend_step CONFIG_JSON ROWS SEQ_LEN STEPS [DECODE_TOKENS] "
                        "[OP_TIMES] [AUTOCAST]\n"
                        "   or: bench_backend_step grpo CONFIG_JSON PROMPTS GENERATIONS PROMPT_LEN "
                        "COMPLETION_LEN STEPS [AUTOCAST]\n");
        return 2;
    }
    int rows = atoi(argv[2]), t = atoi(argv[3]), steps = atoi(argv[4]);
    int decode = argc > 5 ? atoi(argv[5]) : 0;
    int op_times = argc > 6 ? atoi(argv[6]) : 0;
    const char *autocast_arg = argc > 7 ? argv[7] : "0";
    if (rows < 2 || rows % 2 || t < 4 || steps < 1) {
        fprintf(stderr, "bench_backend_step: ROWS even >= 2, SEQ_LEN >= 4, STEPS >= 1\n");
        return 2;
    }
    if (strcmp(autocast_arg, "0") != 0 && strcmp(autocast_arg, "1") != 0) {
        fprintf(stderr, "bench_backend_step: AUTOCAST must be 0 or 1 (got '%s')\n", autocast_arg);
        return 2;
    }
    bool autocast = autocast_arg[0] == '1';
    const char *precision = autocast ? "bf16_autocast" : "fp32";
    BenchModel bm;
    int rc = bench_model_open(&bm, argv[1], autocast);
    if (rc != 0) return rc;
    Backend *be = bm.be;
    Model m = bm.m; /* the same tensors; copied back before closing */

    size_t cells = (size_t)rows * t;
    int32_t *tokens = malloc(cells * sizeof *tokens);
    uint8_t *sel = malloc(cells);
    float *logp = malloc(cells * sizeof *logp), *ref = malloc(cells * sizeof *ref);
    float *dlogp = malloc(cells * sizeof *dlogp);
    for (size_t i = 0; i < cells; i++) {
        tokens[i] = (int32_t)(bench_next_u32() % (uint32_t)m.cfg.vocab_size);
        sel[i] = (int)(i % (size_t)t) >= t / 2;
    }
    TokenBatch batch = {.batch = rows, .t_len = t, .tokens = tokens, .unshared = true};

    double phase[3] = {0, 0, 0}, loss = 0; /* reference, policy forward+backward, optimizer */
    StepState st = {&m, &bm.opt, bm.spans, bm.grads, &batch, sel, logp, ref, dlogp};
    for (int s = 0; s <= steps; s++) { /* step 0 warms up */
        double p[3];
        if (dpo_step(&st, p, &loss) != 0) return 1;
        if (s > 0)
            for (int i = 0; i < 3; i++)
                phase[i] += p[i];
    }
    for (int i = 0; i < 3; i++)
        phase[i] /= steps;
    double step = phase[0] + phase[1] + phase[2];
    /* the device pool's high-water marks over the model's upload and the steps, as torch's
     * max_memory_allocated / max_memory_reserved (backend_cuda.h invariant 8) */
    BackendCudaMemory mem;
    backend_cuda_memory(be, &mem);
    double per_token = bench_flops_per_token(&m, t);
    double flops = per_token * (double)cells * 4; /* reference forward 1, policy 1 + backward 2 */
    printf("{\"bench\": \"dpo_step\", \"backend\": \"%s\", \"precision\": \"%s\", "
           "\"config\": \"%s\", \"rows\": %d, "
           "\"seq_len\": %d, \"params\": %zu, \"step_s\": %.4f, \"reference_s\": %.4f, "
           "\"policy_fwd_bwd_s\": %.4f, \"optimizer_s\": %.4f, \"tokens_per_s\": %.1f, "
           "\"tflop_per_step\": %.3f, \"tflop_s\": %.2f, \"loss\": %.6f, "
           "\"peak_mem_gb\": %.3f, \"peak_reserved_gb\": %.3f}\n",
           be->name, precision, argv[1], rows, t, m.n_params, step, phase[0], phase[1], phase[2],
           (double)cells / step, flops / 1e12, flops / step / 1e12, loss, mem.peak_in_use / 1e9,
           mem.peak_reserved / 1e9);
    fflush(stdout);

    if (decode > 0 &&
        bench_decode(&m, be, decode,
                     (bench_matmul_params(&m) + m.cfg.hidden_size) * sizeof(float)) != 0)
        return 1;
    if (backend_cuda_status(be) != 0) return bench_fail("decode");

    if (op_times) { /* one more step and a few tokens, op by op (op_timer.h) */
        m.backend = op_timer_wrap(be);
        double p[3];
        op_timer_reset();
        if (dpo_step(&st, p, &loss) != 0) return 1;
        op_timer_print(stdout, "dpo_step");
        if (decode > 0) {
            op_timer_reset();
            if (bench_decode(&m, m.backend, decode, 0) != 0) return 1;
            op_timer_print(stdout, "decode");
        }
        m.backend = be;
    }

    bm.m = m;
    bench_model_close(&bm);
    free(tokens), free(sel), free(logp), free(ref), free(dlogp);
    return 0;
}
