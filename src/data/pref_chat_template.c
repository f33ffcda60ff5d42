/* Preference types rendered with a Jinja chat template (axolotl-config.md §4.3, §4.7):
 *
 *   chat_template.default (dpo)      messages = row[field_messages] (a string is one user turn);
 *                                    chosen / rejected = row[field_chosen] / row[field_rejected]:
 *                                    a string (an assistant turn), a message, or a list (its
 *                                    last message). prompt = render(messages, generation prompt).
 *   chat_template.argilla_chat (dpo) chosen / rejected are whole conversations: the prompt is
 *                                    all of chosen but its last message.
 *   chat_template.argilla (orpo)     see orpo_argilla below.
 *
 * Messages are mapped with message_property_mappings (role / content keys; the legacy
 * message_field_role / message_field_content are folded in) and `roles` (default: user,
 * assistant, system, tool as themselves; a role it does not map is an error, as upstream).
 *
 * DPO responses: Axolotl renders [user "[[dummy_message]]", response], cuts at the first place
 * the response's content occurs and strips trailing whitespace. rlhf.c searches from the end of
 * the rendered dummy turn + generation prompt instead (axolotl-config.md §15.6), which gives the
 * same text whenever upstream's does not go wrong: upstream cuts too early when the content
 * also occurs in the header or the dummy text ("user", "a"), and keeps a single character when a
 * template trims the content (llama3 and "  padded  ").
 *
 * The template is the dataset's chat_template (with its chat_template_jinja) when set, else the
 * config's, else the tokenizer's own. Axolotl 0.19 drops a DPO dataset's chat_template, roles and
 * message_property_mappings before the strategy sees them (its DPO dataset schema keeps only
 * path, split, type, data_files, revision, field_messages, field_chosen, field_rejected), and its
 * ORPO strategy reads only the top-level template; rlhf.c honours them and says so. */
#include "data/pref_types.h"

#include "chat/chat_template.h"
#include "jinja/jinja.h"
#include "common/error.h"
#include "data/template_choice.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    ChatTemplate *tpl;
    json_t *special_tokens;
    const char *field_messages, *field_chosen, *field_rejected;
    const char *role_key, *content_key; /* message_property_mappings */
    json_t *roles;                      /* role in the data -> role in the template */
} TemplateState;

static void free_state(void *p) {
    TemplateState *s = p;
    if (!s) return;
    if (s->tpl) chat_template_free(s->tpl);
    json_decref(s->special_tokens);
    json_decref(s->roles);
    free(s);
}

static const char *option_string(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) && json_string_length(v) ? json_string_value(v) : NULL;
}

static int load_template(TemplateState *s, const PrefOpenContext *ctx) {
    const json_t *o = ctx->dc->options;
    const char *choice = option_string(o, "chat_template");
    const char *jinja = choice ? option_string(o, "chat_template_jinja") : NULL;
    if (!choice) {
        choice = ctx->cfg->chat_template ? ctx->cfg->chat_template : "tokenizer_default";
        jinja = ctx->cfg->chat_template_jinja;
    }
    ChatTemplateSource src;
    if (chat_template_source_load(ctx->cfg->tokenizer_config, &src) != 0) return -1;
    char *text = NULL;
    int rc = template_choice_text(choice, jinja, &src, &text);
    if (rc == 0) s->special_tokens = json_incref(src.special_tokens);
    chat_template_source_free(&src);
    if (rc == 0) rc = chat_template_compile(text, strlen(text), &s->tpl);
    free(text);
    return rc;
}

/* Keys Axolotl would not pass on for this rl: honoured here, with a note. */
static void note_dropped_keys(const PrefOpenContext *ctx, const char *const *keys, size_t n,
                              const char *why) {
    for (size_t i = 0; i < n; i++)
        if (json_object_get(ctx->dc->options, keys[i]) &&
            !json_is_null(json_object_get(ctx->dc->options, keys[i])))
            fprintf(ctx->log, "note: %s:%d: datasets[%d].%s: %s; rlhf.c uses it\n",
                    ctx->cfg->source, ctx->dc->line, ctx->index, keys[i], why);
}

