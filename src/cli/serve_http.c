/* rlhf serve MODEL [--adapter DIR] [--host H] [--port P] [--bf16] [--served-model-name NAME]
 *                  [--max-model-len N]
 * OpenAI-compatible HTTP over libmicrohttpd: a thread per connection (a handler may block on
 * its request's generation), the engine thread behind them (serve_engine.c). SIGTERM or SIGINT
 * stops it: the request being generated completes, queued ones get 503, exit status 0. */
#include "cli/commands.h"
#include "cli/serve.h"

#include "common/error.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char serve_usage[] =
    "usage: rlhf serve MODEL [--adapter DIR] [--host 127.0.0.1] [--port 8000] [--bf16]\n"
    "                  [--served-model-name NAME] [--max-model-len N]\n"
    "\n"
    "Serves MODEL (a model directory or Hub id) over OpenAI's API: POST /v1/completions,\n"
    "POST /v1/chat/completions (the model's chat template applied), GET /v1/models, GET /health;\n"
    "and TRL's vLLM server endpoints (VLLMClient): GET /health/, GET /get_world_size/,\n"
    "POST /generate/, POST /chat/; POST /update_safetensors/ takes new weights as a safetensors\n"
    "body (what `rlhf train` with vllm_mode: server sends; TRL's NCCL weight updates answer 501).\n"
    "Requests are served in arrival order, each in one batched generate() call (n completions per\n"
    "prompt decoding together). --port 0 picks a free port. The first line on standard output\n"
    "is \"rlhf serve: listening on http://HOST:PORT\". Request fields left out take the model's\n"
    "generation_config.json defaults, as `rlhf generate` does; `seed` S gives the tokens of\n"
    "`rlhf generate --seed S`. --max-model-len N caps prompt + completion tokens at N (default\n"
    "and most: the model's max_position_embeddings), as vLLM's option does. SIGTERM or SIGINT\n"
    "stops the server (exit 0). See docs/serve.md.\n";

#define MAX_BODY (16u << 20)
/* How long a stop signal waits for the generate() call in progress (seconds). */
#define SERVE_STOP_GRACE_S 10

typedef struct {
    const ServeContext *ctx;
    ServeEngine *engine;
    size_t weights_body_max; /* POST /update_safetensors/: the whole model in fp32, and a header */
} Server;

typedef struct {
    char *data;
    size_t len;
    bool too_big;
} Body;

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *body) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *param,
                                  const char *message) {
    ServeError err = {.status = status};
    snprintf(err.message, sizeof err.message, "%s", message);
    snprintf(err.param, sizeof err.param, "%s", param ? param : "");
    return send_json(c, (unsigned)status, serve_error_json(&err));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    size_t n = serve_job_read(cls, buf, max);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_free(void *cls) {
    serve_job_release(cls);
}

static enum MHD_Result generate_route(const Server *s, struct MHD_Connection *c, ServeKind kind,
                                      const Body *body) {
    ServeJob *job = serve_engine_submit(s->engine, kind, body->data ? body->data : "", body->len);
    if (!job) return send_error(c, 503, NULL, "the server is shutting down");
    serve_job_wait_parsed(job);
    if (job->rc == 0 && job->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                                   stream_read, job, stream_free);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r); /* the job goes with the response (stream_free) */
        return ret;
    }
    serve_job_wait(job);
    enum MHD_Result ret;
    if (job->rc != 0) {
        ret = send_json(c, (unsigned)job->error.status, serve_error_json(&job->error));
    } else {
        ret = send_json(c, MHD_HTTP_OK, job->response);
        job->response = NULL; /* MHD frees it */
    }
    serve_job_release(job);
    return ret;
}

/* Whether url (with or without its trailing slash) is TRL's `path` ("/generate/"). */
static bool trl_path(const char *url, const char *path) {
    size_t n = strlen(path) - 1; /* without the slash */
    return strncmp(url, path, n) == 0 && (url[n] == '\0' || strcmp(url + n, "/") == 0);
}

