/* OpenAI request bodies to generate() calls, and generate()'s results to OpenAI's response and
 * stream-chunk JSON (platform.openai.com/docs/api-reference: completions, chat, models). */
#include "cli/serve.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static int refuse(ServeError *err, int status, const char *param, const char *fmt, ...)
    RLHF_PRINTF(4, 5);

static int refuse(ServeError *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A member that is present and not null. */
static json_t *field(const json_t *body, const char *name) {
    json_t *v = json_object_get(body, name);
    return json_is_null(v) ? NULL : v;
}

static uint64_t random_u64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15u;
    return v;
}

static int number_field(const json_t *body, const char *name, double lo, double hi, double *out,
                        bool *given, ServeError *err) {
    json_t *v = field(body, name);
    *given = v != NULL;
    if (!v) return 0;
    if (!json_is_number(v)) return refuse(err, 400, name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return refuse(err, 400, name, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = d;
    return 0;
}

static int int_field(const json_t *body, const char *name, long lo, long hi, long *out, bool *given,
                     ServeError *err) {
    json_t *v = field(body, name);
    *given = v != NULL;
    if (!v) return 0;
    if (!json_is_integer(v)) return refuse(err, 400, name, "'%s' must be an integer", name);
    long x = (long)json_integer_value(v);
    if (x < lo || x > hi)
        return refuse(err, 400, name, "'%s' must be between %ld and %ld, got %ld", name, lo, hi, x);
    *out = x;
    return 0;
}

/* Fields that change the output which this server does not implement: refused by name rather
 * than ignored (their default values are accepted). */
static int refuse_unsupported(const json_t *body, ServeError *err) {
    json_t *v;
    if ((v = field(body, "echo")) && json_is_true(v))
        return refuse(err, 400, "echo", "'echo' is not supported by rlhf serve");
    if ((v = field(body, "suffix")) && !(json_is_string(v) && !*json_string_value(v)))
        return refuse(err, 400, "suffix", "'suffix' is not supported by rlhf serve");
    if ((v = field(body, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(err, 400, "best_of", "'best_of' other than 1 is not supported by rlhf serve");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++)
        if ((v = field(body, penalties[i])) && !(json_is_number(v) && json_number_value(v) == 0))
            return refuse(err, 400, penalties[i],
                          "'%s' is not supported by rlhf serve (repetition_penalty is)",
                          penalties[i]);
    if ((v = field(body, "logit_bias")) && json_object_size(v) > 0)
        return refuse(err, 400, "logit_bias", "'logit_bias' is not supported by rlhf serve");
    static const char *const tools[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++)
        if ((v = field(body, tools[i])) && json_array_size(v) > 0)
            return refuse(err, 400, tools[i], "'%s' is not supported by rlhf serve", tools[i]);
    if ((v = field(body, "response_format"))) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (!type || strcmp(type, "text") != 0)
            return refuse(err, 400, "response_format",
                          "'response_format' other than {\"type\": \"text\"} is not supported by "
                          "rlhf serve");
    }
    return 0;
}

static void add_prompt(ServeRequest *req, int32_t *ids, int n) {
    req->ids = xrealloc(req->ids, (size_t)(req->n_prompts + 1) * sizeof *req->ids);
    req->lens = xrealloc(req->lens, (size_t)(req->n_prompts + 1) * sizeof *req->lens);
    req->ids[req->n_prompts] = ids;
    req->lens[req->n_prompts++] = n;
}

static int token_prompt(const ServeContext *ctx, ServeRequest *req, const json_t *list,
                        ServeError *err) {
    size_t n = json_array_size(list);
    int32_t *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(list, i);
        json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 0 || v >= ctx->model->cfg.vocab_size) {
            free(ids);
            return refuse(err, 400, "prompt",
                          "token %zu of a prompt is not an id in [0, %" PRId64 ")", i,
                          (int64_t)ctx->model->cfg.vocab_size);
        }
        ids[i] = (int32_t)v;
    }
    add_prompt(req, ids, (int)n);
    return 0;
}

static int text_prompt(const ServeContext *ctx, ServeRequest *req, const char *text, size_t len,
                       bool add_special, ServeError *err) {
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(ctx->tok, text, len, add_special, &ids, &n) != 0)
        return refuse(err, 400, "prompt", "%s", err_msg());
    add_prompt(req, ids, (int)n);
    return 0;
}

/* prompt: a string, a list of strings, a list of token ids, or a list of such lists. */
static int completion_prompts(const ServeContext *ctx, const json_t *body, ServeRequest *req,
                              ServeError *err) {
    json_t *p = field(body, "prompt");
    if (!p) return refuse(err, 400, "prompt", "'prompt' is a required property");
    if (json_is_string(p))
        return text_prompt(ctx, req, json_string_value(p), json_string_length(p), true, err);
    if (!json_is_array(p) || json_array_size(p) == 0)
        return refuse(err, 400, "prompt",
                      "'prompt' must be a string, a list of strings, or token ids (a list of "
                      "integers or of lists of integers)");
    if (json_is_integer(json_array_get(p, 0))) return token_prompt(ctx, req, p, err);
    size_t i;
    json_t *item;
    json_array_foreach(p, i, item) {
        int rc;
        if (json_is_string(item))
            rc =
                text_prompt(ctx, req, json_string_value(item), json_string_length(item), true, err);
        else if (json_is_array(item))
            rc = token_prompt(ctx, req, item, err);
        else
            rc = refuse(err, 400, "prompt", "'prompt' item %zu must be a string or a list of ids",
                        i);
        if (rc) return rc;
    }
    return 0;
}