/* handle_legacy_message_fields_logic: message_field_role / _content into the mapping. */
static int property_key(const PrefOpenContext *ctx, const char *prop, const char **out) {
    const json_t *o = ctx->dc->options;
    const json_t *map = json_object_get(o, "message_property_mappings");
    if (map && !json_is_null(map) && !json_is_object(map))
        return err_set("message_property_mappings: expected a mapping");
    const char *mapped = json_string_value(json_object_get(map, prop));
    char legacy_key[64];
    snprintf(legacy_key, sizeof legacy_key, "message_field_%s", prop);
    const json_t *legacy = json_object_get(o, legacy_key);
    if (legacy && !json_is_null(legacy)) {
        const char *l = json_string_value(legacy);
        fprintf(ctx->log,
                "warning: %s:%d: datasets[%d].%s is deprecated, use message_property_mappings "
                "instead. Example: message_property_mappings: {%s: %s}\n",
                ctx->cfg->source, ctx->dc->line, ctx->index, legacy_key, prop, l ? l : "");
        if (mapped && (!l || strcmp(mapped, l) != 0))
            return err_set("Conflicting message %s fields: %s='%s' conflicts with "
                           "message_property_mappings.%s='%s'",
                           prop, legacy_key, l ? l : "", prop, mapped);
        *out = l && *l ? l : prop;
        return 0;
    }
    *out = mapped ? mapped : prop;
    return 0;
}

static int read_roles(const json_t *v, json_t **out) {
    *out = json_object();
    if (!v || json_is_null(v)) {
        const char *const same[] = {"user", "assistant", "system", "tool"};
        for (size_t i = 0; i < 4; i++)
            json_object_set_new(*out, same[i], json_string(same[i]));
        return 0;
    }
    if (!json_is_object(v)) return err_set("roles: expected a mapping of role: [names]");
    const char *target;
    json_t *sources;
    json_object_foreach((json_t *)v, target, sources) {
        size_t i;
        json_t *name;
        if (!json_is_array(sources)) return err_set("roles.%s: expected a list of names", target);
        json_array_foreach(sources, i, name) {
            if (!json_is_string(name)) return err_set("roles.%s: expected names", target);
            json_object_set_new(*out, json_string_value(name), json_string(target));
        }
    }
    return 0;
}

static int open_dpo(PrefFormat *f, const PrefOpenContext *ctx) {
    TemplateState *s = xcalloc(1, sizeof *s);
    f->state = s;
    f->free_state = free_state;
    const json_t *o = ctx->dc->options;
    s->field_messages = option_string(o, "field_messages");
    s->field_chosen = option_string(o, "field_chosen");
    s->field_rejected = option_string(o, "field_rejected");
    if (!s->field_messages) s->field_messages = "messages";
    if (!s->field_chosen) s->field_chosen = "chosen";
    if (!s->field_rejected) s->field_rejected = "rejected";
    static const char *const dropped[] = {"message_property_mappings",
                                          "message_field_role",
                                          "message_field_content",
                                          "roles",
                                          "chat_template",
                                          "chat_template_jinja"};
    note_dropped_keys(ctx, dropped, sizeof dropped / sizeof *dropped,
                      "Axolotl 0.19 drops this key for rl: dpo/ipo/simpo (its DPO dataset "
                      "schema keeps only path, split, type, data_files, revision, "
                      "field_messages, field_chosen, field_rejected)");
    if (property_key(ctx, "role", &s->role_key) || property_key(ctx, "content", &s->content_key) ||
        read_roles(json_object_get(o, "roles"), &s->roles))
        return -1;
    return load_template(s, ctx);
}

/* ------------------------------------------------------------------------------- rendering */

static int render(const TemplateState *s, const json_t *messages, bool generation_prompt,
                  ChatRenderResult *res) {
    ChatApplyArgs args = {.messages = messages,
                          .add_generation_prompt = generation_prompt,
                          .special_tokens = s->special_tokens};
    return chat_template_apply(s->tpl, &args, res);
}

static json_t *message(const char *role, const json_t *content) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set(m, "content", (json_t *)content);
    return m;
}

/* The first place `needle` occurs in hay[from, n), or -1. */
static long find_text(const char *hay, size_t n, size_t from, const char *needle, size_t k) {
    for (size_t i = from; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0) return (long)i;
    return -1;
}

