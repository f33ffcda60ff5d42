/* Public chat-template API over the Jinja subset: compile, render, and the steps of
 * transformers' apply_chat_template around rendering. */
#include "chat/chat_template.h"

#include "jinja/jinja.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>

struct ChatTemplate {
    JArena arena;
    JNodeList body;
    char *source;
};

int chat_template_compile(const char *src, size_t len, ChatTemplate **out) {
    *out = NULL;
    ChatTemplate *t = xcalloc(1, sizeof *t);
    t->source = ja_memdup(&t->arena, src, len);
    if (jinja_compile(&t->arena, src, len, &t->body) != 0) {
        err_prefix("chat template");
        chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void chat_template_free(ChatTemplate *tpl) {
    if (!tpl) return;
    ja_free(&tpl->arena);
    free(tpl);
}

const char *chat_template_source(const ChatTemplate *tpl) {
    return tpl->source;
}

void chat_render_result_free(ChatRenderResult *res) {
    if (!res) return;
    free(res->text);
    free(res->spans);
    memset(res, 0, sizeof *res);
}

/* Renders with variables already converted to values. */
static int render_values(const ChatTemplate *tpl, JArena *arena, JDict *globals,
                         const struct tm *now, ChatRenderResult *res) {
    memset(res, 0, sizeof *res);
    JBuf out;
    jb_init(&out, arena);
    JFrame *root = ja_alloc(arena, sizeof *root);
    JCtx ctx = {.arena = arena,
                .globals = globals,
                .root = root,
                .out = &out,
                .now = now,
                .work_left = JINJA_WORK_LIMIT};
    arena->limit = arena->used + JINJA_MEMORY_LIMIT; /* the variables already in it are free */
    int rc = jinja_exec(&ctx, root, &tpl->body);
    /* The last step may have passed the memory cap with no step after it to notice. */
    if (rc == 0 && arena->over_limit) rc = jinja_fail_memory(0);
    if (rc != 0) {
        err_prefix("chat template");
        return -1;
    }
    res->work = JINJA_WORK_LIMIT - ctx.work_left;
    res->len = out.len;
    res->text = xmalloc(out.len + 1);
    if (out.len) memcpy(res->text, out.data, out.len);
    res->text[out.len] = '\0';
    if (ctx.nspans) {
        res->spans = xmalloc(ctx.nspans * sizeof *res->spans);
        for (size_t i = 0; i < ctx.nspans; i++)
            res->spans[i] = (ChatTemplateSpan){ctx.spans[i].start, ctx.spans[i].end};
        res->nspans = ctx.nspans;
    }
    return 0;
}

static void set_json_vars(JArena *a, JDict *globals, const json_t *obj) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        size_t n = strlen(k);
        jv_dict_set(a, globals, (JStr){ja_memdup(a, k, n), n}, jv_from_json(a, v));
    }
}

int chat_template_render_vars(const ChatTemplate *tpl, const json_t *vars, const struct tm *now,
                              ChatRenderResult *res) {
    if (vars && !json_is_object(vars))
        return err_set("chat template: the variables must be a JSON object");
    JArena arena = {0};
    JDict *globals = ja_alloc(&arena, sizeof *globals);
    if (vars) set_json_vars(&arena, globals, vars);
    int rc = render_values(tpl, &arena, globals, now, res);
    ja_free(&arena);
    return rc;
}

int chat_template_render(const ChatTemplate *tpl, const json_t *messages, const json_t *extra_vars,
                         char **out) {
    *out = NULL;
    if (extra_vars && !json_is_object(extra_vars))
        return err_set("chat template: the extra variables must be a JSON object");
    JArena arena = {0};
    JDict *globals = ja_alloc(&arena, sizeof *globals);
    if (extra_vars) set_json_vars(&arena, globals, extra_vars);
    static const JStr messages_name = {"messages", 8};
    jv_dict_set(&arena, globals, messages_name,
                messages ? jv_from_json(&arena, messages) : &jv_none_value);
    ChatRenderResult res;
    int rc = render_values(tpl, &arena, globals, NULL, &res);
    ja_free(&arena);
    if (rc == 0) {
        *out = res.text;
        free(res.spans);
    }
    return rc;
}

/* ---------------------------------------------------------------- apply_chat_template */

static const char continue_tag[] = "CONTINUE_FINAL_MESSAGE_TAG ";
static const char *const reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};