/* The messages as the template reads them: a content given as parts [{type: text, text}] is
 * joined into one string (the form transformers' templates expect). */
static json_t *template_messages(const json_t *messages, ServeError *err) {
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        refuse(err, 400, "messages", "'messages' must be a non-empty list of messages");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (!json_is_object(m) || !role) {
            refuse(err, 400, "messages", "messages[%zu] must be an object with a string 'role'", i);
            json_decref(out);
            return NULL;
        }
        json_t *copy = json_deep_copy(m);
        if (json_is_array(content)) {
            size_t k, total = 0;
            json_t *part;
            char *joined = xstrdup("");
            json_array_foreach(content, k, part) {
                const char *type = json_string_value(json_object_get(part, "type"));
                const char *text = json_string_value(json_object_get(part, "text"));
                if (!type || strcmp(type, "text") != 0 || !text) {
                    refuse(err, 400, "messages",
                           "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                           "parts are supported",
                           i, k);
                    free(joined);
                    json_decref(copy);
                    json_decref(out);
                    return NULL;
                }
                size_t n = strlen(text);
                joined = xrealloc(joined, total + n + 1);
                memcpy(joined + total, text, n + 1);
                total += n;
            }
            json_object_set_new(copy, "content", json_stringn(joined, total));
            free(joined);
        } else if (content && !json_is_string(content) && !json_is_null(content)) {
            refuse(err, 400, "messages",
                   "messages[%zu].content must be a string or a list of parts", i);
            json_decref(copy);
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, copy);
    }
    return out;
}

/* One conversation through the chat template (the generation prompt added) as a prompt. */
static int conversation_prompt(const ServeContext *ctx, const json_t *conversation,
                               ServeRequest *req, ServeError *err) {
    if (!ctx->chat)
        return refuse(err, 400, "messages",
                      "this model has no chat template (use /v1/completions with a prompt)");
    json_t *messages = template_messages(conversation, err);
    if (!messages) return -1;
    ChatApplyArgs args = {
        .messages = messages, .add_generation_prompt = true, .special_tokens = ctx->special_tokens};
    ChatRenderResult res;
    int rc = chat_template_apply(ctx->chat, &args, &res);
    json_decref(messages);
    if (rc != 0) return refuse(err, 400, "messages", "%s", err_msg());
    rc = text_prompt(ctx, req, res.text, res.len, false, err);
    chat_render_result_free(&res);
    return rc;
}

static int chat_prompt(const ServeContext *ctx, const json_t *body, ServeRequest *req,
                       ServeError *err) {
    return conversation_prompt(ctx, field(body, "messages"), req, err);
}

static int stop_field(const json_t *body, ServeRequest *req, ServeError *err) {
    json_t *s = field(body, "stop");
    if (!s) return 0;
    if (json_is_string(s)) {
        if (!*json_string_value(s)) return 0;
        req->stop[req->n_stop++] = xstrdup(json_string_value(s));
        return 0;
    }
    if (!json_is_array(s) || json_array_size(s) > SERVE_MAX_STOP)
        return refuse(err, 400, "stop", "'stop' must be a string or a list of up to %d strings",
                      SERVE_MAX_STOP);
    size_t i;
    json_t *item;
    json_array_foreach(s, i, item) {
        if (!json_is_string(item))
            return refuse(err, 400, "stop", "'stop' must be a string or a list of up to %d strings",
                          SERVE_MAX_STOP);
        if (*json_string_value(item)) req->stop[req->n_stop++] = xstrdup(json_string_value(item));
    }
    return 0;
}

