/* rlhf chat-template --tokenizer DIR --messages FILE.json [--add-generation-prompt] ...
 * Prints the prompt tokenizer.apply_chat_template(messages, tokenize=False, ...) gives. */
#include "cli/commands.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char chat_template_usage[] =
    "usage: rlhf chat-template [--tokenizer DIR] [--template NAME|FILE] --messages FILE.json\n"
    "                          [--add-generation-prompt] [--continue-final-message]\n"
    "                          [--tools FILE.json] [--documents FILE.json] [--kwargs JSON]\n"
    "                          [--now TIME] [--out FILE]\n"
    "       rlhf chat-template --template NAME|FILE --vars FILE.json [--now TIME] [--out FILE]\n"
    "\n"
    "Renders a conversation with a chat template, as transformers' apply_chat_template(...,\n"
    "tokenize=False) does, and prints the prompt exactly (no newline is added).\n"
    "\n"
    "  --tokenizer DIR     a model or tokenizer directory: its chat_template.jinja or\n"
    "                      tokenizer_config.json template, and its special tokens\n"
    "  --template T        a built-in template by Axolotl's name, tokenizer_default, or a\n"
    "                      .jinja file; overrides the directory's template\n"
    "  --messages FILE     a JSON array of messages, or {\"messages\": [...], \"tools\": [...],\n"
    "                      \"documents\": [...]} (\"-\": standard input)\n"
    "  --tools FILE        a JSON array of tool schemas\n"
    "  --documents FILE    a JSON array of documents for RAG templates ({\"title\", \"text\"})\n"
    "  --kwargs JSON       extra template variables, e.g. '{\"enable_thinking\": false}'\n"
    "  --vars FILE         render with exactly these variables (a JSON object), like jinja2's\n"
    "                      Template.render(**vars), without apply_chat_template's steps\n"
    "  --now TIME          the clock strftime_now() reads, YYYY-MM-DDTHH:MM:SS (default: now)\n"
    "  --out FILE          write the prompt there (atomically) instead of standard output\n";

static int read_json_arg(const char *path, json_t **out) {
    if (strcmp(path, "-") != 0) return json_load_path(path, out);
    size_t len = 0, cap = 1 << 16;
    char *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, stdin)) > 0) {
        len += got;
        if (len == cap) buf = xrealloc(buf, cap *= 2);
    }
    int rc = json_load_text(buf, len, "<stdin>", out);
    free(buf);
    return rc;
}

static void print_builtins(FILE *fp) {
    fputs("built-in templates:", fp);
    for (const char *const *n = chat_template_builtin_names(); *n; n++)
        fprintf(fp, " %s", *n);
    fputs(" (and tokenizer_default)\n", fp);
}