/* The response text of `msg` (a template message whose content is a string); see the top. */
static int response_text(const TemplateState *s, json_t *msg, char **out) {
    const char *content = json_string_value(json_object_get(msg, "content"));
    size_t k = json_string_length(json_object_get(msg, "content"));
    json_t *dummy = json_pack("{s:s,s:s}", "role", "user", "content", "[[dummy_message]]");
    json_t *conv = json_pack("[OO]", dummy, msg);
    ChatRenderResult full, prefix;
    int rc = render(s, conv, false, &full);
    json_decref(conv);
    if (rc != 0) {
        json_decref(dummy);
        return -1;
    }
    json_t *alone = json_pack("[O]", dummy);
    bool has_prefix = render(s, alone, true, &prefix) == 0;
    err_clear();
    json_decref(alone);
    json_decref(dummy);
    long at = -1;
    if (has_prefix && prefix.len <= full.len && memcmp(full.text, prefix.text, prefix.len) == 0) {
        at = find_text(full.text, full.len, prefix.len, content, k);
        if (at < 0) at = (long)prefix.len; /* the template changed the content (e.g. trim) */
    } else {
        at = find_text(full.text, full.len, 0, content, k);
    }
    if (has_prefix) chat_render_result_free(&prefix);
    if (at < 0) {
        chat_render_result_free(&full);
        return err_set("the chat template's rendering of a response does not contain its text");
    }
    size_t end = (size_t)at + ju_rstrip_len(full.text + at, full.len - (size_t)at);
    *out = xmalloc(end - (size_t)at + 1);
    memcpy(*out, full.text + at, end - (size_t)at);
    (*out)[end - (size_t)at] = '\0';
    chat_render_result_free(&full);
    return 0;
}

/* A message of the data as the template sees it: {role: roles[m[role_key]], content}. A role
 * given by the strategy itself (a string response, a string conversation) keeps its name when
 * `roles` does not map it (upstream raises KeyError there). */
static json_t *template_message(const TemplateState *s, const json_t *m, const char *what,
                                bool own_role) {
    const char *role = json_string_value(json_object_get(m, s->role_key));
    const json_t *content = pref_field_value(m, s->content_key);
    if (!role) {
        err_set("%s: missing \"%s\" (the role; see message_property_mappings)", what, s->role_key);
        return NULL;
    }
    if (!content) {
        err_set("%s: missing \"%s\" (the content; see message_property_mappings)", what,
                s->content_key);
        return NULL;
    }
    const char *target = json_string_value(json_object_get(s->roles, role));
    if (!target && !own_role) {
        err_set("%s: role \"%s\" is not one of the roles (set `roles` to map it)", what, role);
        return NULL;
    }
    return message(target ? target : role, content);
}

/* A response field: a string, a message, or a list of messages (the last is used). */
static json_t *response_message(const TemplateState *s, const json_t *row, const char *field) {
    const json_t *v = pref_field_value(row, field);
    char what[300];
    snprintf(what, sizeof what, "field \"%s\"", field);
    if (!v) {
        err_set("missing field \"%s\"", field);
        return NULL;
    }
    if (json_is_string(v)) {
        json_t *m = json_object(), *r;
        json_object_set_new(m, s->role_key, json_string("assistant"));
        json_object_set(m, s->content_key, (json_t *)v);
        r = template_message(s, m, what, true);
        json_decref(m);
        return r;
    }
    if (json_is_array(v) && json_array_size(v) > 0) {
        snprintf(what, sizeof what, "field \"%s\"[%zu]", field, json_array_size(v) - 1);
        v = json_array_get(v, json_array_size(v) - 1);
    }
    if (!json_is_object(v)) {
        err_set("%s: expected a string, a message or a list of messages", what);
        return NULL;
    }
    json_t *m = template_message(s, v, what, false);
    if (m && !json_is_string(json_object_get(m, "content"))) {
        json_decref(m);
        err_set("%s: the content must be a string", what);
        return NULL;
    }
    return m;
}

static int render_text(const TemplateState *s, const json_t *messages, bool gen, char **out) {
    ChatRenderResult res;
    if (render(s, messages, gen, &res) != 0) return -1;
    *out = res.text;
    res.text = NULL;
    chat_render_result_free(&res);
    return 0;
}

