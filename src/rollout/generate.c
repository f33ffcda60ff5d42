#include "rollout/generate.h"

#include "common/error.h"
#include "common/torch_exponential.h"
#include "model/forward_cached.h"
#include "model/packed_model.h"
#include "rollout/top_logprobs.h"

#include <omp.h>
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

/* State shared by the steps of one generate() call. */
typedef struct {
    const Model *m;
    const GenerateOptions *opt;
    const int32_t *const *prompts;
    const int *prompt_lens;
    int per, n_jobs, V, max_len;
    KvCache kv;
    Slot *slots;
    int n_slots, next_job, done;
    /* [n_slots]: for a slot left empty by a finished job, the length its sequence would have
     * now had it kept decoding, as the row of transformers' generate that stops on eos keeps
     * taking pad tokens at the next positions: max(position_ids) + 1, the seq_len of dynamic NTK
     * and longrope RoPE, still counts it (issue 34 item 8). */
    int *stopped_len;
    int last_seq_len; /* the RoPE seq_len of the previous forward; 0 before the first */
    int32_t *refeed;  /* [n_slots][max_len]: sequences fed whole again (refeed_chunk) */
    Completion *out;
    SamplerRng *rngs;
    /* opt->torch_rng sampling: each row samples from its torch draws, made as it samples
     * (draw_step_torch) */
    bool torch_sampling;
    int *chunk_of_job;    /* [n_jobs] with torch_sampling: the step's chunk of each job, -1: none */
    int *active_jobs;     /* [n_jobs] with torch_sampling: the jobs that sample this step */
    float *prompt_logits; /* [n_prompts][V]: logits after each prompt, kept to share its prefill */
    bool *have_prompt_logits;
    float *scratch;
    int n_threads; /* each has its own sampler scratch: work, order and history */
    float *work;
    int32_t *order, *history;
    float *raw; /* [n_threads][V]: a row's logits before the sampler (opt->raw_logprobs) */
} Run;

typedef struct {
    int32_t id;
    float logprob;
} Draw;

/* Samples the next token of slot s's job from logits z (modified) with thread t's scratch, from
 * the next V draws of torch's generator g (at its row) when not NULL, else from the job's own
 * stream. Reads only that job's state (and g), so the slots of a step can draw at once. */
static Draw draw_token(const Run *r, int s, float *z, int t, TorchGenerator *g) {
    int j = r->slots[s].job, p = j / r->per;
    const Completion *c = &r->out[j];
    int32_t *history = r->history + (size_t)t * r->max_len;
    memcpy(history, r->prompts[p], (size_t)r->prompt_lens[p] * sizeof *history);
    memcpy(history + r->prompt_lens[p], c->ids, (size_t)c->len * sizeof *history);
    Draw d;
    float *work = r->work + (size_t)t * 2 * r->V;
    int32_t *order = r->order + (size_t)t * 4 * r->V;
    float *raw = r->raw ? r->raw + (size_t)t * r->V : NULL;
    if (raw) memcpy(raw, z, (size_t)r->V * sizeof *raw); /* the sampler processes z in place */
    if (g)
        d.id =
            sampler_next_exponential_drawn(z, r->V, &r->opt->sampling, history,
                                           r->prompt_lens[p] + c->len, g, work, order, &d.logprob);
    else
        d.id = sampler_next(z, r->V, &r->opt->sampling, history, r->prompt_lens[p] + c->len,
                            &r->rngs[j], work, order, &d.logprob);
    /* z now holds the processed logits the token was drawn from */
    const float *dist = raw ? raw : z;
    double norm = 0;
    if (raw || c->n_top > 0) norm = logprobs_log_normalizer(dist, r->V);
    if (raw) d.logprob = (float)((double)raw[d.id] - norm);
    if (c->n_top > 0)
        logprobs_top(dist, r->V, norm, c->n_top, c->top_ids + (size_t)c->len * c->n_top,
                     c->top_logprobs + (size_t)c->len * c->n_top);
    return d;
}