static int chat_template_local(int argc, char **argv) {
    const char *tokenizer = NULL, *template_arg = NULL, *messages_path = NULL, *tools_path = NULL,
               *kwargs_text = NULL, *documents_path = NULL, *out_path = NULL, *vars_path = NULL,
               *now_text = NULL;
    bool add_generation_prompt = false, continue_final = false;
    for (int i = 0; i < argc; i++) {
        int r;
        if ((r = cli_option(argc, argv, &i, "--tokenizer", &tokenizer)) ||
            (r = cli_option(argc, argv, &i, "--template", &template_arg)) ||
            (r = cli_option(argc, argv, &i, "--messages", &messages_path)) ||
            (r = cli_option(argc, argv, &i, "--tools", &tools_path)) ||
            (r = cli_option(argc, argv, &i, "--documents", &documents_path)) ||
            (r = cli_option(argc, argv, &i, "--kwargs", &kwargs_text)) ||
            (r = cli_option(argc, argv, &i, "--out", &out_path)) ||
            (r = cli_option(argc, argv, &i, "--vars", &vars_path)) ||
            (r = cli_option(argc, argv, &i, "--now", &now_text))) {
            if (r < 0) return CLI_EXIT_USAGE;
            continue;
        }
        if (strcmp(argv[i], "--add-generation-prompt") == 0) {
            add_generation_prompt = true;
        } else if (strcmp(argv[i], "--continue-final-message") == 0) {
            continue_final = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(chat_template_usage, stdout);
            print_builtins(stdout);
            return CLI_EXIT_OK;
        } else {
            fprintf(stderr, "rlhf chat-template: unknown argument \"%s\"\n%s", argv[i],
                    chat_template_usage);
            return CLI_EXIT_USAGE;
        }
    }
    if ((!messages_path && !vars_path) || (messages_path && vars_path) ||
        (!tokenizer && !template_arg)) {
        fprintf(
            stderr,
            "rlhf chat-template: one of --messages or --vars, and --tokenizer or --template, are "
            "required\n%s",
            chat_template_usage);
        return CLI_EXIT_USAGE;
    }
    struct tm now_tm, *now = NULL;
    if (now_text) {
        memset(&now_tm, 0, sizeof now_tm);
        char tail;
        if (sscanf(now_text, "%d-%d-%dT%d:%d:%d%c", &now_tm.tm_year, &now_tm.tm_mon,
                   &now_tm.tm_mday, &now_tm.tm_hour, &now_tm.tm_min, &now_tm.tm_sec, &tail) != 6) {
            fprintf(stderr, "rlhf: error: --now: expected YYYY-MM-DDTHH:MM:SS, got \"%s\"\n",
                    now_text);
            return CLI_EXIT_USAGE;
        }
        now_tm.tm_year -= 1900;
        now_tm.tm_mon -= 1;
        time_t t = timegm(&now_tm); /* normalises, and fills in the weekday */
        gmtime_r(&t, &now_tm);
        now = &now_tm;
    }

    int rc = CLI_EXIT_FAILURE;
    json_t *doc = NULL, *tools = NULL, *documents = NULL, *kwargs = NULL;
    ChatTemplateSource src = {0};
    ChatTemplate *tpl = NULL;
    char *file_template = NULL;
    ChatRenderResult res = {0};

    if (read_json_arg(messages_path ? messages_path : vars_path, &doc) != 0) goto fail;
    if (vars_path && !json_is_object(doc)) {
        err_set("%s: expected a JSON object of template variables", vars_path);
        goto fail;
    }
    const json_t *messages = doc;
    if (json_is_object(doc)) {
        messages = json_object_get(doc, "messages");
        const json_t *t = json_object_get(doc, "tools");
        if (t && !json_is_null(t)) tools = json_incref((json_t *)t);
        const json_t *d = json_object_get(doc, "documents");
        if (d && !json_is_null(d)) documents = json_incref((json_t *)d);
    }
    if (!vars_path && !json_is_array(messages)) {
        err_set("%s: expected a JSON array of messages or an object with \"messages\"",
                messages_path);
        goto fail;
    }
    if (tools_path) {
        json_decref(tools);
        tools = NULL;
        if (json_load_path(tools_path, &tools) != 0) goto fail;
        if (!json_is_array(tools)) {
            err_set("%s: expected a JSON array of tool schemas", tools_path);
            goto fail;
        }
    }
    if (documents_path) {
        json_decref(documents);
        documents = NULL;
        if (json_load_path(documents_path, &documents) != 0) goto fail;
        if (!json_is_array(documents)) {
            err_set("%s: expected a JSON array of documents", documents_path);
            goto fail;
        }
    }
    if (kwargs_text) {
        if (json_load_text(kwargs_text, strlen(kwargs_text), "--kwargs", &kwargs) != 0) goto fail;
        if (!json_is_object(kwargs)) {
            err_set("--kwargs: expected a JSON object");
            goto fail;
        }
    }

    if (tokenizer && chat_template_source_load(tokenizer, &src) != 0) goto fail;
    const char *text = NULL;
    if (template_arg && strcmp(template_arg, "tokenizer_default") != 0) {
        text = chat_template_builtin(template_arg);
        if (!text && file_exists(template_arg)) {
            if (read_file(template_arg, &file_template, NULL) != 0) goto fail;
            text = file_template;
        }
        if (!text) {
            fprintf(stderr, "rlhf: error: Template '%s' not found.\n", template_arg);
            print_builtins(stderr);
            rc = CLI_EXIT_FAILURE;
            goto done;
        }
    } else {
        if (!tokenizer) {
            err_set("--template tokenizer_default needs --tokenizer");
            goto fail;
        }
        if (!(text = chat_template_source_pick(&src, tools != NULL))) {
            err_prefix("%s", tokenizer);
            goto fail;
        }
    }
    if (chat_template_compile(text, strlen(text), &tpl) != 0) {
        if (template_arg && !file_template && strcmp(template_arg, "tokenizer_default") != 0)
            err_prefix("built-in template '%s'", template_arg);
        else if (file_template)
            err_prefix("%s", template_arg);
        else if (src.origin)
            err_prefix("%s", src.origin);
        goto fail;
    }
    if (vars_path) {
        if (chat_template_render_vars(tpl, doc, now, &res) != 0) goto fail;
    } else {
        ChatApplyArgs args = {
            .messages = messages,
            .tools = tools,
            .documents = documents,
            .add_generation_prompt = add_generation_prompt,
            .continue_final_message = continue_final,
            .special_tokens = src.special_tokens,
            .kwargs = kwargs,
            .now = now,
        };
        if (chat_template_apply(tpl, &args, &res) != 0) goto fail;
    }

    if (out_path) {
        if (write_file_atomic(out_path, res.text, res.len) != 0) goto fail;
    } else if (fwrite(res.text, 1, res.len, stdout) != res.len || fflush(stdout) != 0) {
        err_set("writing to standard output failed");
        goto fail;
    }
    rc = CLI_EXIT_OK;
    goto done;
fail:
    rc = cli_fail(err_msg());
done:
    chat_render_result_free(&res);
    chat_template_free(tpl);
    free(file_template);
    chat_template_source_free(&src);
    json_decref(doc);
    json_decref(tools);
    json_decref(documents);
    json_decref(kwargs);
    return rc;
}

/* The command with its directory options made local first (a Hub id: the HF cache, or a
 * download). */
int cli_chat_template(int argc, char **argv) {
    static const CliDirOption dirs[] = {{"--tokenizer", HUB_TOKENIZER}};
    char **args;
    if (cli_resolve_options(argc, argv, dirs, 1, &args) != 0) return cli_fail(err_msg());
    int rc = chat_template_local(argc, args);
    cli_free_resolved(argc, args, argv);
    return rc;
}