/* Sampling over the model's generation_config.json defaults, as `rlhf generate`'s options. */
static int sampling_fields(const ServeContext *ctx, const json_t *body, ServeRequest *req,
                           ServeError *err) {
    GenerateOptions *opt = &req->opt;
    opt->sampling = ctx->defaults.sampling;
    double d;
    long x;
    bool given;
    if (number_field(body, "temperature", 0, 100, &d, &given, err)) return -1;
    if (given) {
        opt->sampling.do_sample = d > 0;
        if (d > 0) opt->sampling.temperature = (float)d;
    }
    if (number_field(body, "top_p", 0, 1, &d, &given, err)) return -1;
    if (given) opt->sampling.top_p = (float)d;
    if (number_field(body, "min_p", 0, 1, &d, &given, err)) return -1;
    if (given) opt->sampling.min_p = (float)d;
    if (number_field(body, "repetition_penalty", 0, 1e6, &d, &given, err)) return -1;
    if (given) opt->sampling.repetition_penalty = (float)d;
    if (int_field(body, "top_k", -1, 1L << 30, &x, &given, err)) return -1;
    if (given) opt->sampling.top_k = x < 0 ? 0 : (int)x; /* -1 (vLLM) or 0: no top-k */
    if (sampling_params_check(&opt->sampling) != 0) return refuse(err, 400, NULL, "%s", err_msg());
    if (int_field(body, "n", 1, 128, &x, &given, err)) return -1;
    opt->n_per_prompt = given ? (int)x : 1;
    json_t *seed = field(body, "seed");
    if (seed && !json_is_integer(seed))
        return refuse(err, 400, "seed", "'seed' must be an integer");
    opt->seed = seed ? (uint64_t)json_integer_value(seed) : random_u64();
    opt->eos_ids = ctx->defaults.eos_ids;
    opt->n_eos = ctx->defaults.n_eos;
    return 0;
}

/* The field a prompt came from, for errors. */
static const char *kind_field(const ServeRequest *req) {
    return req->kind == SERVE_CHAT || req->kind == SERVE_TRL_CHAT ? "messages"
           : req->kind == SERVE_TRL_GENERATE                      ? "prompts"
                                                                  : "prompt";
}

/* max_tokens (chat: max_completion_tokens too) against the context: vLLM's rule, the prompt and
 * the completion must fit in max_position_embeddings; absent, whatever room is left. */
static int length_fields(const ServeContext *ctx, const json_t *body, ServeRequest *req,
                         ServeError *err) {
    long max_tokens = 0;
    bool given;
    const char *name = "max_tokens";
    if (int_field(body, name, 1, 1L << 30, &max_tokens, &given, err)) return -1;
    if (!given && req->kind == SERVE_CHAT) {
        name = "max_completion_tokens";
        if (int_field(body, name, 1, 1L << 30, &max_tokens, &given, err)) return -1;
    }
    int longest = 0;
    for (int i = 0; i < req->n_prompts; i++) {
        if (req->lens[i] == 0)
            return refuse(err, 400, "prompt", "prompt %d is empty (no tokens)", i);
        if (req->lens[i] > longest) longest = req->lens[i];
        /* a tokenizer may know ids the model has no row for: refused here, before the request
         * can share (and fail) a generate() call with others */
        for (int t = 0; t < req->lens[i]; t++)
            if (req->ids[i][t] < 0 || req->ids[i][t] >= ctx->model->cfg.vocab_size)
                return refuse(err, 400, kind_field(req),
                              "prompt %d: token id %d is outside the "
                              "model's vocabulary (%d)",
                              i, req->ids[i][t], ctx->model->cfg.vocab_size);
    }
    if (!given) max_tokens = ctx->context - longest;
    if (longest + max_tokens > ctx->context || max_tokens < 1)
        return refuse(err, 400, given ? name : "messages",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%ld tokens (%d in the prompt, %ld in the completion). Please reduce the "
                      "length of the prompt or completion.",
                      ctx->context, longest + (given ? max_tokens : 1), longest,
                      given ? max_tokens : 1);
    req->opt.max_new_tokens = (int)max_tokens;
    return 0;
}

static int stream_fields(const json_t *body, ServeRequest *req, ServeError *err) {
    json_t *v = field(body, "stream");
    if (v && !json_is_boolean(v)) return refuse(err, 400, "stream", "'stream' must be a boolean");
    req->stream = json_is_true(v);
    json_t *so = field(body, "stream_options");
    if (so) {
        if (!req->stream)
            return refuse(err, 400, "stream_options",
                          "'stream_options' is only allowed when 'stream' is true");
        req->include_usage = json_is_true(json_object_get(so, "include_usage"));
    }
    long top = 0;
    bool given;
    if (req->kind == SERVE_COMPLETIONS) {
        if (int_field(body, "logprobs", 0, SERVE_MAX_LOGPROBS, &top, &given, err)) return -1;
        req->logprobs = given;
    } else {
        v = field(body, "logprobs");
        if (v && !json_is_boolean(v))
            return refuse(err, 400, "logprobs", "'logprobs' must be a boolean");
        req->logprobs = json_is_true(v);
        if (int_field(body, "top_logprobs", 0, SERVE_MAX_LOGPROBS, &top, &given, err)) return -1;
        if (given && !req->logprobs)
            return refuse(err, 400, "top_logprobs",
                          "when using 'top_logprobs', 'logprobs' must be set to true");
    }
    req->opt.top_logprobs = (int)top;
    /* vLLM's OpenAI server: log-probs of the raw logits (logprobs_mode "raw_logprobs"), at most
     * max_logprobs (20) alternatives per token; without logprobs nothing is computed */
    req->opt.raw_logprobs = req->logprobs;
    return 0;
}

/* ---- TRL's vLLM server protocol (trl/scripts/vllm_serve.py of TRL 1.9) ---- */