/* One message as transformers hands it to the template: null-valued keys dropped,
 * reasoning aliased under "thinking" (first) and "reasoning_content" (last). */
static JValue *prepare_message(JArena *a, const json_t *m) {
    JValue *reasoning = NULL;
    for (size_t i = 0; i < 3 && !reasoning; i++) {
        const json_t *r = json_object_get(m, reasoning_fields[i]);
        if (r && !json_is_null(r)) reasoning = jv_from_json(a, r);
    }
    JValue *msg = jv_dict(a);
    static const JStr thinking = {"thinking", 8}, reasoning_content = {"reasoning_content", 17};
    if (reasoning) jv_dict_set(a, msg->u.dict, thinking, reasoning);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (json_is_null(v)) continue;
        size_t n = strlen(k);
        jv_dict_set(a, msg->u.dict, (JStr){ja_memdup(a, k, n), n}, jv_from_json(a, v));
    }
    if (reasoning) jv_dict_set(a, msg->u.dict, reasoning_content, reasoning);
    return msg;
}

static JValue *append_tag(JArena *a, const JValue *s) {
    size_t n = s->u.s.n, t = sizeof continue_tag - 1;
    char *buf = ja_alloc(a, n + t + 1);
    memcpy(buf, s->u.s.s, n);
    memcpy(buf + n, continue_tag, t);
    return jv_str_ref(a, (JStr){buf, n + t});
}

/* Python str.strip() (whitespace) as a byte range. */
static void py_strip_range(const char *s, size_t n, size_t *start, size_t *end) {
    size_t i = 0, j = n;
    while (i < j) {
        size_t k = i;
        if (!ju_isspace(ju_decode(s, n, &k))) break;
        i = k;
    }
    while (j > i) {
        size_t p = j - 1;
        while (p > i && ((unsigned char)s[p] & 0xc0) == 0x80)
            p--;
        size_t k = p;
        if (!ju_isspace(ju_decode(s, j, &k)) || k != j) break;
        j = p;
    }
    *start = i;
    *end = j;
}

