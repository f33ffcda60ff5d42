/* rlhf generate --model DIR (--prompt STR | --prompts FILE.jsonl) [options]
 * One prompt: the text streams to standard output. A file: one JSON line per prompt. */
#include "cli/commands.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "rollout/generate.h"
#include "rollout/generation_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char generate_usage[] =
    "usage: rlhf generate --model DIR (--prompt STR | --prompts FILE.jsonl) [--chat] [--n N]\n"
    "                     [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K]\n"
    "                     [--min-p P] [--repetition-penalty R] [--seed S] [--batch-size N]\n"
    "                     [--tokenizer DIR] [--adapter DIR] [--out FILE] [--bf16]\n"
    "\n"
    "Generates with the model's generation_config.json defaults (transformers' when absent),\n"
    "changed by the options; --temperature 0 is greedy, a positive one samples. --chat applies\n"
    "the chat template (with the generation prompt) to the prompt as a user message. In a\n"
    "prompts file each line is {\"prompt\": \"...\"} or {\"messages\": [...]} (chat template).\n"
    "One --prompt streams its text; a file gives one JSON line per prompt:\n"
    "{\"prompt\", \"completions\": [{\"text\", \"token_ids\", \"logprobs\", "
    "\"finish_reason\"}]}.\n"
    "--adapter applies a PEFT LoRA adapter directory (adapter_config.json +\n"
    "adapter_model.safetensors) to the model without merging it.\n"
    "--bf16 keeps the model's weights in bf16 (rounded to nearest even): half the memory and\n"
    "half the bytes read per decoded token; the arithmetic stays fp32, except that on a CPU\n"
    "with bf16 dot products (AVX512_BF16) 6 or more sequences decoding together, and prompts\n"
    "of 64 tokens or more being prefilled, multiply bf16-rounded inputs by the weights,\n"
    "summing in fp32; with AMX tiles every product of 6 rows or more does, on the tiles\n"
    "(RLHF_GEMM_BF16=sgemm keeps the dot products).\n";

typedef struct {
    const char *model, *tokenizer, *prompt, *prompts, *out, *adapter;
    const char *n, *max_new, *temperature, *top_p, *top_k, *min_p, *rep, *seed, *batch;
    bool chat, bf16;
} GenerateArgs;

static int parse_float(const char *name, const char *text, float *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || end == text) {
        fprintf(stderr, "rlhf: error: option %s: expected a number, got \"%s\"\n", name, text);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_args(int argc, char **argv, GenerateArgs *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const CliStringOption opts[] = {{"--model", &a->model},
                                        {"--tokenizer", &a->tokenizer},
                                        {"--prompt", &a->prompt},
                                        {"--prompts", &a->prompts},
                                        {"--out", &a->out},
                                        {"--adapter", &a->adapter},
                                        {"--n", &a->n},
                                        {"--max-new-tokens", &a->max_new},
                                        {"--temperature", &a->temperature},
                                        {"--top-p", &a->top_p},
                                        {"--top-k", &a->top_k},
                                        {"--min-p", &a->min_p},
                                        {"--repetition-penalty", &a->rep},
                                        {"--seed", &a->seed},
                                        {"--batch-size", &a->batch}};
        int r = cli_string_options(argc, argv, &i, opts, sizeof opts / sizeof *opts);
        if (r < 0) return CLI_EXIT_USAGE;
        if (r > 0) continue;
        if (strcmp(argv[i], "--chat") == 0) {
            a->chat = true;
        } else if (strcmp(argv[i], "--bf16") == 0) {
            a->bf16 = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(generate_usage, stdout);
            return -1;
        } else {
            fprintf(stderr, "rlhf generate: unknown argument \"%s\"\n%s", argv[i], generate_usage);
            return CLI_EXIT_USAGE;
        }
    }
    if (!a->model || (!a->prompt == !a->prompts)) {
        fprintf(stderr, "rlhf generate: --model and one of --prompt or --prompts are required\n%s",
                generate_usage);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* The options over the generation_config.json defaults. */
static int sampling_from_args(const GenerateArgs *a, GenerationDefaults *g, GenerateOptions *opt) {
    opt->sampling = g->sampling;
    int n = 1, max_new = g->max_new_tokens > 0 ? g->max_new_tokens : 128, top_k, batch = 0;
    if ((a->n && cli_positive_int("--n", a->n, &n)) ||
        (a->max_new && cli_positive_int("--max-new-tokens", a->max_new, &max_new)) ||
        (a->batch && cli_positive_int("--batch-size", a->batch, &batch)))
        return -1;
    if (a->top_k) {
        if (strcmp(a->top_k, "0") == 0)
            top_k = 0;
        else if (cli_positive_int("--top-k", a->top_k, &top_k))
            return -1;
        opt->sampling.top_k = top_k;
    }
    if ((a->top_p && parse_float("--top-p", a->top_p, &opt->sampling.top_p)) ||
        (a->min_p && parse_float("--min-p", a->min_p, &opt->sampling.min_p)) ||
        (a->rep && parse_float("--repetition-penalty", a->rep, &opt->sampling.repetition_penalty)))
        return -1;
    if (a->temperature) {
        float t;
        if (parse_float("--temperature", a->temperature, &t)) return -1;
        opt->sampling.do_sample = t > 0;
        if (t > 0) opt->sampling.temperature = t;
    }
    opt->n_per_prompt = n;
    opt->max_new_tokens = max_new;
    opt->max_batch = batch;
    opt->eos_ids = g->eos_ids;
    opt->n_eos = g->n_eos;
    if (a->seed) opt->seed = strtoull(a->seed, NULL, 10);
    return 0;
}

/* Prompt text to ids: as plain text (with the tokenizer's special tokens), or through the chat
 * template as transformers' apply_chat_template(..., add_generation_prompt=True) does. */
static int encode_prompt(const Tokenizer *tok, const char *tok_dir, const json_t *messages,
                         const char *text, int32_t **ids, size_t *n) {
    if (!messages) return tokenizer_encode(tok, text, strlen(text), true, ids, n);
    ChatTemplateSource src;
    if (chat_template_source_load(tok_dir, &src) != 0) return -1;
    const char *tpl_text = chat_template_source_pick(&src, false);
    ChatTemplate *tpl = NULL;
    int rc = tpl_text ? chat_template_compile(tpl_text, strlen(tpl_text), &tpl) : -1;
    ChatRenderResult res;
    if (rc == 0) {
        ChatApplyArgs args = {.messages = messages,
                              .add_generation_prompt = true,
                              .special_tokens = src.special_tokens};
        rc = chat_template_apply(tpl, &args, &res);
    }
    if (rc == 0) {
        rc = tokenizer_encode(tok, res.text, res.len, false, ids, n);
        chat_render_result_free(&res);
    }
    if (tpl) chat_template_free(tpl);
    chat_template_source_free(&src);
    return rc;
}

static json_t *user_message(const char *text) {
    return json_pack("[{s:s, s:s}]", "role", "user", "content", text);
}

typedef struct {
    int32_t **ids;
    int *lens;
    json_t **texts; /* the prompt as given, for the output */
    int n;
} PromptSet;

static void prompt_set_free(PromptSet *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->ids[i]);
        json_decref(p->texts[i]);
    }
    free(p->ids);
    free(p->lens);
    free(p->texts);
}