/* Fields of TRL's requests this server cannot honour, refused by name when they ask for
 * something (null, empty and all-null values are what VLLMClient sends by default). */
static int trl_unsupported(const json_t *body, ServeError *err) {
    json_t *v = field(body, "images");
    if (v) {
        size_t i;
        json_t *item;
        if (!json_is_array(v)) return refuse(err, 400, "images", "'images' must be a list or null");
        json_array_foreach(v, i, item) if (!json_is_null(item)) return refuse(
            err, 400, "images",
            "'images' is not supported by rlhf serve (text models only): send null");
    }
    static const char *const regex[] = {"structured_outputs_regex", "guided_decoding_regex"};
    for (int i = 0; i < 2; i++)
        if (field(body, regex[i]))
            return refuse(err, 400, regex[i],
                          "'%s' (structured outputs / guided decoding) is not supported by rlhf "
                          "serve: send null",
                          regex[i]);
    if ((v = field(body, "chat_template_kwargs")) && json_object_size(v) > 0)
        return refuse(err, 400, "chat_template_kwargs",
                      "'chat_template_kwargs' is not supported by rlhf serve: send {}");
    if ((v = field(body, "tools")) && json_array_size(v) > 0)
        return refuse(err, 400, "tools", "'tools' is not supported by rlhf serve");
    return 0;
}

/* The request's sampling fields with generation_kwargs laid over them (TRL: "keys that conflict
 * with the other parameters override them") and TRL's defaults where neither gives one (its
 * GenerateRequest: temperature 1, top_p 1, top_k -1, min_p 0, repetition_penalty 1,
 * max_tokens 16, n 1; not generation_config.json's, which vLLM's SamplingParams never reads).
 * A generation_kwargs key other than these (and seed, truncate_prompt_tokens, stop_token_ids,
 * ignore_eos, first_stream) is refused.
 * Returns a new object, or NULL with *err. */
static json_t *trl_sampling(const json_t *body, ServeError *err) {
    static const char *const keys[] = {
        "n",          "repetition_penalty", "temperature",           "top_p", "top_k", "min_p",
        "max_tokens", "logprobs",           "truncate_prompt_tokens"};
    const size_t n_keys = sizeof keys / sizeof *keys;
    json_t *out = json_object();
    for (size_t i = 0; i < n_keys; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (v) json_object_set(out, keys[i], v);
    }
    json_t *kwargs = field(body, "generation_kwargs");
    if (kwargs && !json_is_object(kwargs)) {
        json_decref(out);
        refuse(err, 400, "generation_kwargs", "'generation_kwargs' must be an object");
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(kwargs, key, v) {
        bool known = !strcmp(key, "seed") || !strcmp(key, "stop_token_ids") ||
                     !strcmp(key, "ignore_eos") || !strcmp(key, "first_stream");
        for (size_t i = 0; i < n_keys && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known) {
            json_decref(out);
            refuse(err, 400, "generation_kwargs",
                   "generation_kwargs['%.100s'] is not supported by rlhf serve (supported: n, "
                   "temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, logprobs, "
                   "seed, truncate_prompt_tokens, stop_token_ids, ignore_eos, first_stream)",
                   key);
            return NULL;
        }
        json_object_set(out, key, v);
    }
    static const struct {
        const char *key;
        double value;
        bool integer;
    } defaults[] = {{"temperature", 1, false},
                    {"top_p", 1, false},
                    {"top_k", -1, true},
                    {"min_p", 0, false},
                    {"repetition_penalty", 1, false},
                    {"max_tokens", 16, true},
                    {"n", 1, true}};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
        if (json_is_null(json_object_get(out, defaults[i].key)) ||
            !json_object_get(out, defaults[i].key))
            json_object_set_new(out, defaults[i].key,
                                defaults[i].integer ? json_integer((json_int_t)defaults[i].value)
                                                    : json_real(defaults[i].value));
    return out;
}

/* prompts: a list of strings (tokenised with the tokenizer's special tokens, as vLLM's
 * LLM.generate does) or a list of token-id lists; messages: a list of conversations. */
static int trl_prompts(const ServeContext *ctx, const json_t *body, ServeRequest *req,
                       ServeError *err) {
    bool chat = req->kind == SERVE_TRL_CHAT;
    const char *name = chat ? "messages" : "prompts";
    json_t *list = field(body, name);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return refuse(err, 400, name,
                      chat ? "'messages' must be a non-empty list of conversations (lists of "
                             "messages)"
                           : "'prompts' must be a non-empty list of strings or of token-id lists");
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item) {
        int rc;
        if (chat)
            rc = conversation_prompt(ctx, item, req, err);
        else if (json_is_string(item))
            rc =
                text_prompt(ctx, req, json_string_value(item), json_string_length(item), true, err);
        else if (json_is_array(item))
            rc = token_prompt(ctx, req, item, err);
        else
            rc = refuse(err, 400, "prompts", "prompts[%zu] must be a string or a list of token ids",
                        i);
        if (rc) return rc;
    }
    return 0;
}

