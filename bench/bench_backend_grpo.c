/* A GRPO step on a device backend (issue 29, issue 33's GRPO shape), generation included: the
 * `grpo` mode of bench_backend_step. bench/gpu_torch_step.py --grpo times the same step in PyTorch
 * eager (model.generate, then TRL's GRPOTrainer loss).
 *
 * Generation, as rlhf.c's rollout engine (rollout/generate.c) drives the KV cache on a backend:
 * each prompt prefilled once (model_forward_cached, one chunk a prompt) and its cache rows copied
 * to the other slots of its group (kv_cache_copy_prefix); then one-token chunks for every
 * completion, COMPLETION_LEN tokens a row (1 prefill + COMPLETION_LEN - 1 decoding forwards, as
 * transformers' generate counts them), no stop token. Each forward returns its rows' logits to
 * the host, where the next token is a real temperature-1 draw from the softmax over the whole
 * vocabulary (sampler_next: no top-k/top-p, TRL's defaults; every row its own stream; rows drawn
 * in parallel on the host's cores, as generate.c does): the sampling is part of the cost.
 *
 * Training, as TRL 1.9's GRPOTrainer does it for one generation batch with num_iterations 1:
 * random rewards, group-normalised advantages (methods/grpo_advantages.h, scale_rewards group),
 * the reference's log-probs of the completions (a forward without tape; the reference is the
 * policy's own weights, as in the DPO mode), the policy's forward with tape and its log-probs
 * with entropies (model_tape_logprobs_stats, as the trainer computes them), TRL's loss and
 * dL/dlogp (methods/grpo_loss.h: loss_type dapo, TRL 1.9's default; epsilon 0.2; beta 0.04 so
 * that the reference is read, TRL's default 0 would skip it), backward, clip to norm 1, AdamW.
 * Rows are computed in full (unshared): a group's 8 rows share their prompt, which `rlhf train`
 * would compute once, but PyTorch computes every row, and the FLOP count is that of every row.
 *
 * Prints one JSON line ("bench": "grpo_step"): generation, training and total seconds (mean of
 * STEPS after one warm-up step whose generation stops after a few tokens: it only has to warm
 * the handles up), completion tokens generated a second, trained tokens (prompt + completion)
 * a second, and the training part's TFLOP/s counted as the DPO mode counts them. */
#include "backend_bench.h"
#include "common/error.h"
#include "kernels/cuda/backend_cuda.h"
#include "methods/grpo_advantages.h"
#include "methods/grpo_loss.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "model/kv_cache.h"
#include "rollout/sampler.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one GRPO step works on. tokens (rows x t): each row its group's prompt, then its
 * completion (written by generation). */
typedef struct {
    BenchModel *bm;
    int prompts, per, prompt_len, completion_len, rows, t;
    int32_t *tokens;
    uint8_t *sel; /* the completion's positions */
    float *logp, *ref, *dlogp, *entropy;
    LogitStats *stats;
    KvCache kv;
    float *logits;    /* host: rows x V */
    SamplerRng *rngs; /* one a row */
    float *work;      /* sampler scratch: 2V floats a thread */
    int32_t *order;   /* 4V ints a thread */
} GrpoState;

/* Draws row r's next token from logits (V, overwritten) into tokens at position pos. */
static void draw(GrpoState *st, int r, float *logits, int pos) {
    static const SamplingParams temp1 = {.do_sample = true,
                                         .temperature = 1.0f,
                                         .top_k = 0,
                                         .top_p = 1.0f,
                                         .min_p = 0.0f,
                                         .repetition_penalty = 1.0f};
    int V = st->bm->m.cfg.vocab_size, th = omp_get_thread_num();
    float lp;
    st->tokens[(size_t)r * st->t + pos] =
        sampler_next(logits, V, &temp1, NULL, 0, &st->rngs[r], st->work + (size_t)th * 2 * V,
                     st->order + (size_t)th * 4 * V, &lp);
}

/* Generates n_new (<= completion_len) tokens for every row. Returns 0, or 1 after printing. */
static int generate_rows(GrpoState *st, int n_new) {
    Model *m = &st->bm->m;
    size_t V = (size_t)m->cfg.vocab_size;
    int per = st->per, lp = st->prompt_len;
    for (int r = 0; r < st->rows; r++)
        kv_cache_reset_slot(&st->kv, r);
    /* prefill: the group's first slot, one chunk a prompt */
    CachedChunk *chunks = malloc((size_t)st->rows * sizeof *chunks);
    for (int p = 0; p < st->prompts; p++)
        chunks[p] = (CachedChunk){p * per, st->tokens + (size_t)p * per * st->t, lp};
    if (model_forward_cached(m, NULL, &st->kv, chunks, st->prompts, st->logits) != 0)
        return free(chunks), bench_fail("prefill");
    /* the group's other slots share the prompt's rows; every row draws its first token from the
     * prompt's logits (a copy each: the draw overwrites them) */
    float *first = malloc((size_t)st->rows * V * sizeof *first);
    for (int r = 0; r < st->rows; r++) {
        int p = r / per;
        if (r % per) kv_cache_copy_prefix(&st->kv, p * per, r, lp);
        memcpy(first + r * V, st->logits + p * V, V * sizeof *first);
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < st->rows; r++)
        draw(st, r, first + r * V, lp);
    free(first);
    for (int k = 1; k < n_new; k++) {
        for (int r = 0; r < st->rows; r++)
            chunks[r] = (CachedChunk){r, st->tokens + (size_t)r * st->t + lp + k - 1, 1};
        if (model_forward_cached(m, NULL, &st->kv, chunks, st->rows, st->logits) != 0)
            return free(chunks), bench_fail("decode");
#pragma omp parallel for schedule(dynamic, 1)
        for (int r = 0; r < st->rows; r++)
            draw(st, r, st->logits + r * V, lp + k);
    }
    free(chunks);
    return 0;
}

