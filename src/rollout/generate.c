#include "rollout/generate.h"

#include "common/error.h"
#include "model/forward_cached.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool is_eos(const GenerateOptions *opt, int32_t id) {
    for (int i = 0; i < opt->n_eos; i++)
        if (opt->eos_ids[i] == id) return true;
    return false;
}

typedef struct {
    int job;        /* which completion the slot holds; -1 when free */
    bool prefilled; /* its prompt is in the cache */
} Slot;

static int check_inputs(const Model *m, const int *lens, int n, const GenerateOptions *opt,
                        int *longest) {
    if (opt->max_new_tokens < 1) return err_set("max_new_tokens must be at least 1");
    *longest = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1)
            return err_set("prompt %d is empty (a prompt needs at least one token)", i);
        if (lens[i] > *longest) *longest = lens[i];
    }
    int64_t ctx = m->cfg.max_position_embeddings;
    if (m->cfg.rope.type == ROPE_DEFAULT && *longest > ctx)
        return err_set("a prompt of %d tokens is longer than the model's context (%lld)", *longest,
                       (long long)ctx);
    return 0;
}

int generate(const Model *m, const int32_t *const *prompts, const int *prompt_lens, int n_prompts,
             const GenerateOptions *opt, Completion *out) {
    int longest = 0;
    if (check_inputs(m, prompt_lens, n_prompts, opt, &longest) != 0) return -1;
    if (sampling_params_check(&opt->sampling) != 0) return -1;
    int per = opt->n_per_prompt > 0 ? opt->n_per_prompt : 1, n_jobs = n_prompts * per;
    if (n_jobs == 0) return 0;
    int n_slots = opt->max_batch > 0 && opt->max_batch < n_jobs ? opt->max_batch : n_jobs;
    int V = m->cfg.vocab_size, max_len = longest + opt->max_new_tokens;
    KvCache kv;
    if (kv_cache_init(&kv, &m->cfg, n_slots, max_len) != 0) return -1;
    memset(out, 0, (size_t)n_jobs * sizeof *out);
    SamplerRng *rngs = xmalloc((size_t)n_jobs * sizeof *rngs);
    for (int j = 0; j < n_jobs; j++) {
        out[j].ids = xmalloc((size_t)opt->max_new_tokens * sizeof(int32_t));
        out[j].logprobs = xmalloc((size_t)opt->max_new_tokens * sizeof(float));
        sampler_rng_seed(&rngs[j], opt->seed, (uint64_t)j);
    }
    Slot *slots = xmalloc((size_t)n_slots * sizeof *slots);
    CachedChunk *chunks = xmalloc((size_t)n_slots * sizeof *chunks);
    int *chunk_slot = xmalloc((size_t)n_slots * sizeof *chunk_slot);
    float *logits = xmalloc((size_t)n_slots * V * sizeof(float));
    float *work = xmalloc(2 * (size_t)V * sizeof(float));
    int32_t *order = xmalloc((size_t)V * sizeof(int32_t));
    int32_t *history = xmalloc((size_t)max_len * sizeof(int32_t));
    int next_job = 0, done = 0, rc = 0;
    for (int s = 0; s < n_slots; s++)
        slots[s] = (Slot){next_job++, false};
    while (done < n_jobs && rc == 0) {
        int n_chunks = 0;
        for (int s = 0; s < n_slots; s++) {
            int j = slots[s].job;
            if (j < 0) continue;
            int p = j / per;
            if (!slots[s].prefilled)
                chunks[n_chunks] = (CachedChunk){s, prompts[p], prompt_lens[p]};
            else
                chunks[n_chunks] = (CachedChunk){s, &out[j].ids[out[j].len - 1], 1};
            chunk_slot[n_chunks++] = s;
        }
        rc = model_forward_cached(m, &kv, chunks, n_chunks, logits);
        for (int c = 0; rc == 0 && c < n_chunks; c++) {
            Slot *slot = &slots[chunk_slot[c]];
            int j = slot->job, p = j / per;
            Completion *out_j = &out[j];
            slot->prefilled = true;
            memcpy(history, prompts[p], (size_t)prompt_lens[p] * sizeof *history);
            memcpy(history + prompt_lens[p], out_j->ids, (size_t)out_j->len * sizeof *history);
            float lp;
            int32_t tok = sampler_next(logits + (size_t)c * V, V, &opt->sampling, history,
                                       prompt_lens[p] + out_j->len, &rngs[j], work, order, &lp);
            out_j->logprobs[out_j->len] = lp;
            out_j->ids[out_j->len++] = tok;
            if (opt->on_token) opt->on_token(j, out_j->ids, out_j->len, opt->on_token_ctx);
            if (is_eos(opt, tok) || out_j->len == opt->max_new_tokens) {
                done++;
                kv_cache_reset_slot(&kv, chunk_slot[c]);
                *slot = (Slot){next_job < n_jobs ? next_job++ : -1, false};
            }
        }
    }
    free(history);
    free(order);
    free(work);
    free(logits);
    free(chunk_slot);
    free(chunks);
    free(slots);
    free(rngs);
    kv_cache_free(&kv);
    if (rc != 0) completions_free(out, n_jobs);
    return rc;
}

void completions_free(Completion *c, int n) {
    for (int i = 0; i < n; i++) {
        free(c[i].ids);
        free(c[i].logprobs);
    }
    memset(c, 0, (size_t)n * sizeof *c);
}