static int add_prompt(PromptSet *p, const Tokenizer *tok, const char *tok_dir,
                      const json_t *messages, const char *text, json_t *shown) {
    int32_t *ids;
    size_t n;
    if (encode_prompt(tok, tok_dir, messages, text, &ids, &n) != 0) return -1;
    p->ids = xrealloc(p->ids, (size_t)(p->n + 1) * sizeof *p->ids);
    p->lens = xrealloc(p->lens, (size_t)(p->n + 1) * sizeof *p->lens);
    p->texts = xrealloc(p->texts, (size_t)(p->n + 1) * sizeof *p->texts);
    p->ids[p->n] = ids;
    p->lens[p->n] = (int)n;
    p->texts[p->n++] = shown;
    return 0;
}

static int read_prompts(PromptSet *p, const char *path, bool chat, const Tokenizer *tok,
                        const char *tok_dir) {
    char *data;
    size_t len;
    if (read_file(path, &data, &len) != 0) return -1;
    int line = 0, rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        line++;
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
            k++;
        if (k == n) continue;
        json_t *row;
        if (json_load_text(s, n, NULL, &row) != 0) {
            rc = err_prefix("%s:%d", path, line);
            break;
        }
        const json_t *messages = json_object_get(row, "messages");
        const char *text = json_string_value(json_object_get(row, "prompt"));
        if (!messages && !text) {
            rc = err_set("%s:%d: missing field \"prompt\" (a string) or \"messages\" (a list)",
                         path, line);
        } else if (messages && !json_is_array(messages)) {
            rc = err_set("%s:%d: field \"messages\": expected a list of messages", path, line);
        } else {
            json_t *chat_messages = !messages && chat ? user_message(text) : NULL;
            json_t *shown = json_deep_copy(messages ? messages : json_object_get(row, "prompt"));
            rc = add_prompt(p, tok, tok_dir, messages ? messages : chat_messages, text, shown);
            if (rc != 0) {
                json_decref(shown);
                err_prefix("%s:%d", path, line);
            }
            json_decref(chat_messages);
        }
        json_decref(row);
    }
    free(data);
    if (rc == 0 && p->n == 0) rc = err_set("%s: no prompts", path);
    return rc;
}

