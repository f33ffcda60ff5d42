/* The engine of `rlhf serve`: one thread takes the queued requests in arrival order and runs
 * them through generate(), a request's prompts and its n completions per prompt batched together
 * in one call (continuous batching). Greedy requests waiting together with the same max_tokens,
 * n and repetition penalty share one call too (their tokens do not depend on it); sampled ones
 * run alone, since a call has one seed and one set of sampling settings, and each request's
 * `seed` must give `rlhf generate`'s tokens. generate() uses every core already, so calls are
 * not run side by side. */
#include "cli/serve.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ServeEngine {
    const ServeContext *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t queued;
    ServeJob *head, *tail;
    bool stopping, exited; /* exited: the thread has left engine_main (set once) */
};

static void append_event(ServeJob *job, char *ev) {
    size_t n = strlen(ev);
    pthread_mutex_lock(&job->lock);
    if (job->events_len + n > job->events_cap) {
        job->events_cap = (job->events_len + n) * 2;
        job->events = xrealloc(job->events, job->events_cap);
    }
    memcpy(job->events + job->events_len, ev, n);
    job->events_len += n;
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
    free(ev);
}

static void mark_done(ServeJob *job) {
    pthread_mutex_lock(&job->lock);
    job->parsed = job->done = true;
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
}

/* The jobs of one generate() call: job b's sequences are first[b] .. first[b + 1] - 1, being
 * written in out[]. */
typedef struct {
    const ServeContext *ctx;
    ServeJob **jobs;
    int *first;
    int count;
    const Completion *out;
} Batch;

/* The logprobs of choice j's tokens not yet sent, up to token `to` (NULL when the request asked
 * for none or none are left): they go with the next chunk of the choice. */
static json_t *unsent_logprobs(const ServeContext *ctx, ServeJob *job, int j, const Completion *c,
                               int to) {
    if (!job->req.logprobs || job->lp_sent[j] >= to) return NULL;
    json_t *lp = serve_logprobs_json(ctx, &job->req, c, job->lp_sent[j], to, &job->lp_offset[j]);
    job->lp_sent[j] = to;
    return lp;
}

/* After each token of choice j (completion c) of a streamed job: the text it gained that can no
 * longer turn into a stop string goes out as one chunk, with the logprobs of the tokens since the
 * last chunk; a stop string ends the choice there. */
static void stream_token(const ServeContext *ctx, ServeJob *job, int j, const Completion *c) {
    if (job->finished[j]) return;
    char *text;
    size_t n;
    if (tokenizer_decode(ctx->tok, c->ids, (size_t)c->len, true, &text, &n) != 0) return;
    bool hit;
    size_t safe = serve_stream_safe_len(&job->req, text, n, &hit);
    if (safe > job->sent[j]) {
        append_event(job,
                     serve_chunk_event(ctx, &job->req, j, text + job->sent[j], safe - job->sent[j],
                                       unsent_logprobs(ctx, job, j, c, c->len), NULL, false));
        job->sent[j] = safe;
    }
    job->tokens[j] = c->len;
    if (hit) {
        job->finished[j] = true;
        append_event(job,
                     serve_chunk_event(ctx, &job->req, j, NULL, 0,
                                       unsent_logprobs(ctx, job, j, c, c->len), "stop", false));
    }
    free(text);
}

/* generate()'s on_token: ids is out[seq].ids, whose logprobs are written up to len too. */
static void on_token(int seq, const int32_t *ids, int len, void *arg) {
    (void)ids;
    (void)len;
    Batch *b = arg;
    int k = 0;
    while (k + 1 < b->count && seq >= b->first[k + 1])
        k++;
    if (b->jobs[k]->req.stream) stream_token(b->ctx, b->jobs[k], seq - b->first[k], &b->out[seq]);
}

static void stream_error(const ServeContext *ctx, ServeJob *job) {
    (void)ctx;
    char *body = serve_error_json(&job->error);
    size_t n = strlen(body);
    char *ev = xmalloc(n + 9);
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, body, n);
    memcpy(ev + 6 + n, "\n\n", 3);
    free(body);
    append_event(job, ev);
}

/* The rest of each stream once generate() returned: what was held back, the finish reason of
 * each choice still open, the usage chunk when asked for, and the [DONE] terminator. */