static int responses(const TemplateState *s, json_t *chosen, json_t *rejected, PrefStrings *out) {
    int rc = chosen && rejected ? 0 : -1;
    if (rc == 0 && response_text(s, chosen, &out->chosen) != 0) rc = err_prefix("chosen");
    if (rc == 0 && response_text(s, rejected, &out->rejected) != 0) rc = err_prefix("rejected");
    json_decref(chosen);
    json_decref(rejected);
    return rc;
}

static int dpo_default(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const TemplateState *s = f->state;
    const json_t *raw = pref_field_value(row, s->field_messages);
    if (!raw) return err_set("missing field \"%s\" (set field_messages)", s->field_messages);
    json_t *messages = json_array();
    if (json_is_string(raw)) {
        json_t *m = json_object();
        json_object_set_new(m, s->role_key, json_string("user"));
        json_object_set(m, s->content_key, (json_t *)raw);
        json_t *t = template_message(s, m, "the conversation", true);
        json_decref(m);
        if (!t) return json_decref(messages), -1;
        json_array_append_new(messages, t);
    } else if (json_is_array(raw)) {
        size_t i;
        json_t *m;
        json_array_foreach(raw, i, m) {
            char what[300];
            snprintf(what, sizeof what, "field \"%s\"[%zu]", s->field_messages, i);
            json_t *t = json_is_object(m) ? template_message(s, m, what, false) : NULL;
            if (!t) {
                if (!json_is_object(m)) err_set("%s: expected a message object", what);
                json_decref(messages);
                return -1;
            }
            json_array_append_new(messages, t);
        }
    } else {
        json_decref(messages);
        return err_set("field \"%s\": expected a list of messages or a string", s->field_messages);
    }
    int rc = render_text(s, messages, true, &out->prompt);
    json_decref(messages);
    if (rc != 0) return -1;
    json_t *chosen = response_message(s, row, s->field_chosen);
    json_t *rejected = chosen ? response_message(s, row, s->field_rejected) : NULL;
    return responses(s, chosen, rejected, out);
}

static int dpo_argilla_chat(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const TemplateState *s = f->state;
    if (!pref_field_message(row, s->field_chosen, -1) ||
        !pref_field_message(row, s->field_rejected, -1))
        return -1;
    const json_t *conv = json_object_get(row, s->field_chosen);
    json_t *messages = json_array();
    for (size_t i = 0; i + 1 < json_array_size(conv); i++) {
        char what[300];
        snprintf(what, sizeof what, "field \"%s\"[%zu]", s->field_chosen, i);
        const json_t *m = json_array_get(conv, i);
        json_t *t = json_is_object(m) ? template_message(s, m, what, false) : NULL;
        if (!t) {
            if (!json_is_object(m)) err_set("%s: expected a message object", what);
            json_decref(messages);
            return -1;
        }
        json_array_append_new(messages, t);
    }
    int rc = render_text(s, messages, true, &out->prompt);
    json_decref(messages);
    if (rc != 0) return -1;
    json_t *chosen = response_message(s, row, s->field_chosen);
    json_t *rejected = chosen ? response_message(s, row, s->field_rejected) : NULL;
    return responses(s, chosen, rejected, out);
}

/* -------------------------------------------------------------------------------------- ORPO */

static int open_orpo(PrefFormat *f, const PrefOpenContext *ctx) {
    TemplateState *s = xcalloc(1, sizeof *s);
    f->state = s;
    f->free_state = free_state;
    static const char *const ignored[] = {"chat_template", "chat_template_jinja"};
    note_dropped_keys(ctx, ignored, 2,
                      "Axolotl 0.19's ORPO strategy reads only the top-level chat_template");
    return load_template(s, ctx);
}

static int orpo_message(json_t *list, const char *role, const char *content, bool label) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_string(content));
    json_object_set_new(m, "label", json_boolean(label));
    json_array_append_new(list, m);
    return 0;
}

/* A string content of row[field][index]. */
static int orpo_content(const json_t *row, const char *field, long index, const char **out) {
    const json_t *m = pref_field_message(row, field, index);
    if (!m) return -1;
    const json_t *c = json_object_get(m, "content");
    if (!json_is_string(c)) {
        long n = (long)json_array_size(json_object_get(row, field));
        return err_set("field \"%s\"[%ld]: \"content\" must be a string", field,
                       index < 0 ? n + index : index);
    }
    *out = json_string_value(c);
    return 0;
}