/* Appends token d to slot s's job, and frees and refills the slot when the job finishes. */
static void record_token(Run *r, int s, Draw d) {
    Slot *slot = &r->slots[s];
    int j = slot->job;
    Completion *c = &r->out[j];
    slot->prefilled = true;
    c->logprobs[c->len] = d.logprob;
    c->ids[c->len++] = d.id;
    if (r->opt->on_token) r->opt->on_token(j, c->ids, c->len, r->opt->on_token_ctx);
    bool stop = r->opt->stop_after && r->opt->stop_after(j, c->ids, c->len, r->opt->stop_ctx);
    if (stop || is_eos(r->opt, d.id) || c->len == r->opt->max_new_tokens) {
        r->done++;
        r->stopped_len[s] = r->kv.len[s];
        kv_cache_reset_slot(&r->kv, s);
        *slot = (Slot){r->next_job < r->n_jobs ? r->next_job++ : -1, false};
    }
}

/* Before a step's forward: every empty slot's stopped sequence advances one position with the
 * others, and the longest of them floors the RoPE seq_len of the step (kv_cache.h invariant 4).
 * A slot that took another job counts only its own sequence. */
static void count_stopped_rows(Run *r) {
    int floor = 0;
    for (int s = 0; s < r->n_slots; s++) {
        if (r->slots[s].job >= 0) continue;
        r->stopped_len[s]++;
        if (r->stopped_len[s] > floor) floor = r->stopped_len[s];
    }
    r->kv.rope_len_floor = floor;
}

/* The RoPE seq_len of the coming step, transformers' max(position_ids) + 1 over the whole batch:
 * the sequences that stopped (rope_len_floor, set by count_stopped_rows just before) and each
 * active one's length once this step has fed it. */
static int step_seq_len(const Run *r) {
    int len = r->kv.rope_len_floor;
    for (int s = 0; s < r->n_slots; s++) {
        int j = r->slots[s].job;
        if (j < 0) continue;
        int n = r->slots[s].prefilled ? r->kv.len[s] + 1 : r->prompt_lens[j / r->per];
        if (n > len) len = n;
    }
    return len;
}

/* Phi3ForCausalLM.prepare_inputs_for_generation: at the step where the batch first reaches past
 * original_max_position_embeddings, generate drops the cache and feeds every sequence whole, so
 * its earlier keys too are rotated with longrope's long factors from then on. Whether this step
 * is that one; records its seq_len either way. */
static bool recompute_at_long_switch(Run *r) {
    const ModelConfig *c = &r->m->cfg;
    int len = step_seq_len(r);
    double orig = c->rope.original_max_position;
    bool now = c->arch == ARCH_PHI3 && c->rope.type == ROPE_LONGROPE && r->last_seq_len > 0 &&
               r->last_seq_len <= orig && len > orig;
    r->last_seq_len = len;
    return now;
}

/* Slot s's job fed again from its first token (prompt and completion so far) into an emptied
 * slot: the last row's logits are those the single next token would have given. */
static CachedChunk refeed_chunk(Run *r, int s) {
    int j = r->slots[s].job, p = j / r->per;
    const Completion *c = &r->out[j];
    int32_t *ids = r->refeed + (size_t)s * r->max_len;
    memcpy(ids, r->prompts[p], (size_t)r->prompt_lens[p] * sizeof *ids);
    memcpy(ids + r->prompt_lens[p], c->ids, (size_t)c->len * sizeof *ids);
    kv_cache_reset_slot(&r->kv, s);
    return (CachedChunk){s, ids, r->prompt_lens[p] + c->len};
}

/* A slot whose job's prompt another active slot already holds gets that slot's prompt rows and
 * the prompt's logits instead of a prefill of its own. Repeats while it finds such slots (a
 * shared job can finish at once and be replaced). */
static void share_prefills(Run *r) {
    for (bool again = true; again;) {
        again = false;
        for (int s = 0; s < r->n_slots; s++) {
            int j = r->slots[s].job;
            if (j < 0 || r->slots[s].prefilled) continue;
            int p = j / r->per;
            if (!r->have_prompt_logits[p]) continue;
            for (int d = 0; d < r->n_slots; d++) {
                int dj = r->slots[d].job;
                if (d == s || dj < 0 || dj / r->per != p || !r->slots[d].prefilled) continue;
                kv_cache_copy_prefix(&r->kv, d, s, r->prompt_lens[p]);
                memcpy(r->scratch, r->prompt_logits + (size_t)p * r->V,
                       (size_t)r->V * sizeof(float));
                record_token(r, s, draw_token(r, s, r->scratch, 0, NULL));
                again = true;
                break;
            }
        }
    }
}