/* The training part; phase[3] receives the seconds of the reference forward, the policy's
 * forward, loss and backward, and the optimizer. Returns 0, or 1 after printing. */
static int train_step(GrpoState *st, double phase[3], double *loss) {
    Model *m = &st->bm->m;
    const Backend *be = st->bm->be;
    TokenBatch batch = {.batch = st->rows, .t_len = st->t, .tokens = st->tokens, .unshared = true};
    size_t cells = (size_t)st->rows * st->t;
    be->sync(be);
    double t0 = bench_now_seconds();
    if (model_token_logprobs(m, &batch, st->sel, st->ref) != 0) return bench_fail("reference");
    be->sync(be);
    double t1 = bench_now_seconds();
    ForwardTape tape = {0};
    if (model_forward_tape(m, &batch, false, &tape) != 0) return bench_fail("forward");
    if (model_tape_logprobs_stats(m, &tape, st->sel, st->logp, st->stats) != 0)
        return bench_fail("tape logprobs");
    for (size_t i = 0; i < cells; i++)
        st->entropy[i] = st->stats[i].entropy;
    /* random rewards, one a completion: their advantages within each group */
    double *rewards = malloc((size_t)st->rows * sizeof *rewards), weight = 1.0;
    float *adv = malloc((size_t)st->rows * sizeof *adv);
    float *group_std = malloc((size_t)st->prompts * sizeof *group_std);
    for (int r = 0; r < st->rows; r++)
        rewards[r] = bench_next_u32() / 4294967296.0;
    RewardTable table = {.n_rows = st->rows,
                         .n_funcs = 1,
                         .group_size = st->per,
                         .rewards = rewards,
                         .weights = &weight,
                         .scale = REWARD_SCALE_GROUP};
    grpo_advantages(&table, adv, group_std, NULL);
    GrpoLossOptions lopt = {.loss_type = GRPO_LOSS_DAPO,
                            .epsilon = 0.2,
                            .epsilon_high = 0.2,
                            .delta = NAN,
                            .beta = 0.04,
                            .top_entropy_quantile = 1.0,
                            .max_completion_length = st->completion_len};
    GrpoMicroBatch mb = {.rows = st->rows,
                         .width = st->t,
                         .logp = st->logp,
                         .ref_logp = st->ref,
                         .entropy = st->entropy,
                         .advantages = adv,
                         .mask = st->sel,
                         .accumulation_steps = 1,
                         .generation_batch_tokens = (double)st->rows * st->completion_len};
    GrpoLossMetrics metrics;
    *loss = grpo_loss(&lopt, &mb, st->dlogp, &metrics);
    free(rewards), free(adv), free(group_std);
    be->memset(be, st->bm->grads, 0, m->n_params * sizeof(float));
    if (model_backward(m, &tape, st->sel, st->dlogp, st->bm->grads, NULL) != 0)
        return bench_fail("backward");
    forward_tape_free(&tape);
    be->sync(be);
    double t2 = bench_now_seconds();
    double norm = grad_global_norm(be, st->bm->grads, st->bm->spans, m->n_param_tensors);
    grad_clip(be, st->bm->grads, st->bm->spans, m->n_param_tensors, 1.0, norm);
    adamw_step(&st->bm->opt, be, m->params, st->bm->grads, 1e-6);
    be->sync(be);
    double t3 = bench_now_seconds();
    phase[0] = t1 - t0, phase[1] = t2 - t1, phase[2] = t3 - t2;
    if (backend_cuda_status(be) != 0) return bench_fail("step");
    return 0;
}

