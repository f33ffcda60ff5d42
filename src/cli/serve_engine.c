/* The engine of `rlhf serve`: one thread takes the queued requests in arrival order and runs one
 * generate() call for each (its prompts and its n completions per prompt batched together in
 * that call's continuous batching). generate() uses every core already, so requests are not run
 * side by side; one whose sampling differs from another's cannot share its call either (a call
 * has one set of sampling settings and one seed). */
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
    bool stopping;
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

typedef struct {
    const ServeContext *ctx;
    ServeJob *job;
} StreamCtx;

/* After each token of choice j: the text it gained that can no longer turn into a stop string
 * goes out as one chunk; a stop string ends the choice there. */
static void on_token(int j, const int32_t *ids, int len, void *arg) {
    StreamCtx *s = arg;
    ServeJob *job = s->job;
    if (job->finished[j]) return;
    char *text;
    size_t n;
    if (tokenizer_decode(s->ctx->tok, ids, (size_t)len, true, &text, &n) != 0) return;
    bool hit;
    size_t safe = serve_stream_safe_len(&job->req, text, n, &hit);
    if (safe > job->sent[j])
        append_event(job, serve_chunk_event(s->ctx, &job->req, j, text + job->sent[j],
                                            safe - job->sent[j], NULL, false));
    if (safe > job->sent[j]) job->sent[j] = safe;
    job->tokens[j] = len;
    if (hit) {
        job->finished[j] = true;
        append_event(job, serve_chunk_event(s->ctx, &job->req, j, NULL, 0, "stop", false));
    }
    free(text);
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
            if (n > job->sent[j])
                append_event(job, serve_chunk_event(ctx, &job->req, j, text + job->sent[j],
                                                    n - job->sent[j], NULL, false));
            append_event(job, serve_chunk_event(ctx, &job->req, j, NULL, 0,
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

static void run_job(const ServeContext *ctx, ServeJob *job) {
    ServeRequest *req = &job->req;
    if (serve_request_parse(ctx, job->kind, job->body, job->body_len, req, &job->error) != 0) {
        job->rc = -1;
        mark_done(job);
        return;
    }
    mark_parsed(job);
    int total = req->n_prompts * req->opt.n_per_prompt;
    job->out = xcalloc((size_t)total, sizeof *job->out);
    StreamCtx sc = {ctx, job};
    if (req->stream) {
        job->sent = xcalloc((size_t)total, sizeof *job->sent);
        job->finished = xcalloc((size_t)total, sizeof *job->finished);
        job->tokens = xcalloc((size_t)total, sizeof *job->tokens);
        req->opt.on_token = on_token;
        req->opt.on_token_ctx = &sc;
        if (req->kind == SERVE_CHAT) /* the first chunk of each choice names the role */
            for (int j = 0; j < total; j++)
                append_event(job, serve_chunk_event(ctx, req, j, NULL, 0, NULL, true));
    }
    job->rc = generate(ctx->model, (const int32_t *const *)req->ids, req->lens, req->n_prompts,
                       &req->opt, job->out);
    if (job->rc != 0) {
        job->error.status = 400;
        snprintf(job->error.message, sizeof job->error.message, "%s", err_msg());
    }
    req->opt.on_token = NULL;
    if (req->stream) {
        finish_stream(ctx, job, total);
    } else if (job->rc == 0 && !(job->response = serve_response_json(ctx, req, job->out))) {
        job->rc = -1;
        job->error.status = 500;
        snprintf(job->error.message, sizeof job->error.message, "%s", err_msg());
    }
    mark_done(job);
}

static void fail_job(const ServeContext *ctx, ServeJob *job) {
    job->rc = -1;
    job->error.status = 503;
    snprintf(job->error.message, sizeof job->error.message, "the server is shutting down");
    (void)ctx; /* not parsed: answered with a JSON error, not a stream */
    mark_done(job);
}

static void *engine_main(void *arg) {
    ServeEngine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        while (!e->head && !e->stopping)
            pthread_cond_wait(&e->queued, &e->lock);
        ServeJob *job = e->head;
        bool stopping = e->stopping;
        if (job) {
            e->head = job->next;
            if (!e->head) e->tail = NULL;
        }
        pthread_mutex_unlock(&e->lock);
        if (!job) break;
        if (stopping)
            fail_job(e->ctx, job);
        else
            run_job(e->ctx, job);
        serve_job_release(job);
    }
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
    free(job->events);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->changed);
    free(job);
}

void serve_engine_stop(ServeEngine *e) {
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->queued);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->queued);
    free(e);
}