/* Under torch's draws every completion samples its first token in the step that prefills it
 * (the step's draws are one block for the whole batch), so its siblings cannot take a prompt's
 * prefill a step later as share_prefills gives it. Instead, within the step, the first slot of
 * each prompt is prefilled and the others copy its cache rows and logits (spread_prefills):
 * issue 33's rollout, 8 prompts x 8 completions, prefills 512 rows instead of 4096. Done only
 * where a row's results do not depend on the other rows of its forward, so the tokens and
 * log-probs are those of prefilling every slot: every product of both forwards on the packed
 * path (packed_matmul.c, packed_matmul_bf16.c and gemm_bf16's AMX tiles sum each element in one
 * order whatever the rows; the unpacked products may be BLAS's, which need not), no adapter (its
 * products are BLAS's), norms, RoPE and attention row by row. Compacts the step's chunks to the
 * ones to run (chunk_slot keeps every slot that samples), fwd_of[c] the forward chunk whose
 * logits chunk c takes; returns how many there are. */
static int share_prefills_in_step(const Run *r, const PackedModel *packed, CachedChunk *chunks,
                                  const int *chunk_slot, int n_chunks, int *fwd_of) {
    int n_fwd = 0, rows_all = 0, rows_fwd = 0;
    for (int c = 0; c < n_chunks; c++) {
        const Slot *s = &r->slots[chunk_slot[c]];
        int shared = -1;
        for (int d = 0; !s->prefilled && shared < 0 && d < c; d++) { /* its prompt's, earlier */
            const Slot *o = &r->slots[chunk_slot[d]];
            if (!o->prefilled && o->job / r->per == s->job / r->per) shared = fwd_of[d];
        }
        rows_all += chunks[c].n_tokens;
        if (shared < 0) shared = n_fwd++, rows_fwd += chunks[c].n_tokens;
        fwd_of[c] = shared;
    }
    bool exact = packed && !r->m->lora && packed_matmul_suits(rows_fwd) &&
                 packed_matmul_suits(rows_all) && packed_matmul_suits(n_fwd) &&
                 packed_matmul_suits(n_chunks);
    if (!exact || n_fwd == n_chunks) {
        for (int c = 0; c < n_chunks; c++)
            fwd_of[c] = c;
        return n_chunks;
    }
    for (int c = 0, k = 0; c < n_chunks; c++) /* in order: fwd_of[c] <= c */
        if (fwd_of[c] == k) chunks[k++] = chunks[c];
    return n_fwd;
}

/* After the forward of share_prefills_in_step's chunks: each sharing slot's cache rows copied
 * from its prompt's prefilled slot, and the step's logits laid out a row per chunk of
 * chunk_slot (backwards: a chunk's forward row is at or before its own and not yet moved). */
static void spread_prefills(Run *r, const CachedChunk *chunks, const int *chunk_slot, int n_chunks,
                            const int *fwd_of, float *logits) {
    for (int c = n_chunks - 1; c >= 0; c--) {
        int f = fwd_of[c];
        if (f == c) continue;
        memcpy(logits + (size_t)c * r->V, logits + (size_t)f * r->V, (size_t)r->V * sizeof *logits);
        if (chunks[f].slot != chunk_slot[c])
            kv_cache_copy_prefix(&r->kv, chunks[f].slot, chunk_slot[c], chunks[f].n_tokens);
    }
}

