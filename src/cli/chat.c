/* rlhf chat MODEL [options]: an interactive conversation in the terminal. Each line read from
 * standard input is a user message; the whole conversation goes through the model's chat
 * template (with the generation prompt) and the reply streams to standard output as it is
 * generated, then joins the conversation. /reset forgets it, /exit (or end of input) ends. */
#include "cli/commands.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "rollout/generate.h"
#include "rollout/generation_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char chat_usage[] =
    "usage: rlhf chat MODEL [--adapter DIR] [--system TEXT] [--max-new-tokens N]\n"
    "                 [--temperature T] [--seed S] [--bf16]\n"
    "\n"
    "Reads user messages from standard input, one a line, and streams each reply. The\n"
    "conversation so far is rendered with the model's chat template (add_generation_prompt) and\n"
    "each reply is exactly `rlhf generate --seed S` on that rendered prompt: sampling settings\n"
    "are the model's generation_config.json defaults (--temperature 0: greedy). Lines /reset\n"
    "(forget the conversation) and /exit; end of input ends too.\n";

typedef struct {
    const char *model, *adapter, *system, *max_new, *temperature, *seed;
    bool bf16;
} ChatArgs;

static int parse_args(int argc, char **argv, ChatArgs *a) {
    memset(a, 0, sizeof *a);
    const CliStringOption opts[] = {{"--adapter", &a->adapter},
                                    {"--system", &a->system},
                                    {"--max-new-tokens", &a->max_new},
                                    {"--temperature", &a->temperature},
                                    {"--seed", &a->seed}};
    return cli_model_arguments(argc, argv, "chat", chat_usage, opts, sizeof opts / sizeof *opts,
                               &a->model, &a->bf16);
}

static int options_from_args(const ChatArgs *a, const GenerationDefaults *g, GenerateOptions *opt) {
    memset(opt, 0, sizeof *opt);
    opt->sampling = g->sampling;
    opt->max_new_tokens = g->max_new_tokens > 0 ? g->max_new_tokens : 128;
    opt->n_per_prompt = 1;
    opt->eos_ids = g->eos_ids;
    opt->n_eos = g->n_eos;
    if (a->max_new && cli_positive_int("--max-new-tokens", a->max_new, &opt->max_new_tokens))
        return -1;
    if (a->temperature) {
        char *end;
        errno = 0;
        double t = strtod(a->temperature, &end);
        if (errno || *end || end == a->temperature || t < 0) {
            fprintf(stderr,
                    "rlhf: error: option --temperature: expected a number >= 0, got \"%s\"\n",
                    a->temperature);
            return -1;
        }
        opt->sampling.do_sample = t > 0;
        if (t > 0) opt->sampling.temperature = (float)t;
    }
    if (a->seed) {
        char *end;
        errno = 0;
        opt->seed = strtoull(a->seed, &end, 10);
        if (errno || *end || end == a->seed) {
            fprintf(stderr, "rlhf: error: option --seed: expected an integer, got \"%s\"\n",
                    a->seed);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    const Tokenizer *tok;
    const ChatTemplate *tpl;
    const json_t *special_tokens;
    const Model *model;
} Chat;

/* One reply to the conversation: streamed, and its text (special tokens left out) returned in
 * *reply. Returns 0, or -1 with an error. */
static int reply(const Chat *c, const json_t *messages, GenerateOptions *opt, char **reply_text) {
    ChatApplyArgs args = {
        .messages = messages, .add_generation_prompt = true, .special_tokens = c->special_tokens};
    ChatRenderResult res;
    if (chat_template_apply(c->tpl, &args, &res) != 0) return -1;
    int32_t *ids;
    size_t n;
    int rc = tokenizer_encode(c->tok, res.text, res.len, false, &ids, &n);
    chat_render_result_free(&res);
    if (rc != 0) return -1;
    CliTextStream stream = {c->tok, 0};
    opt->on_token = cli_stream_token;
    opt->on_token_ctx = &stream;
    Completion out = {0};
    int len = (int)n;
    rc = generate(c->model, (const int32_t *const *)&ids, &len, 1, opt, &out);
    free(ids);
    if (rc != 0) return -1;
    size_t text_len;
    rc = tokenizer_decode(c->tok, out.ids, (size_t)out.len, true, reply_text, &text_len);
    if (rc == 0 && text_len > stream.printed) /* a held-back tail */
        fwrite(*reply_text + stream.printed, 1, text_len - stream.printed, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    completions_free(&out, 1);
    return rc;
}

static json_t *fresh_conversation(const char *system) {
    json_t *m = json_array();
    if (system)
        json_array_append_new(m, json_pack("{s:s, s:s}", "role", "system", "content", system));
    return m;
}

static int converse(const Chat *c, const ChatArgs *a, GenerateOptions *opt) {
    bool tty = isatty(STDIN_FILENO);
    if (tty) fprintf(stderr, "rlhf chat: /reset forgets the conversation, /exit ends it\n");
    json_t *messages = fresh_conversation(a->system);
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0) continue;
        if (strcmp(line, "/exit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            json_decref(messages);
            messages = fresh_conversation(a->system);
            if (tty) fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", line));
        char *text = NULL;
        if (reply(c, messages, opt, &text) != 0) {
            /* the turn is dropped; the conversation goes on without it */
            fprintf(stderr, "rlhf: error: %s\n", err_msg());
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        json_array_append_new(messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content", text));
        free(text);
    }
    free(line);
    json_decref(messages);
    return CLI_EXIT_OK;
}

static int chat_local(const ChatArgs *a) {
    Model m;
    LoraAdapter lora = {0};
    if (cli_load_model(&m, a->model, a->adapter, &lora) != 0) return cli_fail(err_msg());
    Tokenizer tok = {0};
    ChatTemplateSource src = {0};
    ChatTemplate *tpl = NULL;
    GenerationDefaults g;
    GenerateOptions opt;
    int rc;
    if ((a->bf16 && model_store_bf16(&m) != 0) || tokenizer_load(&tok, a->model) != 0 ||
        generation_defaults_load(&g, a->model, &tok, a->model) != 0 ||
        chat_template_source_load(a->model, &src) != 0) {
        rc = cli_fail(err_msg());
    } else if (options_from_args(a, &g, &opt) != 0) {
        rc = CLI_EXIT_USAGE;
    } else {
        const char *text = chat_template_source_pick(&src, false);
        if (!text || chat_template_compile(text, strlen(text), &tpl) != 0) {
            rc = cli_fail(err_msg());
        } else {
            Chat c = {&tok, tpl, src.special_tokens, &m};
            rc = converse(&c, a, &opt);
        }
    }
    if (tpl) chat_template_free(tpl);
    chat_template_source_free(&src);
    tokenizer_free(&tok);
    model_free(&m);
    lora_free(&lora);
    return rc;
}

int cli_chat(int argc, char **argv) {
    ChatArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == -1) return CLI_EXIT_OK;
    if (pr != 0) return pr;
    char *model_owned = NULL, *adapter_owned = NULL;
    int rc;
    if (cli_resolve_dir(&a.model, "MODEL", HUB_MODEL, &model_owned) != 0 ||
        cli_resolve_dir(&a.adapter, "--adapter", HUB_ADAPTER, &adapter_owned) != 0)
        rc = cli_fail(err_msg());
    else
        rc = chat_local(&a);
    free(model_owned);
    free(adapter_owned);
    return rc;
}