static const char *find_last(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return NULL;
    for (size_t i = n - m + 1; i-- > 0;)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

/* kwargs[name] unless absent or null. */
static const json_t *kwarg_value(const json_t *kwargs, const char *name) {
    const json_t *v = kwargs ? json_object_get(kwargs, name) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

int chat_template_apply(const ChatTemplate *tpl, const ChatApplyArgs *args, ChatRenderResult *res) {
    memset(res, 0, sizeof *res);
    const json_t *msgs = args->messages;
    if (!json_is_array(msgs))
        return err_set("chat template: messages must be a JSON array of message objects");
    if (json_array_size(msgs) == 0)
        return err_set("chat template: cannot apply a chat template to an empty conversation");
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (!json_is_object(json_array_get(msgs, i)))
            return err_set("chat template: message %zu is not a JSON object", i);
    if (args->continue_final_message && args->add_generation_prompt)
        return err_set(
            "chat template: continue_final_message and add_generation_prompt are not compatible");
    if (args->kwargs && !json_is_object(args->kwargs))
        return err_set("chat template: kwargs must be a JSON object");
    /* tools and documents are named parameters of apply_chat_template: given among the
     * kwargs, Python binds them there, so a kwargs "documents" is the documents. */
    const json_t *tools = args->tools ? args->tools : kwarg_value(args->kwargs, "tools");
    const json_t *documents =
        args->documents ? args->documents : kwarg_value(args->kwargs, "documents");
    if (tools && !json_is_array(tools)) return err_set("chat template: tools must be a JSON array");
    if (documents) {
        if (!json_is_array(documents))
            return err_set("chat template: documents must be a JSON array");
        for (size_t i = 0; i < json_array_size(documents); i++)
            if (!json_is_object(json_array_get(documents, i)))
                return err_set("chat template: documents should be a list of dicts with 'title' "
                               "and 'text' keys");
    }
    if (args->special_tokens && !json_is_object(args->special_tokens))
        return err_set("chat template: special tokens must be a JSON object");

    JArena arena = {0};
    JArena *a = &arena;
    JDict *globals = ja_alloc(a, sizeof *globals);
    if (args->special_tokens) set_json_vars(a, globals, args->special_tokens);
    if (args->kwargs) set_json_vars(a, globals, args->kwargs);

    size_t n = json_array_size(msgs);
    JValue *chat = jv_list(a, n, false);
    for (size_t i = 0; i < n; i++)
        chat->u.list.items[i] = prepare_message(a, json_array_get(msgs, i));

    JValue *final_message = NULL;
    if (args->continue_final_message) {
        JValue *last = chat->u.list.items[n - 1];
        JValue *content = jv_dict_get(last->u.dict, "content", 7);
        if (!content) {
            ja_free(a);
            return err_set(
                "chat template: continue_final_message is set but the final message has no "
                "\"content\" to continue");
        }
        if (!strstr(tpl->source, "content")) {
            ja_free(a);
            return err_set(
                "chat template: continue_final_message is set to \"content\" but this is not "
                "an accepted field in the chat_template");
        }
        if (content->kind == JV_LIST) {
            /* The last content block with a "text" gets the tag. */
            JValue *copy = jv_list(a, content->u.list.n, content->is_tuple);
            memcpy(copy->u.list.items, content->u.list.items, content->u.list.n * sizeof(JValue *));
            for (size_t i = content->u.list.n; i-- > 0;) {
                JValue *block = copy->u.list.items[i];
                JValue *text =
                    block->kind == JV_DICT ? jv_dict_get(block->u.dict, "text", 4) : NULL;
                if (!text) continue;
                if (text->kind != JV_STRING) break;
                final_message = text;
                JValue *nb = jv_dict(a);
                for (size_t k = 0; k < block->u.dict->n; k++)
                    jv_dict_set(a, nb->u.dict, block->u.dict->items[k].key,
                                block->u.dict->items[k].val);
                static const JStr text_name = {"text", 4};
                jv_dict_set(a, nb->u.dict, text_name, append_tag(a, text));
                copy->u.list.items[i] = nb;
                break;
            }
            if (!final_message) {
                ja_free(a);
                return err_set(
                    "chat template: continue_final_message is set but we could not find any "
                    "text to continue in the final message");
            }
            static const JStr content_name = {"content", 7};
            jv_dict_set(a, last->u.dict, content_name, copy);
        } else if (content->kind == JV_STRING) {
            final_message = content;
            static const JStr content_name = {"content", 7};
            jv_dict_set(a, last->u.dict, content_name, append_tag(a, content));
        } else {
            ja_free(a);
            return err_set(
                "chat template: the final message's content must be a string or a list of "
                "content blocks to continue it");
        }
    }

    static const JStr messages_name = {"messages", 8}, tools_name = {"tools", 5},
                      documents_name = {"documents", 9}, agp_name = {"add_generation_prompt", 21};
    jv_dict_set(a, globals, messages_name, chat);
    jv_dict_set(a, globals, tools_name, tools ? jv_from_json(a, tools) : &jv_none_value);
    jv_dict_set(a, globals, documents_name,
                documents ? jv_from_json(a, documents) : &jv_none_value);
    jv_dict_set(a, globals, agp_name, jv_bool(args->add_generation_prompt));

    int rc = render_values(tpl, a, globals, args->now, res);
    if (rc == 0 && final_message) {
        size_t s0, s1, t0, t1;
        py_strip_range(final_message->u.s.s, final_message->u.s.n, &s0, &s1);
        py_strip_range(continue_tag, sizeof continue_tag - 1, &t0, &t1);
        const char *tag_at = find_last(res->text, res->len, continue_tag + t0, t1 - t0);
        bool has_final =
            s1 == s0 || memmem(res->text, res->len, final_message->u.s.s + s0, s1 - s0);
        if (!tag_at || !has_final) {
            chat_render_result_free(res);
            rc = err_set(
                "chat template: continue_final_message is set but the final message does not "
                "appear in the chat after applying the chat template");
        } else {
            size_t loc = (size_t)(tag_at - res->text), tl = sizeof continue_tag - 1;
            bool exact = loc + tl <= res->len && memcmp(res->text + loc, continue_tag, tl) == 0;
            size_t end = exact ? loc : ju_rstrip_len(res->text, loc);
            res->len = end;
            res->text[end] = '\0';
            size_t keep = 0;
            for (size_t i = 0; i < res->nspans; i++) {
                if (res->spans[i].start >= end) continue;
                res->spans[keep] = res->spans[i];
                if (res->spans[keep].end > end) res->spans[keep].end = end;
                keep++;
            }
            res->nspans = keep;
        }
    }
    ja_free(a);
    return rc;
}