int bench_grpo_main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: bench_backend_step grpo CONFIG_JSON PROMPTS GENERATIONS PROMPT_LEN "
                        "COMPLETION_LEN STEPS [AUTOCAST]\n");
        return 2;
    }
    GrpoState st = {0};
    st.prompts = atoi(argv[3]), st.per = atoi(argv[4]);
    st.prompt_len = atoi(argv[5]), st.completion_len = atoi(argv[6]);
    int steps = atoi(argv[7]);
    const char *autocast_arg = argc > 8 ? argv[8] : "0";
    if (st.prompts < 1 || st.per < 2 || st.prompt_len < 1 || st.completion_len < 2 || steps < 1) {
        fprintf(stderr, "bench_backend_step grpo: PROMPTS >= 1, GENERATIONS >= 2 (a group's "
                        "advantages need two), PROMPT_LEN >= 1, COMPLETION_LEN >= 2, STEPS >= 1\n");
        return 2;
    }
    if (strcmp(autocast_arg, "0") != 0 && strcmp(autocast_arg, "1") != 0) {
        fprintf(stderr, "bench_backend_step grpo: AUTOCAST must be 0 or 1 (got '%s')\n",
                autocast_arg);
        return 2;
    }
    bool autocast = autocast_arg[0] == '1';
    BenchModel bm;
    int rc = bench_model_open(&bm, argv[2], autocast);
    if (rc != 0) return rc;
    st.bm = &bm;
    Model *m = &bm.m;
    const Backend *be = bm.be;
    size_t V = (size_t)m->cfg.vocab_size;
    st.rows = st.prompts * st.per, st.t = st.prompt_len + st.completion_len;
    size_t cells = (size_t)st.rows * st.t;
    if (kv_cache_init(&st.kv, be, &m->cfg, st.rows, st.t) != 0) return bench_fail("kv cache");
    st.tokens = malloc(cells * sizeof *st.tokens);
    st.sel = malloc(cells);
    st.logp = malloc(cells * sizeof(float)), st.ref = malloc(cells * sizeof(float));
    st.dlogp = malloc(cells * sizeof(float)), st.entropy = malloc(cells * sizeof(float));
    st.stats = malloc(cells * sizeof *st.stats);
    st.logits = malloc((size_t)st.rows * V * sizeof(float));
    st.rngs = malloc((size_t)st.rows * sizeof *st.rngs);
    int threads = omp_get_max_threads();
    st.work = malloc((size_t)threads * 2 * V * sizeof(float));
    st.order = malloc((size_t)threads * 4 * V * sizeof(int32_t));
    for (int r = 0; r < st.rows; r++)
        sampler_rng_seed(&st.rngs[r], 42, (uint64_t)r);
    for (size_t i = 0; i < cells; i++) { /* completions too: the warm-up generates only a few */
        st.tokens[i] = (int32_t)(bench_next_u32() % (uint32_t)V);
        st.sel[i] = (int)(i % (size_t)st.t) >= st.prompt_len;
    }
    for (int r = 0; r < st.rows; r++) /* each group's rows share its prompt */
        memcpy(st.tokens + (size_t)r * st.t, st.tokens + (size_t)(r - r % st.per) * st.t,
               (size_t)st.prompt_len * sizeof *st.tokens);

    double gen = 0, phase[3] = {0, 0, 0}, loss = 0;
    for (int s = 0; s <= steps; s++) { /* step 0 warms up, its generation short */
        be->sync(be);
        double g0 = bench_now_seconds();
        int n_new = s == 0 && st.completion_len > 8 ? 8 : st.completion_len;
        if (generate_rows(&st, n_new) != 0) return 1;
        be->sync(be);
        double g1 = bench_now_seconds();
        if (backend_cuda_status(be) != 0) return bench_fail("generation");
        double p[3];
        if (train_step(&st, p, &loss) != 0) return 1;
        if (s > 0) {
            gen += g1 - g0;
            for (int i = 0; i < 3; i++)
                phase[i] += p[i];
        }
    }
    gen /= steps;
    for (int i = 0; i < 3; i++)
        phase[i] /= steps;
    double train = phase[0] + phase[1] + phase[2];
    double flops = bench_flops_per_token(m, st.t) * (double)cells * 4;
    printf("{\"bench\": \"grpo_step\", \"backend\": \"%s\", \"precision\": \"%s\", "
           "\"config\": \"%s\", \"prompts\": %d, \"generations\": %d, \"prompt_len\": %d, "
           "\"completion_len\": %d, \"params\": %zu, \"generation_s\": %.4f, "
           "\"training_s\": %.4f, \"step_s\": %.4f, \"reference_s\": %.4f, "
           "\"policy_fwd_bwd_s\": %.4f, \"optimizer_s\": %.4f, \"gen_tokens_per_s\": %.1f, "
           "\"train_tokens_per_s\": %.1f, \"tflop_per_train\": %.3f, \"train_tflop_s\": %.2f, "
           "\"loss\": %.6f}\n",
           be->name, autocast ? "bf16_autocast" : "fp32", argv[2], st.prompts, st.per,
           st.prompt_len, st.completion_len, m->n_params, gen, train, gen + train, phase[0],
           phase[1], phase[2], (double)st.rows * st.completion_len / gen, (double)cells / train,
           flops / 1e12, flops / train / 1e12, loss);
    fflush(stdout);

    kv_cache_free(&st.kv);
    free(st.tokens), free(st.sel), free(st.logp), free(st.ref), free(st.dlogp);
    free(st.entropy), free(st.stats), free(st.logits), free(st.rngs), free(st.work);
    free(st.order);
    bench_model_close(&bm);
    return 0;
}
