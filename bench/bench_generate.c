/* Generation throughput: B random prompts of P tokens, greedy, N new tokens each (no eos).
 * Prefill and decode are timed step by step inside generate (GenerateStats): the first step
 * prefills every prompt and samples the first new token, the rest decode. The packing of the
 * weights that a call does before its first step (where it repays: packed_model_worth) is
 * reported apart and counted in the prefill rate, as a caller waits for it. Also measures the
 * machine's memory read bandwidth, for the batch-1 decode floor (weight bytes read per token /
 * bandwidth). Usage: bench_generate MODEL_DIR batch prompt_len new_tokens [bf16|autocast] [torch]
 * [group=G]. Prints one JSON line. With bf16 the weights are kept in bf16 (rlhf generate --bf16):
 * half the bytes per token. With autocast the weights stay fp32 and the model computes on the bf16
 * autocast backend, as GRPO's rollout does under `bf16: true` (its products on gemm_bf16's AMX
 * tiles where the CPU has them, each output rounded to bf16). With torch the tokens are sampled as
 * GRPO's rollout samples them under `grpo_rng: torch` (TRL's defaults: temperature 1, no
 * top-k/top-p; torch's exponential draws, 64 x vocabulary a step at batch 64), instead of greedily;
 * the CPU seconds of the timed call (getrusage, all threads) per generated token are reported
 * beside the wall-clock rates, as the load of a shared machine moves the wall clock. With
 * group=G the batch is batch / G prompts of G completions each (n_per_prompt, as GRPO's rollout
 * asks for its groups: 8 prompts x 8 completions in issue 33's step). */
#include "common/clock.h"
#include "common/error.h"
#include "model/packed_model.h"
#include "rollout/generate.h"

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Read bandwidth: summing a 1 GiB array with all threads, best of 3. Sixteen independent
 * accumulators per thread keep the loop bound by memory rather than by the add latency. */
static double read_bandwidth_gbs(void) {
    size_t n = (1u << 30) / sizeof(float);
    float *a = malloc(n * sizeof *a);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++)
        a[i] = (float)(i & 7);
    double best = 1e30, sink = 0;
    for (int r = 0; r < 3; r++) {
        double t = now(), total = 0;
#pragma omp parallel reduction(+ : total)
        {
            float acc[16] = {0};
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += 16)
                for (int k = 0; k < 16; k++)
                    acc[k] += a[i + k];
            for (int k = 0; k < 16; k++)
                total += acc[k];
        }
        t = now() - t;
        sink += total;
        if (t < best) best = t;
    }
    free(a);
    return sink < 0 ? 0 : (double)n * sizeof(float) / best / 1e9;
}

/* One store for the packed weights, as GRPO keeps one for all its steps. */
static PackedModel packed;

/* FNV-1a over every completion's ids and log-probabilities' bits: two builds that generate the
 * same tokens and log-probs print the same digest (an A/B of a change to the sampler or the
 * forward checks its exactness as it times it). */
static uint64_t completions_digest(const Completion *out, int batch) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < out[b].len; t++) {
            uint32_t words[2] = {(uint32_t)out[b].ids[t], 0};
            memcpy(&words[1], &out[b].logprobs[t], sizeof words[1]);
            const unsigned char *p = (const unsigned char *)words;
            for (size_t i = 0; i < sizeof words; i++)
                h = (h ^ p[i]) * 0x100000001b3ull;
        }
    return h;
}