static void finish_stream(const ServeContext *ctx, ServeJob *job, int total) {
    long prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; i < job->req.n_prompts; i++)
        prompt_tokens += job->req.lens[i];
    for (int j = 0; job->rc == 0 && j < total; j++) {
        if (!job->finished[j]) {
            char *text;
            size_t n;
            int tokens;
            bool stopped;
            if (serve_finish(ctx, &job->req, &job->out[j], &text, &n, &tokens, &stopped) != 0)
                continue;
            json_t *lp = unsent_logprobs(ctx, job, j, &job->out[j], tokens);
            if (n > job->sent[j] || lp)
                append_event(job, serve_chunk_event(ctx, &job->req, j, text + job->sent[j],
                                                    n > job->sent[j] ? n - job->sent[j] : 0, lp,
                                                    NULL, false));
            append_event(job, serve_chunk_event(ctx, &job->req, j, NULL, 0, NULL,
                                                stopped ? "stop" : "length", false));
            job->tokens[j] = tokens;
            free(text);
        }
        completion_tokens += job->tokens[j];
    }
    if (job->rc != 0) stream_error(ctx, job);
    if (job->rc == 0 && job->req.include_usage)
        append_event(job, serve_usage_event(ctx, &job->req, prompt_tokens, completion_tokens));
    append_event(job, xstrdup("data: [DONE]\n\n"));
}

static void mark_parsed(ServeJob *job) {
    pthread_mutex_lock(&job->lock);
    job->parsed = true;
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
}

/* Parses the job's request (a refused one is done here: returns -1) and sets up its results. */
static int prepare_job(const ServeContext *ctx, ServeJob *job) {
    ServeRequest *req = &job->req;
    if (serve_request_parse(ctx, job->kind, job->body, job->body_len, req, &job->error) != 0) {
        job->rc = -1;
        mark_done(job);
        return -1;
    }
    mark_parsed(job);
    int total = req->n_prompts * req->opt.n_per_prompt;
    job->out = xcalloc((size_t)total, sizeof *job->out);
    if (req->stream) {
        job->sent = xcalloc((size_t)total, sizeof *job->sent);
        job->finished = xcalloc((size_t)total, sizeof *job->finished);
        job->tokens = xcalloc((size_t)total, sizeof *job->tokens);
        job->lp_sent = xcalloc((size_t)total, sizeof *job->lp_sent);
        job->lp_offset = xcalloc((size_t)total, sizeof *job->lp_offset);
        if (req->kind == SERVE_CHAT) /* the first chunk of each choice names the role */
            for (int j = 0; j < total; j++)
                append_event(job, serve_chunk_event(ctx, req, j, NULL, 0, NULL, NULL, true));
    }
    return 0;
}

static void finish_job(const ServeContext *ctx, ServeJob *job) {
    ServeRequest *req = &job->req;
    if (req->stream) {
        finish_stream(ctx, job, req->n_prompts * req->opt.n_per_prompt);
    } else if (job->rc == 0 && !(job->response = serve_response_json(ctx, req, job->out))) {
        job->rc = -1;
        job->error.status = 500;
        snprintf(job->error.message, sizeof job->error.message, "%s", err_msg());
    }
    mark_done(job);
}

/* Whether job b can share a's generate() call: both greedy (the seed then plays no part) with
 * the same length limit, n, repetition penalty, eos ids and log-probs asked for (top N, raw or
 * processed). A greedy token depends on its own sequence alone, so sharing a call changes no
 * token. */
static bool shareable(const ServeJob *a, const ServeJob *b) {
    const GenerateOptions *x = &a->req.opt, *y = &b->req.opt;
    if (x->n_eos != y->n_eos ||
        (x->n_eos > 0 && memcmp(x->eos_ids, y->eos_ids, (size_t)x->n_eos * sizeof *x->eos_ids)))
        return false;
    return !x->sampling.do_sample && !y->sampling.do_sample &&
           x->max_new_tokens == y->max_new_tokens && x->n_per_prompt == y->n_per_prompt &&
           x->sampling.repetition_penalty == y->sampling.repetition_penalty &&
           x->top_logprobs == y->top_logprobs && x->raw_logprobs == y->raw_logprobs;
}

/* One generate() call over the prompts of jobs[0..count), each job's completions moved into its
 * own `out`; then each job is finished. */