/* POST /update_safetensors/: the body is a safetensors file of the tensors to replace; answers
 * {"updated": N} once the engine has copied them (requests queued after this one generate with
 * them). */
static enum MHD_Result weights_route(const Server *s, struct MHD_Connection *c, const Body *body) {
    ServeJob *job =
        serve_engine_submit(s->engine, SERVE_LOAD_WEIGHTS, body->data ? body->data : "", body->len);
    if (!job) return send_error(c, 503, NULL, "the server is shutting down");
    serve_job_wait(job);
    enum MHD_Result ret;
    if (job->rc != 0) {
        ret = send_json(c, (unsigned)job->error.status, serve_error_json(&job->error));
    } else {
        char text[64];
        snprintf(text, sizeof text, "{\"updated\":%d}", job->updated);
        ret = send_json(c, MHD_HTTP_OK, xstrdup(text));
    }
    serve_job_release(job);
    return ret;
}

/* TRL's vLLM server endpoints (trl/scripts/vllm_serve.py, what VLLMClient calls): health, world
 * size, generate and chat; the weight-update ones answer 501, since weights reach this server
 * only from disk. Returns false when url is none of them. */
static bool trl_route(const Server *s, struct MHD_Connection *c, const char *url,
                      const char *method, const Body *body, enum MHD_Result *ret) {
    static const char *const weight_paths[] = {
        "/init_communicator/",   "/update_named_param/", "/batch_update_named_params/",
        "/close_communicator/",  "/update_weights/",     "/start_weight_update/",
        "/finish_weight_update/"};
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (trl_path(url, "/health/") && strcmp(url, "/health") != 0) {
        *ret = get ? send_json(c, MHD_HTTP_OK, xstrdup("{\"status\":\"ok\"}"))
                   : send_error(c, 405, NULL, "use GET for this endpoint");
    } else if (trl_path(url, "/get_world_size/")) {
        /* one process holds the whole model: tensor_parallel_size * data_parallel_size = 1 */
        *ret = get ? send_json(c, MHD_HTTP_OK, xstrdup("{\"world_size\":1}"))
                   : send_error(c, 405, NULL, "use GET for this endpoint");
    } else if (trl_path(url, "/generate/") || trl_path(url, "/chat/")) {
        *ret = post ? generate_route(
                          s, c, trl_path(url, "/chat/") ? SERVE_TRL_CHAT : SERVE_TRL_GENERATE, body)
                    : send_error(c, 405, NULL, "use POST for this endpoint");
    } else if (trl_path(url, "/update_safetensors/")) {
        *ret = post ? weights_route(s, c, body)
                    : send_error(c, 405, NULL, "use POST for this endpoint");
    } else if (trl_path(url, "/reset_prefix_cache/")) {
        /* no prefix cache is kept, so none can be stale */
        *ret = post ? send_json(c, MHD_HTTP_OK,
                                xstrdup("{\"message\":\"Request received, resetting prefix cache "
                                        "status: True\"}"))
                    : send_error(c, 405, NULL, "use POST for this endpoint");
    } else {
        for (size_t i = 0; i < sizeof weight_paths / sizeof *weight_paths; i++)
            if (trl_path(url, weight_paths[i])) {
                char message[300];
                snprintf(message, sizeof message,
                         "%.60s: weight updates over NCCL are not supported by rlhf serve "
                         "(POST /update_safetensors/ takes new weights as a safetensors body, "
                         "which `rlhf train` with vllm_mode: server sends)",
                         weight_paths[i]);
                *ret = send_error(c, 501, NULL, message);
                return true;
            }
        if (!trl_path(url, "/get_sequence_logprobs/")) return false;
        *ret = send_error(c, 501, NULL, "/get_sequence_logprobs/ is not supported by rlhf serve");
    }
    return true;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    const Server *s = cls;
    bool post = strcmp(method, "POST") == 0;
    if (!*con_cls) { /* first call: headers only */
        *con_cls = xcalloc(1, sizeof(Body));
        return MHD_YES;
    }
    Body *body = *con_cls;
    if (*upload_size) { /* a piece of the body */
        size_t max = trl_path(url, "/update_safetensors/") ? s->weights_body_max : MAX_BODY;
        if (body->len + *upload_size > max) {
            body->too_big = true;
        } else {
            body->data = xrealloc(body->data, body->len + *upload_size + 1);
            memcpy(body->data + body->len, upload, *upload_size);
            body->len += *upload_size;
            body->data[body->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (body->too_big)
        return send_error(c, 413, NULL,
                          trl_path(url, "/update_safetensors/")
                              ? "the request body is larger than the served model's weights"
                              : "the request body is over 16 MiB");
    bool completions = strcmp(url, "/v1/completions") == 0;
    bool chat = strcmp(url, "/v1/chat/completions") == 0;
    bool models = strcmp(url, "/v1/models") == 0;
    bool health = strcmp(url, "/health") == 0;
    if (completions || chat) {
        if (!post) return send_error(c, 405, NULL, "use POST for this endpoint");
        return generate_route(s, c, chat ? SERVE_CHAT : SERVE_COMPLETIONS, body);
    }
    if (models || health) {
        if (strcmp(method, "GET") != 0)
            return send_error(c, 405, NULL, "use GET for this endpoint");
        return send_json(c, MHD_HTTP_OK, models ? serve_models_json(s->ctx) : xstrdup("{}"));
    }
    enum MHD_Result trl;
    if (trl_route(s, c, url, method, body, &trl)) return trl;
    char message[300];
    snprintf(message, sizeof message, "Invalid URL (%s %.200s)", method, url);
    return send_error(c, 404, NULL, message);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    Body *body = *con_cls;
    if (body) free(body->data);
    free(body);
    *con_cls = NULL;
}

typedef struct {
    const char *model, *adapter, *host, *port, *name, *max_model_len;
    bool bf16;
    int context; /* --max-model-len, 0 when not given */
} ServeArgs;

static int parse_args(int argc, char **argv, ServeArgs *a) {
    memset(a, 0, sizeof *a);
    a->host = "127.0.0.1";
    a->port = "8000";
    const CliStringOption opts[] = {{"--adapter", &a->adapter},
                                    {"--host", &a->host},
                                    {"--port", &a->port},
                                    {"--served-model-name", &a->name},
                                    {"--max-model-len", &a->max_model_len}};
    int rc = cli_model_arguments(argc, argv, "serve", serve_usage, opts, sizeof opts / sizeof *opts,
                                 &a->model, &a->bf16);
    if (rc != 0) return rc;
    char *end;
    long port = strtol(a->port, &end, 10);
    if (*end || end == a->port || port < 0 || port > 65535) {
        fprintf(stderr, "rlhf serve: --port: expected 0..65535, got \"%s\"\n", a->port);
        return CLI_EXIT_USAGE;
    }
    if (a->max_model_len && cli_positive_int("--max-model-len", a->max_model_len, &a->context) != 0)
        return CLI_EXIT_USAGE;
    return 0;
}

/* The daemon on host:port (an address, or a name such as localhost: its first address); NULL
 * with an error. */
static struct MHD_Daemon *start_daemon(const char *host, int port, Server *s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0) {
        err_set("--host \"%s\": %s (expected an address of this host, e.g. 127.0.0.1 or ::1)", host,
                gai_strerror(gai));
        return NULL;
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    memcpy(&addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)port);
    }
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, request_done, NULL,
                         MHD_OPTION_CONNECTION_LIMIT, 512u, MHD_OPTION_END);
    if (!d)
        err_set("could not listen on %s port %d (in use, or not an address of this host)", host,
                port);
    return d;
}