static int write_results(FILE *fp, const PromptSet *p, const Completion *c, int per,
                         const GenerateOptions *opt, const Tokenizer *tok) {
    for (int i = 0; i < p->n; i++) {
        json_t *line = json_object(), *list = json_array();
        json_object_set(line, "prompt", p->texts[i]);
        for (int k = 0; k < per; k++) {
            const Completion *cc = &c[i * per + k];
            char *text;
            size_t n;
            if (tokenizer_decode(tok, cc->ids, (size_t)cc->len, true, &text, &n) != 0) {
                json_decref(line);
                json_decref(list);
                return -1;
            }
            json_t *ids = json_array(), *lps = json_array();
            for (int t = 0; t < cc->len; t++) {
                json_array_append_new(ids, json_integer(cc->ids[t]));
                json_array_append_new(lps, json_real(cc->logprobs[t]));
            }
            bool stopped = false;
            for (int e = 0; e < opt->n_eos && cc->len; e++)
                stopped |= cc->ids[cc->len - 1] == opt->eos_ids[e];
            json_array_append_new(list, json_pack("{s:s%, s:o, s:o, s:s}", "text", text, n,
                                                  "token_ids", ids, "logprobs", lps,
                                                  "finish_reason", stopped ? "stop" : "length"));
            free(text);
        }
        json_object_set_new(line, "completions", list);
        char *s = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(line);
        if (!s || fprintf(fp, "%s\n", s) < 0) {
            free(s);
            return err_set("write failed");
        }
        free(s);
    }
    return 0;
}

static int generate_local(int argc, char **argv) {
    GenerateArgs a;
    int pr = parse_args(argc, argv, &a);
    if (pr == -1) return CLI_EXIT_OK; /* --help */
    if (pr != 0) return pr;
    const char *tok_dir = a.tokenizer ? a.tokenizer : a.model;
    Model m;
    LoraAdapter lora = {0};
    if (cli_load_model(&m, a.model, a.adapter, &lora) != 0) return cli_fail(err_msg());
    if (a.bf16 && model_store_bf16(&m) != 0) {
        model_free(&m);
        lora_free(&lora);
        return cli_fail(err_msg());
    }
    Tokenizer tok = {0};
    GenerationDefaults g;
    GenerateOptions opt = {0};
    PromptSet prompts = {0};
    Completion *out = NULL;
    int rc = CLI_EXIT_OK;
    if (tokenizer_load(&tok, tok_dir) != 0 ||
        generation_defaults_load(&g, a.model, &tok, tok_dir) != 0) {
        rc = cli_fail(err_msg());
        goto done;
    }
    if (sampling_from_args(&a, &g, &opt) != 0) {
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (a.prompt) {
        json_t *messages = a.chat ? user_message(a.prompt) : NULL;
        int r = add_prompt(&prompts, &tok, tok_dir, messages, a.prompt, json_string(a.prompt));
        json_decref(messages);
        if (r != 0) {
            rc = cli_fail(err_msg());
            goto done;
        }
    } else if (read_prompts(&prompts, a.prompts, a.chat, &tok, tok_dir) != 0) {
        rc = cli_fail(err_msg());
        goto done;
    }
    CliTextStream stream = {&tok, 0};
    bool streaming = a.prompt && opt.n_per_prompt == 1 && !a.out;
    if (streaming) {
        opt.on_token = cli_stream_token;
        opt.on_token_ctx = &stream;
    }
    out = xcalloc((size_t)prompts.n * opt.n_per_prompt, sizeof *out);
    if (generate(&m, (const int32_t *const *)prompts.ids, prompts.lens, prompts.n, &opt, out) !=
        0) {
        rc = cli_fail(err_msg());
        goto done;
    }
    if (streaming) {
        fputc('\n', stdout);
    } else if (a.out) {
        AtomicFile af;
        if (atomic_file_open(&af, a.out) != 0) {
            rc = cli_fail(err_msg());
        } else if (write_results(af.fp, &prompts, out, opt.n_per_prompt, &opt, &tok) != 0) {
            atomic_file_abort(&af);
            rc = cli_fail(err_msg());
        } else if (atomic_file_commit(&af) != 0) {
            rc = cli_fail(err_msg());
        }
    } else if (write_results(stdout, &prompts, out, opt.n_per_prompt, &opt, &tok) != 0) {
        rc = cli_fail(err_msg());
    }
done:
    if (out) {
        completions_free(out, prompts.n * opt.n_per_prompt);
        free(out);
    }
    prompt_set_free(&prompts);
    tokenizer_free(&tok);
    model_free(&m);
    lora_free(&lora);
    return rc;
}

/* The command with its directory options made local first (a Hub id: the HF cache, or a
 * download). */
int cli_generate(int argc, char **argv) {
    static const CliDirOption dirs[] = {
        {"--model", HUB_MODEL}, {"--tokenizer", HUB_TOKENIZER}, {"--adapter", HUB_ADAPTER}};
    char **args;
    if (cli_resolve_options(argc, argv, dirs, 3, &args) != 0) return cli_fail(err_msg());
    int rc = generate_local(argc, args);
    cli_free_resolved(argc, args, argv);
    return rc;
}