static void run_batch(const ServeContext *ctx, ServeJob **jobs, int count) {
    int n_prompts = 0, per = jobs[0]->req.opt.n_per_prompt;
    for (int b = 0; b < count; b++)
        n_prompts += jobs[b]->req.n_prompts;
    const int32_t **ids = xmalloc((size_t)n_prompts * sizeof *ids);
    int *lens = xmalloc((size_t)n_prompts * sizeof *lens);
    int *first = xmalloc((size_t)(count + 1) * sizeof *first);
    for (int b = 0, p = 0; b < count; b++) {
        first[b] = p * per;
        for (int i = 0; i < jobs[b]->req.n_prompts; i++, p++) {
            ids[p] = jobs[b]->req.ids[i];
            lens[p] = jobs[b]->req.lens[i];
        }
    }
    first[count] = n_prompts * per;
    Completion *out = count == 1 ? jobs[0]->out : xcalloc((size_t)n_prompts * per, sizeof *out);
    Batch batch = {ctx, jobs, first, count, out};
    GenerateOptions opt = jobs[0]->req.opt;
    opt.on_token = on_token;
    opt.on_token_ctx = &batch;
    int rc = generate(ctx->model, ids, lens, n_prompts, &opt, out);
    for (int b = 0; b < count; b++) {
        ServeJob *job = jobs[b];
        job->rc = rc;
        if (rc != 0) {
            job->error.status = 400;
            snprintf(job->error.message, sizeof job->error.message, "%s", err_msg());
        } else if (count > 1) {
            memcpy(job->out, out + first[b], (size_t)(first[b + 1] - first[b]) * sizeof *out);
        }
        finish_job(ctx, job);
    }
    if (count > 1) free(out);
    free(ids);
    free(lens);
    free(first);
}

static void fail_job(const ServeContext *ctx, ServeJob *job) {
    job->rc = -1;
    job->error.status = 503;
    snprintf(job->error.message, sizeof job->error.message, "the server is shutting down");
    if (job->parsed && job->req.stream) { /* its stream has begun: the error ends it */
        stream_error(ctx, job);
        append_event(job, xstrdup("data: [DONE]\n\n"));
    }
    mark_done(job);
}

/* A weight update, between two generate() calls (the engine thread's alone). */
static void run_weights(const ServeContext *ctx, ServeJob *job) {
    job->rc = serve_load_weights(ctx, job->body, job->body_len, &job->updated, &job->error);
    mark_done(job);
}

/* At most this many sequences share one generate() call. */
#define SERVE_BATCH_SEQUENCES 64

/* Takes everything queued at once, in arrival order: each request is parsed, then runs with the
 * queued requests after it that can share its call (shareable), the others keeping their order.
 * Stopping: what is left fails with 503. */
static void *engine_main(void *arg) {
    ServeEngine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        while (!e->head && !e->stopping)
            pthread_cond_wait(&e->queued, &e->lock);
        ServeJob *list = e->head;
        e->head = e->tail = NULL;
        bool stopping = e->stopping;
        pthread_mutex_unlock(&e->lock);
        if (!list) break;
        int n = 0;
        for (ServeJob *j = list; j; j = j->next)
            n++;
        ServeJob **jobs = xmalloc((size_t)n * sizeof *jobs),
                 **batch = xmalloc((size_t)n * sizeof *batch);
        bool *ready = xcalloc((size_t)n, sizeof *ready), *taken = xcalloc((size_t)n, sizeof *taken);
        n = 0;
        for (ServeJob *j = list; j; j = j->next)
            jobs[n++] = j;
        for (int i = 0; i < n; i++) {
            if (taken[i]) continue;
            pthread_mutex_lock(&e->lock);
            stopping |= e->stopping;
            pthread_mutex_unlock(&e->lock);
            if (!stopping && jobs[i]->kind == SERVE_LOAD_WEIGHTS) {
                run_weights(e->ctx, jobs[i]);
                taken[i] = true;
                continue;
            }
            if (stopping || (!ready[i] && prepare_job(e->ctx, jobs[i]) != 0)) {
                if (stopping && !jobs[i]->done) fail_job(e->ctx, jobs[i]);
                taken[i] = true;
                continue;
            }
            ready[i] = true;
            int count = 0, sequences = 0;
            batch[count++] = jobs[i];
            sequences += jobs[i]->req.n_prompts * jobs[i]->req.opt.n_per_prompt;
            for (int k = i + 1; k < n && !jobs[i]->req.opt.sampling.do_sample; k++) {
                if (taken[k]) continue;
                if (jobs[k]->kind == SERVE_LOAD_WEIGHTS) break; /* later jobs see new weights */
                if (!ready[k]) {
                    if (prepare_job(e->ctx, jobs[k]) != 0) {
                        taken[k] = true; /* refused: answered already */
                        continue;
                    }
                    ready[k] = true;
                }
                int seqs = jobs[k]->req.n_prompts * jobs[k]->req.opt.n_per_prompt;
                if (!shareable(jobs[i], jobs[k]) || sequences + seqs > SERVE_BATCH_SEQUENCES)
                    continue;
                batch[count++] = jobs[k];
                sequences += seqs;
                taken[k] = true;
            }
            taken[i] = true;
            run_batch(e->ctx, batch, count);
        }
        for (int i = 0; i < n; i++)
            serve_job_release(jobs[i]);
        free(jobs);
        free(batch);
        free(ready);
        free(taken);
    }
    pthread_mutex_lock(&e->lock);
    e->exited = true;
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

