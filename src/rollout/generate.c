#include "rollout/generate.h"

#include "common/error.h"
#include "model/forward_cached.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int32_t argmax(const float *z, int n) {
    int32_t best = 0;
    for (int j = 1; j < n; j++)
        if (z[j] > z[best]) best = j;
    return best;
}

static bool is_eos(const GenerateOptions *opt, int32_t id) {
    for (int i = 0; i < opt->n_eos; i++)
        if (opt->eos_ids[i] == id) return true;
    return false;
}

typedef struct {
    int prompt;     /* which prompt the slot holds; -1 when free */
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

int generate_greedy(const Model *m, const int32_t *const *prompts, const int *prompt_lens,
                    int n_prompts, const GenerateOptions *opt, Completion *out) {
    int longest = 0;
    if (check_inputs(m, prompt_lens, n_prompts, opt, &longest) != 0) return -1;
    int n_slots = opt->max_batch > 0 && opt->max_batch < n_prompts ? opt->max_batch : n_prompts;
    KvCache kv;
    if (n_prompts == 0) return 0;
    if (kv_cache_init(&kv, &m->cfg, n_slots, longest + opt->max_new_tokens) != 0) return -1;
    memset(out, 0, (size_t)n_prompts * sizeof *out);
    for (int i = 0; i < n_prompts; i++)
        out[i].ids = xmalloc((size_t)opt->max_new_tokens * sizeof(int32_t));
    Slot *slots = xmalloc((size_t)n_slots * sizeof *slots);
    CachedChunk *chunks = xmalloc((size_t)n_slots * sizeof *chunks);
    int *chunk_slot = xmalloc((size_t)n_slots * sizeof *chunk_slot);
    float *logits = xmalloc((size_t)n_slots * m->cfg.vocab_size * sizeof(float));
    int next_prompt = 0, done = 0, rc = 0;
    for (int s = 0; s < n_slots; s++)
        slots[s] = (Slot){next_prompt++, false};
    while (done < n_prompts && rc == 0) {
        int n_chunks = 0;
        for (int s = 0; s < n_slots; s++) {
            int p = slots[s].prompt;
            if (p < 0) continue;
            if (!slots[s].prefilled)
                chunks[n_chunks] = (CachedChunk){s, prompts[p], prompt_lens[p]};
            else
                chunks[n_chunks] = (CachedChunk){s, &out[p].ids[out[p].len - 1], 1};
            chunk_slot[n_chunks++] = s;
        }
        rc = model_forward_cached(m, &kv, chunks, n_chunks, logits);
        for (int j = 0; rc == 0 && j < n_chunks; j++) {
            Slot *slot = &slots[chunk_slot[j]];
            Completion *c = &out[slot->prompt];
            slot->prefilled = true;
            int32_t tok = argmax(logits + (size_t)j * m->cfg.vocab_size, m->cfg.vocab_size);
            c->ids[c->len++] = tok;
            if (is_eos(opt, tok) || c->len == opt->max_new_tokens) {
                done++;
                kv_cache_reset_slot(&kv, chunk_slot[j]);
                *slot = (Slot){next_prompt < n_prompts ? next_prompt++ : -1, false};
            }
        }
    }
    free(logits);
    free(chunk_slot);
    free(chunks);
    free(slots);
    kv_cache_free(&kv);
    if (rc != 0) completions_free(out, n_prompts);
    return rc;
}

void completions_free(Completion *c, int n) {
    for (int i = 0; i < n; i++)
        free(c[i].ids);
    memset(c, 0, (size_t)n * sizeof *c);
}