/* transformers' sampling step under torch's generator: n_jobs x V exponential_() draws, row j
 * (job j) its j-th V of them, finished jobs included, and each job of this step's chunks samples
 * its token from its row. Invariants:
 *   1. the jobs that sample this step, in job order, are split into one contiguous run per
 *      thread, as evenly as they go (finished jobs cost nothing, wherever they sit);
 *   2. a thread's copy of the generator is at row `at` (past at x V draws of the step): it skips
 *      the rows before each job of its run (finished jobs' rows, or other threads'), not drawing
 *      them (nothing reads them), and draws that job's row; so it makes the stream's draws in the
 *      stream's order;
 *   3. a row's draws are made by its job's sampling (sampler_next_exponential_drawn), a block
 *      of words at a time, as floats only where they could win: never stored for the whole
 *      batch (39 MB at 64 x 151936), nor a log1p each (a tenth of a decode step's time);
 *   4. the last thread's copy then skips to row n_jobs and becomes the generator: where the
 *      serial torch_exponential_f32 of the whole step leaves it.
 * The tokens are those of drawing the whole step first and sampling after (the draws do not
 * depend on the logits), at any thread count. */
static void draw_step_torch(Run *r, const int *chunk_slot, int n_chunks, float *logits,
                            Draw *draws) {
    int n_active = 0;
    for (int j = 0; j < r->n_jobs; j++)
        r->chunk_of_job[j] = -1;
    for (int c = 0; c < n_chunks; c++)
        r->chunk_of_job[r->slots[chunk_slot[c]].job] = c;
    for (int j = 0; j < r->n_jobs; j++) /* the sampling jobs, in job order */
        if (r->chunk_of_job[j] >= 0) r->active_jobs[n_active++] = j;
    TorchGenerator *g = r->opt->torch_rng;
    uint64_t V = (uint64_t)r->V;
#pragma omp parallel num_threads(r->n_threads) if (r->n_threads > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int lo = (int)((int64_t)n_active * t / nt), hi = (int)((int64_t)n_active * (t + 1) / nt);
        TorchGenerator own = *g;
        int at = 0;
        for (int k = lo; k < hi; k++) {
            int j = r->active_jobs[k], c = r->chunk_of_job[j];
            if (j > at) torch_exponential_skip(&own, (uint64_t)(j - at) * V);
            at = j + 1; /* draw_token makes row j's draws from own */
            draws[c] = draw_token(r, chunk_slot[c], logits + (size_t)c * V, t, &own);
        }
#pragma omp barrier
        if (t == nt - 1) {
            if (r->n_jobs > at) torch_exponential_skip(&own, (uint64_t)(r->n_jobs - at) * V);
            *g = own;
        }
    }
}

