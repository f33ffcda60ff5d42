/* `rlhf serve`: OpenAI-compatible completions over the in-process engine (rollout/generate.h).
 *
 * Three parts, each in its own file:
 *   serve_request.c  an OpenAI (or TRL vllm-serve) request body to a ServeRequest (token ids and
 *                    generate() options), and the response and stream-chunk JSON; no HTTP, no
 *                    threads;
 *   serve_engine.c   the queue of requests and the one thread that runs generate() on them;
 *   serve_http.c     libmicrohttpd: routes, bodies, server-sent events, signals (serve_absent.c
 *                    stands in when the build has no libmicrohttpd).
 *
 * Seeds: a request's `seed` S is generate()'s seed, and its completions are streams 0..n-1 (of
 * its prompts in order, n per prompt), exactly as `rlhf generate --seed S --n n` numbers them: the
 * same prompt, seed and settings give the same tokens. Without `seed` a request draws a fresh one
 * (OpenAI's behaviour: unseeded requests differ). */
#ifndef RLHF_CLI_SERVE_H
#define RLHF_CLI_SERVE_H

#include "chat/chat_template.h"
#include "model/model.h"
#include "rollout/generate.h"
#include "rollout/generation_config.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* What every request reads and nothing changes after start-up. */
typedef struct {
    const Model *model;
    const Tokenizer *tok;
    const ChatTemplate *chat; /* NULL: the model has no chat template (chat requests refused) */
    const json_t *special_tokens;
    GenerationDefaults defaults;
    const char *model_name; /* the id /v1/models lists and requests must name */
    int context;            /* max_position_embeddings: prompt + max_tokens must fit */
    /* The same model, written by the engine thread alone and only between two generate()
     * calls (POST /update_safetensors/, serve_load_weights); NULL: updates refused. */
    Model *weights;
} ServeContext;

/* SERVE_TRL_GENERATE and SERVE_TRL_CHAT are TRL's vLLM server protocol (POST /generate/ and
 * /chat/ of trl/scripts/vllm_serve.py, what trl.generation.vllm_client.VLLMClient sends): a batch
 * of prompts (or conversations) in, {prompt_ids, completion_ids, logprobs, logprob_token_ids}
 * out; never streamed, no `model` field. */
/* SERVE_LOAD_WEIGHTS is POST /update_safetensors/ (serve_load_weights): run by the engine in
 * arrival order, so that requests queued after it generate with the new weights and requests
 * before it with the old. */
typedef enum {
    SERVE_COMPLETIONS,
    SERVE_CHAT,
    SERVE_TRL_GENERATE,
    SERVE_TRL_CHAT,
    SERVE_LOAD_WEIGHTS
} ServeKind;

#define SERVE_MAX_STOP 4
/* The most alternatives per token a request may ask for: vLLM's max_logprobs default (OpenAI
 * documents 5 for completions and 20 for chat; this server imitates vLLM). */
#define SERVE_MAX_LOGPROBS 20

/* One parsed request: prompts as token ids and the options of its one generate() call. */
typedef struct {
    ServeKind kind;
    int n_prompts;
    int32_t **ids;
    int *lens;
    GenerateOptions opt; /* n_per_prompt = n, seed, sampling, max_new_tokens, eos ids */
    int32_t eos_buf[16]; /* TRL requests' eos ids (stop_token_ids, ignore_eos): opt.eos_ids */
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    /* completions: `logprobs: N`; chat: `logprobs: true`; TRL: `logprobs: N` (not null). The
     * alternatives asked for are opt.top_logprobs, their distribution opt.raw_logprobs. */
    bool logprobs;
    char id[48]; /* "cmpl-..." / "chatcmpl-..." */
    long created;
} ServeRequest;

/* A request refused: the HTTP status and OpenAI's error object. */
typedef struct {
    int status;
    char message[512];
    char param[64]; /* the offending field, "" when none */
} ServeError;

/* Parses a request body (len bytes of JSON) of kind `kind` into *req (free with
 * serve_request_free). Returns 0, or -1 with *err filled (status 400, or 404 for an unknown
 * model) and nothing to free. */
int serve_request_parse(const ServeContext *ctx, ServeKind kind, const char *body, size_t len,
                        ServeRequest *req, ServeError *err);
void serve_request_free(ServeRequest *req);

/* {"error": {"message", "type", "param", "code"}} as OpenAI shapes it (a JSON string the caller
 * frees). */
char *serve_error_json(const ServeError *err);

/* The whole (non-streamed) response to req from its completions out[n_prompts * n]: a JSON
 * string the caller frees, or NULL with an error (a failed decode). */
char *serve_response_json(const ServeContext *ctx, const ServeRequest *req, const Completion *out);

/* /v1/models' body (the caller frees). */
char *serve_models_json(const ServeContext *ctx);

/* Where a completion's text ends: its decoded text cut before the first stop string (then
 * *tokens is the number of tokens up to the one that completed it, *stopped true), else all of
 * it (*stopped: its last token is an eos id). *text is malloc'd. Returns 0, or -1 with an
 * error. */