/* truncate_prompt_tokens k (vLLM): each prompt keeps its last k tokens. */
static int trl_truncate(const json_t *sampling, ServeRequest *req, ServeError *err) {
    long k;
    bool given;
    if (int_field(sampling, "truncate_prompt_tokens", 1, 1L << 30, &k, &given, err)) return -1;
    for (int i = 0; given && i < req->n_prompts; i++)
        if (req->lens[i] > k) {
            memmove(req->ids[i], req->ids[i] + (req->lens[i] - k), (size_t)k * sizeof(int32_t));
            req->lens[i] = (int)k;
        }
    return 0;
}

/* logprobs: null (none returned), 0 (the sampled token's) or N (the N most likely too, at most
 * vLLM's max_logprobs), of the processed distribution, as TRL starts vLLM
 * (logprobs_mode="processed_logprobs"). */
static int trl_logprobs(const json_t *sampling, ServeRequest *req, ServeError *err) {
    long lp;
    bool given;
    if (int_field(sampling, "logprobs", 0, SERVE_MAX_LOGPROBS, &lp, &given, err)) return -1;
    req->logprobs = given;
    req->opt.top_logprobs = given ? (int)lp : 0;
    req->opt.raw_logprobs = false;
    return 0;
}

/* vLLM's SamplingParams stop_token_ids (ids that end a completion, kept in it) and ignore_eos
 * (the model's eos ids no longer do): the completion ends where the client's tokenizer says, e.g.
 * `rlhf train` with vllm_mode: server, which stops at its tokenizer's EOS alone. */
static int trl_stop_ids(const json_t *sampling, ServeRequest *req, ServeError *err) {
    const json_t *ids = json_object_get(sampling, "stop_token_ids");
    const json_t *ignore = json_object_get(sampling, "ignore_eos");
    if (ignore && !json_is_null(ignore) && !json_is_boolean(ignore))
        return refuse(err, 400, "ignore_eos", "'ignore_eos' must be true or false");
    int n = json_is_true(ignore) ? 0 : req->opt.n_eos;
    if (n > 0) memcpy(req->eos_buf, req->opt.eos_ids, (size_t)n * sizeof *req->eos_buf);
    if (ids && !json_is_null(ids) && !json_is_array(ids))
        return refuse(err, 400, "stop_token_ids", "'stop_token_ids' must be a list of token ids");
    size_t i;
    const json_t *id;
    json_array_foreach(ids, i, id) {
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > INT32_MAX ||
            n >= (int)(sizeof req->eos_buf / sizeof *req->eos_buf))
            return refuse(err, 400, "stop_token_ids",
                          "'stop_token_ids' must be a list of token ids (with the eos ids kept, "
                          "at most %zu)",
                          sizeof req->eos_buf / sizeof *req->eos_buf);
        req->eos_buf[n++] = (int32_t)json_integer_value(id);
    }
    req->opt.eos_ids = req->eos_buf;
    req->opt.n_eos = n;
    return 0;
}

/* first_stream F (rlhf.c's own, which vLLM has not): completion k of the request draws from
 * stream F + k of its seed instead of k, as the in-process engine's completion F + k of a
 * batch does. What `rlhf train` sends when it asks for part of a batch (a rollout function's
 * second generate() call of a generation batch), so the server draws what colocated
 * generation would. */
static int trl_first_stream(const json_t *sampling, ServeRequest *req, ServeError *err) {
    long first;
    bool given;
    if (int_field(sampling, "first_stream", 0, 1L << 40, &first, &given, err)) return -1;
    req->opt.first_stream = given ? (uint64_t)first : 0;
    return 0;
}

static int trl_parse(const ServeContext *ctx, const json_t *root, ServeRequest *req,
                     ServeError *err) {
    if (trl_unsupported(root, err)) return -1;
    json_t *sampling = trl_sampling(root, err);
    if (!sampling) return -1;
    int rc = trl_prompts(ctx, root, req, err);
    if (rc == 0) rc = trl_truncate(sampling, req, err);
    if (rc == 0) rc = sampling_fields(ctx, sampling, req, err);
    if (rc == 0) rc = trl_stop_ids(sampling, req, err);
    if (rc == 0) rc = length_fields(ctx, sampling, req, err);
    if (rc == 0) rc = trl_logprobs(sampling, req, err);
    if (rc == 0) rc = trl_first_stream(sampling, req, err);
    json_decref(sampling);
    return rc;
}

/* TRL's GenerateResponse / ChatResponse: prompt_ids per prompt, completion_ids per completion
 * (n per prompt, in order; the eos token that ended one included, as vLLM's token_ids), and with
 * logprobs N each token's list of log-probabilities by rank (trl extract_logprobs): the N most
 * likely ids that the processed distribution keeps, most likely first, then the sampled token
 * when it is not among them (so N + 1 at most, and just the sampled token's for N = 0);
 * logprob_token_ids the same shape. With logprobs null both are null. */