static GenerateStats run(const Model *m, int32_t **prompts, int *lens, int batch, int group,
                         int new_tokens, bool torch_sampling, uint64_t *digest) {
    GenerateStats stats;
    GenerateOptions opt = {.max_new_tokens = new_tokens,
                           .n_per_prompt = group,
                           .sampling = sampling_defaults(),
                           .packed = &packed,
                           .stats = &stats};
    TorchGenerator g;
    if (torch_sampling) {
        opt.sampling.do_sample = true, opt.sampling.top_k = 0; /* TRL's GRPO defaults */
        torch_generator_seed(&g, 42);
        opt.torch_rng = &g;
    }
    Completion *out = calloc((size_t)batch, sizeof *out);
    if (generate(m, (const int32_t *const *)prompts, lens, batch / group, &opt, out) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    *digest = completions_digest(out, batch);
    completions_free(out, batch);
    free(out);
    return stats;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr,
                "usage: %s MODEL_DIR batch prompt_len new_tokens [bf16|autocast] [torch] "
                "[group=G]\n",
                argv[0]);
        return 2;
    }
    int batch = atoi(argv[2]), plen = atoi(argv[3]), new_tokens = atoi(argv[4]);
    Model m;
    bool bf16 = false, autocast = false, torch_sampling = false;
    int group = 1;
    for (int a = 5; a < argc; a++) {
        if (strcmp(argv[a], "bf16") == 0)
            bf16 = true;
        else if (strcmp(argv[a], "autocast") == 0)
            autocast = true;
        else if (strcmp(argv[a], "torch") == 0)
            torch_sampling = true;
        else if (strncmp(argv[a], "group=", 6) == 0 && (group = atoi(argv[a] + 6)) > 0 &&
                 batch % group == 0)
            continue;
        else {
            fprintf(stderr,
                    "%s: unknown option '%s' (expected bf16, autocast, torch or group=G, G "
                    "dividing the batch)\n",
                    argv[0], argv[a]);
            return 2;
        }
    }
    if (model_load(&m, argv[1]) != 0 || (bf16 && model_store_bf16(&m) != 0)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    if (autocast) m.backend = backend_cpu_autocast(); /* as rlhf train's session under bf16 */
    int32_t **prompts = malloc((size_t)batch * sizeof *prompts);
    int *lens = malloc((size_t)batch * sizeof *lens);
    unsigned seed = 7;
    for (int b = 0; b < batch / group; b++) {
        prompts[b] = malloc((size_t)plen * sizeof **prompts);
        lens[b] = plen;
        for (int t = 0; t < plen; t++) {
            seed = seed * 1103515245u + 12345u;
            prompts[b][t] = (int32_t)((seed >> 8) % (unsigned)m.cfg.vocab_size);
        }
    }
    /* warm-up: the timed run finds memory and caches as a long run would */
    uint64_t digest;
    run(&m, prompts, lens, batch, group, new_tokens, torch_sampling, &digest);
    /* The bandwidth here varies by a third from one minute to the next (other tenants): it is
     * read just before and just after the timed run, and the higher reading sets the floor. */
    double bw = batch == 1 ? read_bandwidth_gbs() : 0;
    double cpu0 = cpu_seconds();
    GenerateStats st = run(&m, prompts, lens, batch, group, new_tokens, torch_sampling, &digest);
    double cpu = cpu_seconds() - cpu0;
    double bw_after = batch == 1 ? read_bandwidth_gbs() : 0;
    if (bw_after > bw) bw = bw_after;
    double weight_bytes = (double)m.n_params * (bf16 ? 2 : 4);
    printf("{\"impl\": \"rlhf.c\", \"weights\": \"%s\", \"sampling\": \"%s\", \"batch\": %d, "
           "\"group\": %d, \"prompt_len\": %d, \"new_tokens\": %d, \"cpu_ms_per_new_token\": %.3f, "
           "\"threads\": %d, \"prefill_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.2f, "
           "\"pack_seconds\": %.3f, \"digest\": \"%016llx\", "
           "\"read_bandwidth_gb_s\": %.1f, \"decode_floor_tokens_per_s\": %.2f}\n",
           bf16       ? "bf16"
           : autocast ? "fp32, bf16 autocast"
                      : "fp32",
           torch_sampling ? "torch" : "greedy", batch, group, plen, new_tokens,
           1e3 * cpu / ((double)batch * new_tokens), omp_get_max_threads(),
           st.prefill_tokens / (st.pack_seconds + st.prefill_seconds),
           st.decode_tokens / st.decode_seconds, st.pack_seconds, (unsigned long long)digest, bw,
           bw > 0 ? bw * 1e9 / weight_bytes : 0);
    return 0;
}
