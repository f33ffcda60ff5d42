/* Chat templates: the Jinja2 chat_template of a Hugging Face tokenizer, rendered the way
 * transformers renders it (jinja2 ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks and loopcontrols; transformers' tojson, raise_exception and strftime_now;
 * namespace(); the {% generation %} tag).
 *
 * The interpreter covers the Jinja features real chat templates use (see src/jinja/jinja.h
 * and docs in the README). A template using something outside that subset fails to
 * compile or render with a message naming the construct and the template line; it never
 * renders something different silently.
 *
 * Ownership: a ChatTemplate is immutable after compilation and may be rendered from
 * several threads at once. Every function returns 0 on success and -1 with err_msg() set
 * on failure ("chat template: line N: ..."). */
#ifndef RLHF_CHAT_CHAT_TEMPLATE_H
#define RLHF_CHAT_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct ChatTemplate ChatTemplate;

/* Compiles template source (len bytes, UTF-8). Syntax errors, unknown tags, filters and
 * tests are reported here with their line, as jinja2 does at compile time. */
int chat_template_compile(const char *src, size_t len, ChatTemplate **out);
void chat_template_free(ChatTemplate *tpl);
/* The source the template was compiled from (NUL-terminated). */
const char *chat_template_source(const ChatTemplate *tpl);

/* A byte range of the output produced inside {% generation %} ... {% endgeneration %}
 * (transformers' assistant mask). Offsets are in bytes, not characters. */
typedef struct {
    size_t start, end;
} ChatTemplateSpan;

typedef struct {
    char *text; /* NUL-terminated; may contain NUL bytes when the inputs do: use len */
    size_t len;
    ChatTemplateSpan *spans; /* generation spans, in output order */
    size_t nspans;
    /* What the render spent of its allowance (JINJA_WORK_LIMIT steps, jinja.h): shows how far
     * real templates are from the limit that stops runaway ones. */
    uint64_t work;
} ChatRenderResult;

void chat_render_result_free(ChatRenderResult *res);

/* Template.render(**vars): `vars` is a JSON object whose members become the template's
 * variables. `now` fixes the clock strftime_now() reads (NULL: local time at the call). */
int chat_template_render_vars(const ChatTemplate *tpl, const json_t *vars, const struct tm *now,
                              ChatRenderResult *res);

/* Shorthand: renders with `messages` plus the members of extra_vars (may be NULL), e.g.
 * add_generation_prompt, bos_token, tools. *out is a malloc'd NUL-terminated string. */
int chat_template_render(const ChatTemplate *tpl, const json_t *messages, const json_t *extra_vars,
                         char **out);

/* What tokenizer.apply_chat_template(conversation, tokenize=False, ...) does before and
 * after rendering, in transformers 5:
 *   - an empty conversation is an error; message keys whose value is null are dropped;
 *   - a message carrying reasoning under reasoning_content, thinking or reasoning gets it
 *     under both "thinking" and "reasoning_content" (the names templates read);
 *   - the variables are the special tokens, then kwargs (which override them), then
 *     messages, tools and documents (null when not given) and add_generation_prompt;
 *     tools and documents are named parameters in Python, so a "tools" or "documents" key
 *     of kwargs is taken as that argument when the field below is NULL;
 *   - continue_final_message leaves the last message open (cut after its content). */
typedef struct {
    const json_t *messages;  /* array of message objects (required) */
    const json_t *tools;     /* array, or NULL for None */
    const json_t *documents; /* array, or NULL for None */
    bool add_generation_prompt;
    bool continue_final_message;  /* continue the "content" of the last message */
    const json_t *special_tokens; /* object: bos_token, eos_token, ... -> string; may be NULL */
    const json_t *kwargs;         /* object of extra template variables; may be NULL */
    const struct tm *now;         /* NULL: local time */
} ChatApplyArgs;

int chat_template_apply(const ChatTemplate *tpl, const ChatApplyArgs *args, ChatRenderResult *res);

/* ------------------------------------------------------------------------------------------
 * Loading (chat_template_loader.c) */

/* What a tokenizer directory says about chat templates, read the way transformers 5 reads
 * it:
 *   - chat_template.jinja (as "default") and additional_chat_templates/<name>.jinja win;
 *   - else tokenizer_config.json "chat_template": a string ("default"), or a list of
 *     {"name", "template"};
 *   - else a processor's legacy chat_template.json {"chat_template": ...}.
 * Special tokens (what templates see as bos_token, eos_token, ...): tokenizer_config.json's
 * bos/eos/unk/sep/pad/cls/mask_token and any other "*_token" key, each a string or an
 * AddedToken dict {"content": ...}, plus an "extra_special_tokens" name->token dict. When
 * tokenizer_config.json has no "added_tokens_decoder", special_tokens_map.json is read too
 * and its tokens override the config's (transformers 5 behaviour). */
typedef struct {
    char **names;     /* template names ("default", "tool_use", ...), ntemplates of them */
    char **templates; /* their sources */
    size_t ntemplates;
    char *origin;           /* the file they came from, for messages (NULL when none) */
    json_t *special_tokens; /* object: token name -> string */
} ChatTemplateSource;

/* Returns 0 (a directory without any template is not an error: ntemplates == 0), or -1. */
int chat_template_source_load(const char *dir, ChatTemplateSource *out);
void chat_template_source_free(ChatTemplateSource *src);
/* The template transformers would use: "tool_use" when tools are given and it exists,
 * else "default". NULL (error set) when there is none. */
const char *chat_template_source_pick(const ChatTemplateSource *src, bool has_tools);

/* Built-in templates by Axolotl's names (chatml, llama3, qwen_25, ...): the template
 * text, or NULL when the name is not built in. */
const char *chat_template_builtin(const char *name);
/* The names, NULL-terminated. */
const char *const *chat_template_builtin_names(void);

#endif