static char *trl_response_json(const ServeRequest *req, const Completion *out) {
    json_t *prompt_ids = json_array(), *completion_ids = json_array();
    json_t *logprobs = req->logprobs ? json_array() : json_null();
    json_t *logprob_ids = req->logprobs ? json_array() : json_null();
    for (int p = 0; p < req->n_prompts; p++) {
        json_t *ids = json_array();
        for (int t = 0; t < req->lens[p]; t++)
            json_array_append_new(ids, json_integer(req->ids[p][t]));
        json_array_append_new(prompt_ids, ids);
    }
    for (int j = 0; j < req->n_prompts * req->opt.n_per_prompt; j++) {
        const Completion *c = &out[j];
        json_t *ids = json_array(), *lps = json_array(), *lp_ids = json_array();
        for (int t = 0; t < c->len; t++) {
            json_array_append_new(ids, json_integer(c->ids[t]));
            json_t *step = json_array(), *step_ids = json_array();
            bool sampled_in = false;
            for (int k = 0; k < c->n_top; k++) {
                int32_t id = c->top_ids[(size_t)t * c->n_top + k];
                float lp = c->top_logprobs[(size_t)t * c->n_top + k];
                if (!isfinite(lp)) break; /* masked: never drawn, and no JSON number */
                json_array_append_new(step, json_real(lp));
                json_array_append_new(step_ids, json_integer(id));
                sampled_in |= id == c->ids[t];
            }
            if (!sampled_in) {
                double lp = c->logprobs ? (double)c->logprobs[t] : NAN;
                json_array_append_new(step, isfinite(lp) ? json_real(lp) : json_null());
                json_array_append_new(step_ids, json_integer(c->ids[t]));
            }
            json_array_append_new(lps, step);
            json_array_append_new(lp_ids, step_ids);
        }
        json_array_append_new(completion_ids, ids);
        if (req->logprobs) {
            json_array_append_new(logprobs, lps);
            json_array_append_new(logprob_ids, lp_ids);
        } else {
            json_decref(lps);
            json_decref(lp_ids);
        }
    }
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "prompt_ids", prompt_ids, "completion_ids",
                          completion_ids, "logprobs", logprobs, "logprob_token_ids", logprob_ids);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

int serve_request_parse(const ServeContext *ctx, ServeKind kind, const char *body, size_t len,
                        ServeRequest *req, ServeError *err) {
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    req->kind = kind;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return refuse(err, 400, NULL,
                      "We could not parse the JSON body of your request: %s (line %d, column %d). "
                      "The request body must be a JSON object.",
                      root ? "not an object" : jerr.text, jerr.line, jerr.column);
    }
    bool trl = kind == SERVE_TRL_GENERATE || kind == SERVE_TRL_CHAT;
    json_t *model = field(root, "model");
    int rc = 0;
    if (trl)
        rc = trl_parse(ctx, root, req, err);
    else if (!json_is_string(model))
        rc = refuse(err, 400, "model", "'model' is a required property (a string)");
    else if (strcmp(json_string_value(model), ctx->model_name) != 0)
        rc = refuse(err, 404, "model", "The model `%s` does not exist (this server has `%s`).",
                    json_string_value(model), ctx->model_name);
    if (rc == 0 && !trl) {
        rc = refuse_unsupported(root, err);
        if (rc == 0)
            rc = kind == SERVE_CHAT ? chat_prompt(ctx, root, req, err)
                                    : completion_prompts(ctx, root, req, err);
        if (rc == 0) rc = sampling_fields(ctx, root, req, err);
        if (rc == 0) rc = length_fields(ctx, root, req, err);
        if (rc == 0) rc = stop_field(root, req, err);
        if (rc == 0) rc = stream_fields(root, req, err);
    }
    json_decref(root);
    if (rc != 0) {
        serve_request_free(req);
        return -1;
    }
    uint64_t a = random_u64(), b = random_u64();
    snprintf(req->id, sizeof req->id, "%s-%016" PRIx64 "%08" PRIx64,
             kind == SERVE_CHAT ? "chatcmpl" : "cmpl", a, b >> 32);
    req->created = (long)time(NULL);
    return 0;
}