int generate(const Model *m, const int32_t *const *prompts, const int *prompt_lens, int n_prompts,
             const GenerateOptions *opt, Completion *out) {
    int longest = 0;
    if (check_inputs(m, prompt_lens, n_prompts, opt, &longest) != 0) return -1;
    if (sampling_params_check(&opt->sampling) != 0) return -1;
    Run r = {.m = m, .opt = opt, .prompts = prompts, .prompt_lens = prompt_lens, .out = out};
    r.per = opt->n_per_prompt > 0 ? opt->n_per_prompt : 1;
    r.n_jobs = n_prompts * r.per;
    if (r.n_jobs == 0) return 0;
    /* torch's draws: one batch in lockstep, so loop iteration k is transformers' step k */
    bool torch_draws = opt->torch_rng != NULL;
    r.n_slots =
        !torch_draws && opt->max_batch > 0 && opt->max_batch < r.n_jobs ? opt->max_batch : r.n_jobs;
    r.V = m->cfg.vocab_size;
    r.max_len = longest + opt->max_new_tokens;
    if (kv_cache_init(&r.kv, model_backend(m), &m->cfg, r.n_slots, r.max_len) != 0) return -1;
    memset(out, 0, (size_t)r.n_jobs * sizeof *out);
    if (opt->stats) *opt->stats = (GenerateStats){0};
    r.rngs = xmalloc((size_t)r.n_jobs * sizeof *r.rngs);
    for (int j = 0; j < r.n_jobs; j++) {
        out[j].ids = xmalloc((size_t)opt->max_new_tokens * sizeof(int32_t));
        out[j].logprobs = xmalloc((size_t)opt->max_new_tokens * sizeof(float));
        out[j].n_top = opt->top_logprobs < r.V ? opt->top_logprobs : r.V;
        if (out[j].n_top > 0) {
            size_t n = (size_t)opt->max_new_tokens * out[j].n_top;
            out[j].top_ids = xmalloc(n * sizeof *out[j].top_ids);
            out[j].top_logprobs = xmalloc(n * sizeof *out[j].top_logprobs);
        }
        sampler_rng_seed(&r.rngs[j], opt->seed, opt->first_stream + (uint64_t)j);
    }
    r.slots = xmalloc((size_t)r.n_slots * sizeof *r.slots);
    r.stopped_len = xcalloc((size_t)r.n_slots, sizeof *r.stopped_len);
    r.refeed = xmalloc((size_t)r.n_slots * r.max_len * sizeof *r.refeed);
    CachedChunk *chunks = xmalloc((size_t)r.n_slots * sizeof *chunks);
    int *chunk_slot = xmalloc((size_t)r.n_slots * sizeof *chunk_slot);
    int *fwd_of = xmalloc((size_t)r.n_slots * sizeof *fwd_of); /* share_prefills_in_step */
    float *logits = xmalloc((size_t)r.n_slots * r.V * sizeof(float));
    bool share = r.per > 1 && !torch_draws;
    r.prompt_logits = share ? xmalloc((size_t)n_prompts * r.V * sizeof(float)) : NULL;
    r.have_prompt_logits = xcalloc((size_t)n_prompts, sizeof *r.have_prompt_logits);
    bool *prefilling = xcalloc((size_t)n_prompts, sizeof *prefilling);
    r.scratch = xmalloc((size_t)r.V * sizeof(float));
    r.n_threads = omp_get_max_threads() < r.n_slots ? omp_get_max_threads() : r.n_slots;
    r.work = xmalloc((size_t)r.n_threads * 2 * r.V * sizeof(float));
    r.order = xmalloc((size_t)r.n_threads * 4 * r.V * sizeof(int32_t));
    r.history = xmalloc((size_t)r.n_threads * r.max_len * sizeof(int32_t));
    r.raw = opt->raw_logprobs ? xmalloc((size_t)r.n_threads * r.V * sizeof(float)) : NULL;
    if (torch_draws && opt->sampling.do_sample) { /* greedy draws nothing, as transformers */
        r.torch_sampling = true;
        r.chunk_of_job = xmalloc((size_t)r.n_jobs * sizeof *r.chunk_of_job);
        r.active_jobs = xmalloc((size_t)r.n_jobs * sizeof *r.active_jobs);
    }
    Draw *draws = xmalloc((size_t)r.n_slots * sizeof *draws);
    for (int s = 0; s < r.n_slots; s++)
        r.slots[s] = (Slot){r.next_job++, false};
    /* Several sequences decoding together: lay the weights out once for all the steps (the
     * copy is an optimisation only, so running out of memory for it just means going without). */
    PackedModel own = {0}, *packed = NULL;
    long prefill_rows = 0; /* each prompt is prefilled once, even when shared */
    for (int p = 0; p < n_prompts; p++)
        prefill_rows += prompt_lens[p];
    double pack_start = omp_get_wtime();
    /* the packed copy is the CPU kernels' layout, read from host arrays: a model whose weights
     * live in a device's memory (rlhf train's device key) decodes from them directly */
    bool host_weights = model_backend(m)->host_memory;
    if (host_weights && packed_model_worth(m, r.n_slots, opt->max_new_tokens, prefill_rows)) {
        if (packed_model_fits(m, opt->packed)) {
            packed = opt->packed ? opt->packed : &own;
            if (packed_model_build(packed, m) != 0) packed = NULL, err_clear();
        } else if (opt->packed) {
            packed_model_free(opt->packed); /* memory grew short: give the kept copy back */
        }
    }
    if (opt->stats) opt->stats->pack_seconds = omp_get_wtime() - pack_start;
    int rc = 0;
    while (r.done < r.n_jobs && rc == 0) {
        double step_start = omp_get_wtime();
        bool prefill_step = false;
        if (share) share_prefills(&r);
        count_stopped_rows(&r);
        bool refeed = recompute_at_long_switch(&r);
        int n_chunks = 0;
        if (share) memset(prefilling, 0, (size_t)n_prompts * sizeof *prefilling);
        for (int s = 0; s < r.n_slots; s++) {
            int j = r.slots[s].job;
            if (j < 0) continue;
            int p = j / r.per;
            /* one prefill per prompt: the other completions of it share it next step */
            if (share && !r.slots[s].prefilled) {
                if (prefilling[p]) continue;
                prefilling[p] = true;
            }
            if (!r.slots[s].prefilled)
                chunks[n_chunks] = (CachedChunk){s, prompts[p], prompt_lens[p]};
            else if (refeed)
                chunks[n_chunks] = refeed_chunk(&r, s);
            else
                chunks[n_chunks] = (CachedChunk){s, &out[j].ids[out[j].len - 1], 1};
            chunk_slot[n_chunks++] = s;
        }
        if (n_chunks == 0) break;
        int n_fwd = n_chunks;
        if (torch_draws && r.per > 1)
            n_fwd = share_prefills_in_step(&r, packed, chunks, chunk_slot, n_chunks, fwd_of);
        if (opt->stats)
            for (int c = 0; c < n_fwd; c++) {
                if (r.slots[chunks[c].slot].prefilled) {
                    opt->stats->decode_tokens += chunks[c].n_tokens;
                } else {
                    opt->stats->prefill_tokens += chunks[c].n_tokens;
                    prefill_step = true;
                }
            }
        rc = model_forward_cached(m, packed, &r.kv, chunks, n_fwd, logits);
        if (rc != 0) break;
        if (n_fwd < n_chunks) spread_prefills(&r, chunks, chunk_slot, n_chunks, fwd_of, logits);
        for (int c = 0; share && c < n_chunks; c++) {
            int s = chunk_slot[c], p = r.slots[s].job / r.per;
            if (!r.slots[s].prefilled) { /* before sampling modifies the logits */
                memcpy(r.prompt_logits + (size_t)p * r.V, logits + (size_t)c * r.V,
                       (size_t)r.V * sizeof(float));
                r.have_prompt_logits[p] = true;
            }
        }
        /* transformers' step: q for every row of the batch, finished ones too (torch_draws:
         * every unfinished job is in this step, so the step is one of generate()'s) */
        if (r.torch_sampling) {
            draw_step_torch(&r, chunk_slot, n_chunks, logits, draws);
        } else {
            /* every job draws from its own random stream: the same tokens at any thread count
             * (a vocabulary-wide sort for top-p takes ~5 ms per row, so 64 rows are worth two
             * cores) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(r.n_threads) if (n_chunks > 1)
            for (int c = 0; c < n_chunks; c++)
                draws[c] = draw_token(&r, chunk_slot[c], logits + (size_t)c * r.V,
                                      omp_get_thread_num(), NULL);
        }
        for (int c = 0; c < n_chunks; c++)
            record_token(&r, chunk_slot[c], draws[c]);
        if (opt->stats)
            *(prefill_step ? &opt->stats->prefill_seconds : &opt->stats->decode_seconds) +=
                omp_get_wtime() - step_start;
    }
    free(draws);
    free(r.raw);
    packed_model_free(&own);
    free(r.history);
    free(r.order);
    free(r.scratch);
    free(r.work);
    free(prefilling);
    free(r.have_prompt_logits);
    free(r.prompt_logits);
    free(logits);
    free(chunk_slot);
    free(fwd_of);
    free(chunks);
    free(r.slots);
    free(r.stopped_len);
    free(r.refeed);
    free(r.rngs);
    free(r.chunk_of_job);
    free(r.active_jobs);
    kv_cache_free(&r.kv);
    if (rc != 0) completions_free(out, r.n_jobs);
    return rc;
}

void completions_free(Completion *c, int n) {
    for (int i = 0; i < n; i++) {
        free(c[i].ids);
        free(c[i].logprobs);
        free(c[i].top_ids);
        free(c[i].top_logprobs);
    }
    memset(c, 0, (size_t)n * sizeof *c);
}