static int serve_local(const ServeArgs *a) {
    Model m;
    LoraAdapter lora = {0};
    if (cli_load_model(&m, a->model, a->adapter, &lora) != 0) return cli_fail(err_msg());
    Tokenizer tok = {0};
    ChatTemplateSource src = {0};
    ChatTemplate *tpl = NULL;
    ServeContext ctx = {
        .model = &m, .tok = &tok, .model_name = a->name ? a->name : a->model, .weights = &m};
    int rc = CLI_EXIT_OK;
    if ((a->bf16 && model_store_bf16(&m) != 0) || tokenizer_load(&tok, a->model) != 0 ||
        generation_defaults_load(&ctx.defaults, a->model, &tok, a->model) != 0 ||
        chat_template_source_load(a->model, &src) != 0) {
        rc = cli_fail(err_msg());
        goto done;
    }
    if (src.ntemplates > 0) {
        const char *text = chat_template_source_pick(&src, false);
        if (!text || chat_template_compile(text, strlen(text), &tpl) != 0) {
            rc = cli_fail(err_msg());
            goto done;
        }
    }
    ctx.chat = tpl;
    ctx.special_tokens = src.special_tokens;
    ctx.context = (int)m.cfg.max_position_embeddings;
    if (a->context > ctx.context) {
        /* vLLM refuses a max_model_len above the model's own limit too: the positions past it
         * were never trained */
        err_set("--max-model-len %d: more than the model's max_position_embeddings (%d)",
                a->context, ctx.context);
        rc = cli_fail(err_msg());
        goto done;
    }
    if (a->context > 0) ctx.context = a->context;
    /* the signals go to sigwait below: every thread started from here on blocks them */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    ServeEngine *engine = serve_engine_start(&ctx);
    if (!engine) {
        rc = cli_fail(err_msg());
        goto done;
    }
    Server server = {&ctx, engine, m.n_params * sizeof(float) + MAX_BODY};
    struct MHD_Daemon *d = start_daemon(a->host, atoi(a->port), &server);
    if (!d) {
        serve_engine_stop(engine);
        rc = cli_fail(err_msg());
        goto done;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    bool v6 = strchr(a->host, ':') != NULL;
    printf("rlhf serve: listening on http://%s%s%s:%u (model %s)\n", v6 ? "[" : "", a->host,
           v6 ? "]" : "", info ? (unsigned)info->port : 0u, ctx.model_name);
    fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr,
            "rlhf serve: %s: stopping (the request in progress may finish within %d s; a second "
            "signal ends it now)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", SERVE_STOP_GRACE_S);
    /* the call in progress may finish within the grace period; a second signal, or the end of
     * it, abandons it: the process ends at once (its connections reset), still with status 0 */
    serve_engine_request_stop(engine); /* queued requests answered 503 */
    struct timespec tick = {0, 100 * 1000 * 1000};
    for (int waited = 0; !serve_engine_stopped(engine); waited++) {
        if (sigtimedwait(&stop, NULL, &tick) > 0 || waited >= SERVE_STOP_GRACE_S * 10) {
            fprintf(stderr, "rlhf serve: the request in progress is abandoned\n");
            fflush(stdout);
            fflush(stderr);
            _exit(CLI_EXIT_OK);
        }
    }
    serve_engine_stop(engine);
    /* the signals stay blocked to the end: a second one arriving while the daemon closes its
     * connections would otherwise end the process with 128 + signal instead of 0 */
    MHD_stop_daemon(d);
done:
    if (tpl) chat_template_free(tpl);
    chat_template_source_free(&src);
    tokenizer_free(&tok);
    model_free(&m);
    lora_free(&lora);
    return rc;
}

int cli_serve(int argc, char **argv) {
    ServeArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == -1) return CLI_EXIT_OK;
    if (pr != 0) return pr;
    /* MODEL may be a Hub id: the HF cache, or a download (as `rlhf generate --model`) */
    char *model_owned = NULL, *adapter_owned = NULL;
    const char *given = a.model; /* the name clients use: as the user wrote it */
    if (cli_resolve_dir(&a.model, "MODEL", HUB_MODEL, &model_owned) != 0 ||
        cli_resolve_dir(&a.adapter, "--adapter", HUB_ADAPTER, &adapter_owned) != 0) {
        free(model_owned);
        return cli_fail(err_msg());
    }
    if (!a.name) a.name = given;
    int rc = serve_local(&a);
    free(model_owned);
    free(adapter_owned);
    return rc;
}