int serve_finish(const ServeContext *ctx, const ServeRequest *req, const Completion *c, char **text,
                 size_t *text_len, int *tokens, bool *stopped);

/* How much of `text` (n bytes decoded so far) may be streamed now: up to the first stop string
 * (*hit true), else all but a trailing incomplete UTF-8 character and a tail that could still
 * become a stop string. */
size_t serve_stream_safe_len(const ServeRequest *req, const char *text, size_t n, bool *hit);

/* The `logprobs` of a choice's tokens [from, to) of c in OpenAI's shape for req's kind: chat
 * {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}, completions {tokens,
 * token_logprobs, top_logprobs, text_offset}; *offset is the choice's text offset (characters)
 * before token `from`, advanced past token to - 1 (a stream carries it from chunk to chunk).
 * A new reference. */
json_t *serve_logprobs_json(const ServeContext *ctx, const ServeRequest *req, const Completion *c,
                            int from, int to, long *offset);

/* One server-sent event of a stream: "data: {chunk}\n\n" for choice `index` with `delta` text
 * (may be NULL), `logprobs` (a reference it takes, NULL: null) and finish_reason (NULL while
 * going on). Malloc'd. */
char *serve_chunk_event(const ServeContext *ctx, const ServeRequest *req, int index,
                        const char *delta, size_t delta_len, json_t *logprobs,
                        const char *finish_reason, bool first);
/* The usage-only last chunk of a stream (stream_options.include_usage), an event as above. */
char *serve_usage_event(const ServeContext *ctx, const ServeRequest *req, long prompt_tokens,
                        long completion_tokens);

/* Copies the tensors of a safetensors file (body, len bytes) into ctx->weights by name: every
 * tensor must be a parameter of the model with its shape and a floating dtype (converted to the
 * model's fp32), all checked before any is copied. Tensors not in the body keep their values.
 * Engine thread only. Returns 0 with *updated (the tensor count), or -1 with *err (400 for a bad
 * body, 409 for a server that cannot take updates: --bf16, --adapter) and nothing changed. */
int serve_load_weights(const ServeContext *ctx, const char *body, size_t len, int *updated,
                       ServeError *err);

/* ---- the engine (serve_engine.c) ---- */

/* A request in the queue; shared by the connection that made it and the engine thread
 * (reference counted). The engine thread alone parses, tokenises, generates and detokenises, so
 * that the connections' short-lived threads never touch the tokenizer (whose per-thread match
 * data would be left behind by every thread that exits). Invariants:
 *   1. parsed is set once, by the engine, when req holds the parsed request or the request was
 *      refused (then rc is -1, error says why and done is set too); never unset.
 *   2. done is set once, by the engine, after the last byte of `events` (streaming) or after
 *      `response` is complete; never unset.
 *   3. events only grows, under `lock`; a reader takes bytes from `read_pos`. */
typedef struct ServeJob {
    ServeKind kind;
    char *body; /* the request body as received */
    size_t body_len;
    ServeRequest req;
    Completion *out; /* n_prompts * n, filled by generate() */
    int rc;          /* 0, or -1 with `error` */
    int updated;     /* SERVE_LOAD_WEIGHTS: the tensors replaced */
    ServeError error;
    char *response; /* the whole JSON response (non-streaming) */
    /* streaming state, per choice */
    size_t *sent;    /* bytes of the decoded text already sent */
    bool *finished;  /* a stop string ended it: later tokens are dropped */
    int *tokens;     /* tokens up to the end of what is sent */
    int *lp_sent;    /* tokens whose logprobs are sent (they go with the chunk of their text) */
    long *lp_offset; /* text_offset of the next token (completions' logprobs) */
    char *events;
    size_t events_len, events_cap, read_pos;
    bool parsed, done;
    int refs;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct ServeJob *next;
} ServeJob;

typedef struct ServeEngine ServeEngine;

/* Starts the engine thread over ctx (which must outlive it). Returns NULL with an error. */
ServeEngine *serve_engine_start(const ServeContext *ctx);
/* Queues a request body (copied) of kind `kind` as a new job, refs 2: the caller's and the
 * engine's. Returns NULL after serve_engine_stop. */
ServeJob *serve_engine_submit(ServeEngine *e, ServeKind kind, const char *body, size_t len);
/* Blocks until the job is parsed (invariant 1): then job->req.stream says how to answer. */
void serve_job_wait_parsed(ServeJob *job);
/* Blocks until the job is done (non-streaming). */
void serve_job_wait(ServeJob *job);
/* Copies up to max bytes of the job's stream to buf, waiting for some; returns 0 at its end. */
size_t serve_job_read(ServeJob *job, char *buf, size_t max);
void serve_job_release(ServeJob *job);
/* Asks the engine to stop: the call in progress completes, queued requests fail (503). */
void serve_engine_request_stop(ServeEngine *e);
/* Whether the engine thread has finished (after serve_engine_request_stop). */
bool serve_engine_stopped(ServeEngine *e);
/* serve_engine_request_stop, then waits for the thread and frees the engine. */
void serve_engine_stop(ServeEngine *e);

#endif