/* What the rendering of prompt + response adds after the prompt. Upstream slices by the prompt's
 * character count whatever precedes it; a template whose full rendering does not start with the
 * prompt rendering is an error here rather than a silently wrong cut. */
static int orpo_response(const TemplateState *s, const json_t *prompt_messages, const char *prompt,
                         const char *content, char **out) {
    json_t *conv = json_deep_copy(prompt_messages);
    orpo_message(conv, "assistant", content, true);
    char *full = NULL;
    int rc = render_text(s, conv, false, &full);
    json_decref(conv);
    if (rc != 0) return -1;
    size_t lp = strlen(prompt);
    if (strncmp(full, prompt, lp) != 0) {
        free(full);
        return err_set("the chat template renders the conversation with the response differently "
                       "from the prompt alone; cannot cut the response out");
    }
    *out = xstrdup(full + lp);
    free(full);
    return 0;
}

/* chat_template.argilla: chosen and rejected are conversations of alternating user / assistant
 * messages (even length) that differ only in the final answer. The prompt conversation is
 * [system if truthy] + for each exchange i: the user message (the row's `prompt` when the row has
 * one -- for every user turn, as upstream does -- else chosen[2i]) and, before the last, the
 * assistant message chosen[2i+1]. Every message carries label (false; true for the final
 * answer). prompt = render(prompt, generation prompt); chosen / rejected = render(prompt +
 * answer) minus the prompt text (no strip). */
static int orpo_argilla(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const TemplateState *s = f->state;
    if (!pref_field_message(row, "chosen", -1) || !pref_field_message(row, "rejected", -1))
        return -1;
    size_t n = json_array_size(json_object_get(row, "chosen"));
    if (n % 2 != 0) return err_set("field \"chosen\": invalid number of turns (%zu messages)", n);
    json_t *messages = json_array();
    int rc = 0;
    if (pref_field_truthy(row, "system")) {
        const json_t *sys = json_object_get(row, "system");
        if (!json_is_string(sys))
            rc = err_set("field \"system\": expected a string");
        else
            orpo_message(messages, "system", json_string_value(sys), false);
    }
    const json_t *prompt_value = pref_field_value(row, "prompt");
    if (rc == 0 && prompt_value && !json_is_string(prompt_value))
        rc = err_set("field \"prompt\": expected a string");
    for (size_t i = 0; rc == 0 && i < n / 2; i++) {
        const char *user = prompt_value ? json_string_value(prompt_value) : NULL;
        if (!user && orpo_content(row, "chosen", (long)(2 * i), &user) != 0) rc = -1;
        if (rc == 0) orpo_message(messages, "user", user, false);
        const char *answer;
        if (rc == 0 && i + 1 < n / 2) {
            if (orpo_content(row, "chosen", (long)(2 * i + 1), &answer) != 0)
                rc = -1;
            else
                orpo_message(messages, "assistant", answer, false);
        }
    }
    const char *chosen = NULL, *rejected = NULL;
    if (rc == 0 && (orpo_content(row, "chosen", -1, &chosen) != 0 ||
                    orpo_content(row, "rejected", -1, &rejected) != 0))
        rc = -1;
    if (rc == 0) rc = render_text(s, messages, true, &out->prompt);
    if (rc == 0) rc = orpo_response(s, messages, out->prompt, chosen, &out->chosen);
    if (rc == 0) rc = orpo_response(s, messages, out->prompt, rejected, &out->rejected);
    json_decref(messages);
    return rc;
}

const PrefType pref_chat_template_types[] = {{.name = "chat_template.default",
                                              .loaders = PREF_LOADER_DPO,
                                              .row = dpo_default,
                                              .open = open_dpo},
                                             {.name = "chat_template.argilla_chat",
                                              .loaders = PREF_LOADER_DPO,
                                              .row = dpo_argilla_chat,
                                              .open = open_dpo},
                                             {.name = "chat_template.argilla",
                                              .loaders = PREF_LOADER_ORPO,
                                              .row = orpo_argilla,
                                              .open = open_orpo},
                                             {.name = NULL}};