void serve_request_free(ServeRequest *req) {
    for (int i = 0; i < req->n_prompts; i++)
        free(req->ids[i]);
    free(req->ids);
    free(req->lens);
    for (int i = 0; i < req->n_stop; i++)
        free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

char *serve_error_json(const ServeError *err) {
    bool bad_model = err->status == 404 && strcmp(err->param, "model") == 0;
    const char *type = err->status >= 500 ? "server_error" : "invalid_request_error";
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type",
                          type, "param", *err->param ? json_string(err->param) : json_null(),
                          "code", bad_model ? json_string("model_not_found") : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Text as a JSON string; bytes that are not UTF-8 (which a decode never gives) become "". */
static json_t *text_json(const char *text, size_t n) {
    json_t *s = json_stringn(text, n);
    return s ? s : json_string("");
}

int serve_finish(const ServeContext *ctx, const ServeRequest *req, const Completion *c, char **text,
                 size_t *text_len, int *tokens, bool *stopped) {
    if (tokenizer_decode(ctx->tok, c->ids, (size_t)c->len, true, text, text_len) != 0) return -1;
    *tokens = c->len;
    *stopped = false;
    for (int e = 0; e < req->opt.n_eos && c->len; e++)
        *stopped |= c->ids[c->len - 1] == req->opt.eos_ids[e];
    if (req->n_stop == 0) return 0;
    bool hit;
    size_t cut = serve_stream_safe_len(req, *text, *text_len, &hit);
    if (!hit) return 0;
    /* the token that completed the stop string: the shortest prefix whose text holds it */
    for (int t = 1; t <= c->len; t++) {
        char *part;
        size_t n;
        if (tokenizer_decode(ctx->tok, c->ids, (size_t)t, true, &part, &n) != 0) {
            free(*text);
            return -1;
        }
        bool found;
        serve_stream_safe_len(req, part, n, &found);
        free(part);
        if (found) {
            *tokens = t;
            break;
        }
    }
    *text_len = cut;
    (*text)[cut] = '\0';
    *stopped = true;
    return 0;
}

size_t serve_stream_safe_len(const ServeRequest *req, const char *text, size_t n, bool *hit) {
    *hit = false;
    size_t first = n;
    for (int s = 0; s < req->n_stop; s++) {
        const char *at = memmem(text, n, req->stop[s], strlen(req->stop[s]));
        if (at && (size_t)(at - text) < first) {
            first = (size_t)(at - text);
            *hit = true;
        }
    }
    if (*hit) return first;
    size_t safe = n;
    while (safe >= 3 && memcmp(text + safe - 3, "\xEF\xBF\xBD", 3) == 0)
        safe -= 3;
    /* a tail that is the start of a stop string may still become one */
    size_t limit = safe;
    for (int s = 0; s < req->n_stop; s++) {
        size_t m = strlen(req->stop[s]);
        for (size_t k = m - 1 < safe ? m - 1 : safe; k >= 1; k--) {
            if (memcmp(text + safe - k, req->stop[s], k) == 0) {
                if (safe - k < limit) limit = safe - k;
                break;
            }
        }
    }
    return limit;
}

/* One token's text (its decode alone, special tokens kept) as OpenAI shows it. */
static char *token_text(const ServeContext *ctx, int32_t id, size_t *n) {
    char *piece;
    if (tokenizer_decode(ctx->tok, &id, 1, false, &piece, n) != 0) {
        err_clear();
        *n = 0;
        return xstrdup("");
    }
    return piece;
}

/* A log-probability as JSON: -inf (an id the processed distribution masked) has no JSON number;
 * vLLM's OpenAI server writes -9999.0 for it, and so does this one. */
static json_t *logprob_value(double lp) {
    return json_real(isfinite(lp) ? lp : -9999.0);
}

/* Chat's {"token", "logprob", "bytes"} of one id. */
static json_t *chat_entry(const ServeContext *ctx, int32_t id, double lp) {
    size_t n;
    char *piece = token_text(ctx, id, &n);
    json_t *bytes = json_array();
    for (size_t b = 0; b < n; b++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[b]));
    json_t *o = json_pack("{s:o, s:o, s:o}", "token", text_json(piece, n), "logprob",
                          logprob_value(lp), "bytes", bytes);
    free(piece);
    return o;
}

/* Characters (code points, as Python's len counts them) in n bytes of UTF-8. */
static long utf8_chars(const char *s, size_t n) {
    long k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

json_t *serve_logprobs_json(const ServeContext *ctx, const ServeRequest *req, const Completion *c,
                            int from, int to, long *offset) {
    json_t *toks = json_array(), *lps = json_array(), *offsets = json_array(), *tops = json_array(),
           *content = json_array();
    bool chat = req->kind == SERVE_CHAT;
    int n_top = c->n_top;
    for (int t = from; t < to; t++) {
        size_t n;
        char *piece = token_text(ctx, c->ids[t], &n);
        const int32_t *ids = n_top ? c->top_ids + (size_t)t * n_top : NULL;
        const float *top = n_top ? c->top_logprobs + (size_t)t * n_top : NULL;
        if (chat) {
            json_t *entry = chat_entry(ctx, c->ids[t], c->logprobs[t]);
            json_t *alternatives = json_array();
            for (int k = 0; k < n_top; k++)
                json_array_append_new(alternatives, chat_entry(ctx, ids[k], top[k]));
            json_object_set_new(entry, "top_logprobs", alternatives);
            json_array_append_new(content, entry);
        } else {
            json_array_append_new(toks, text_json(piece, n));
            json_array_append_new(lps, logprob_value(c->logprobs[t]));
            json_array_append_new(offsets, json_integer((json_int_t)*offset));
            /* vLLM's legacy top_logprobs: {token: logprob} of the N most likely, most likely
             * first, and the sampled token's when it is not among them; null when N is 0 */
            if (n_top > 0) {
                json_t *d = json_object();
                bool sampled_in = false;
                for (int k = 0; k < n_top; k++) {
                    size_t m;
                    char *alt = token_text(ctx, ids[k], &m);
                    json_t *key = text_json(alt, m);
                    if (!json_object_get(d, json_string_value(key)))
                        json_object_set_new(d, json_string_value(key), logprob_value(top[k]));
                    json_decref(key);
                    free(alt);
                    sampled_in |= ids[k] == c->ids[t];
                }
                json_t *key = text_json(piece, n);
                if (!sampled_in && !json_object_get(d, json_string_value(key)))
                    json_object_set_new(d, json_string_value(key), logprob_value(c->logprobs[t]));
                json_decref(key);
                json_array_append_new(tops, d);
            }
        }
        *offset += utf8_chars(piece, n);
        free(piece);
    }
    if (chat) {
        json_decref(toks);
        json_decref(lps);
        json_decref(offsets);
        json_decref(tops);
        return json_pack("{s:o, s:n}", "content", content, "refusal");
    }
    json_decref(content);
    if (n_top == 0) { /* logprobs 0: no alternatives asked for */
        json_decref(tops);
        tops = json_null();
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offsets);
}

static json_t *usage_json(long prompt, long completion) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion));
}