ServeEngine *serve_engine_start(const ServeContext *ctx) {
    ServeEngine *e = xcalloc(1, sizeof *e);
    e->ctx = ctx;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->queued, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->queued);
        free(e);
        err_set("rlhf serve: could not start the engine thread");
        return NULL;
    }
    return e;
}

ServeJob *serve_engine_submit(ServeEngine *e, ServeKind kind, const char *body, size_t len) {
    ServeJob *job = xcalloc(1, sizeof *job);
    job->kind = kind;
    job->body = xmalloc(len + 1);
    memcpy(job->body, body, len);
    job->body[len] = '\0';
    job->body_len = len;
    job->refs = 2;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->changed, NULL);
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        job->refs = 1;
        serve_job_release(job);
        return NULL;
    }
    if (e->tail)
        e->tail->next = job;
    else
        e->head = job;
    e->tail = job;
    pthread_cond_signal(&e->queued);
    pthread_mutex_unlock(&e->lock);
    return job;
}

void serve_job_wait_parsed(ServeJob *job) {
    pthread_mutex_lock(&job->lock);
    while (!job->parsed)
        pthread_cond_wait(&job->changed, &job->lock);
    pthread_mutex_unlock(&job->lock);
}

void serve_job_wait(ServeJob *job) {
    pthread_mutex_lock(&job->lock);
    while (!job->done)
        pthread_cond_wait(&job->changed, &job->lock);
    pthread_mutex_unlock(&job->lock);
}

size_t serve_job_read(ServeJob *job, char *buf, size_t max) {
    pthread_mutex_lock(&job->lock);
    while (job->read_pos == job->events_len && !job->done)
        pthread_cond_wait(&job->changed, &job->lock);
    size_t n = job->events_len - job->read_pos;
    if (n > max) n = max;
    memcpy(buf, job->events + job->read_pos, n);
    job->read_pos += n;
    pthread_mutex_unlock(&job->lock);
    return n;
}

void serve_job_release(ServeJob *job) {
    pthread_mutex_lock(&job->lock);
    int left = --job->refs;
    pthread_mutex_unlock(&job->lock);
    if (left > 0) return;
    if (job->out) {
        completions_free(job->out, job->req.n_prompts * job->req.opt.n_per_prompt);
        free(job->out);
    }
    serve_request_free(&job->req);
    free(job->body);
    free(job->response);
    free(job->sent);
    free(job->finished);
    free(job->tokens);
    free(job->lp_sent);
    free(job->lp_offset);
    free(job->events);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->changed);
    free(job);
}

void serve_engine_request_stop(ServeEngine *e) {
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->queued);
    pthread_mutex_unlock(&e->lock);
}

bool serve_engine_stopped(ServeEngine *e) {
    pthread_mutex_lock(&e->lock);
    bool exited = e->exited;
    pthread_mutex_unlock(&e->lock);
    return exited;
}

void serve_engine_stop(ServeEngine *e) {
    serve_engine_request_stop(e);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->queued);
    free(e);
}