static json_t *envelope(const ServeContext *ctx, const ServeRequest *req, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s, s:n}", "id", req->id, "object", object, "created",
                     (json_int_t)req->created, "model", ctx->model_name, "system_fingerprint");
}

char *serve_response_json(const ServeContext *ctx, const ServeRequest *req, const Completion *out) {
    if (req->kind == SERVE_TRL_GENERATE || req->kind == SERVE_TRL_CHAT)
        return trl_response_json(req, out);
    bool chat = req->kind == SERVE_CHAT;
    json_t *resp = envelope(ctx, req, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    long prompt_tokens = 0, completion_tokens = 0;
    int per = req->opt.n_per_prompt;
    for (int i = 0; i < req->n_prompts; i++)
        prompt_tokens += req->lens[i];
    for (int j = 0; j < req->n_prompts * per; j++) {
        char *text;
        size_t n;
        int tokens;
        bool stopped;
        if (serve_finish(ctx, req, &out[j], &text, &n, &tokens, &stopped) != 0) {
            json_decref(choices);
            json_decref(resp);
            return NULL;
        }
        completion_tokens += tokens;
        long offset = 0;
        json_t *lp = req->logprobs ? serve_logprobs_json(ctx, req, &out[j], 0, tokens, &offset)
                                   : json_null();
        const char *reason = stopped ? "stop" : "length";
        json_t *choice =
            chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", j, "message", "role",
                             "assistant", "content", text_json(text, n), "logprobs", lp,
                             "finish_reason", reason)
                 : json_pack("{s:i, s:o, s:o, s:s}", "index", j, "text", text_json(text, n),
                             "logprobs", lp, "finish_reason", reason);
        json_array_append_new(choices, choice);
        free(text);
    }
    json_object_set_new(resp, "choices", choices);
    json_object_set_new(resp, "usage", usage_json(prompt_tokens, completion_tokens));
    char *s = json_dumps(resp, JSON_COMPACT);
    json_decref(resp);
    return s;
}

char *serve_models_json(const ServeContext *ctx) {
    json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                          ctx->model_name, "object", "model", "created", (json_int_t)time(NULL),
                          "owned_by", "rlhf");
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static char *event(json_t *chunk) {
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    size_t n = strlen(s);
    char *ev = xmalloc(n + 9);
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, s, n);
    memcpy(ev + 6 + n, "\n\n", 3);
    free(s);
    return ev;
}

char *serve_chunk_event(const ServeContext *ctx, const ServeRequest *req, int index,
                        const char *delta, size_t delta_len, json_t *logprobs,
                        const char *finish_reason, bool first) {
    if (!logprobs) logprobs = json_null();
    bool chat = req->kind == SERVE_CHAT;
    json_t *chunk = envelope(ctx, req, chat ? "chat.completion.chunk" : "text_completion");
    json_t *reason = finish_reason ? json_string(finish_reason) : json_null();
    json_t *choice;
    if (chat) {
        json_t *d = json_object();
        if (first) json_object_set_new(d, "role", json_string("assistant"));
        if (delta || first)
            json_object_set_new(d, "content", text_json(delta ? delta : "", delta_len));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", d, "logprobs", logprobs,
                           "finish_reason", reason);
    } else {
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "text",
                           text_json(delta ? delta : "", delta ? delta_len : 0), "logprobs",
                           logprobs, "finish_reason", reason);
    }
    json_object_set_new(chunk, "choices", json_pack("[o]", choice));
    if (req->include_usage) json_object_set_new(chunk, "usage", json_null());
    return event(chunk);
}

char *serve_usage_event(const ServeContext *ctx, const ServeRequest *req, long prompt_tokens,
                        long completion_tokens) {
    json_t *chunk =
        envelope(ctx, req, req->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(chunk, "choices", json_array());
    json_object_set_new(chunk, "usage", usage_json(prompt_tokens, completion_tokens));
    return event(chunk);
}
