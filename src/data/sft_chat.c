#include "data/sft_chat.h"

#include "common/error.h"
#include "data/template_choice.h"

#include <stdlib.h>
#include <string.h>

static int parse_special(const json_t *v, const char *key, SpecialTokenTraining fallback,
                         SpecialTokenTraining *out) {
    *out = fallback;
    if (!v || json_is_null(v)) return 0;
    if (json_is_false(v)) return *out = TRAIN_SPECIAL_NONE, 0;
    const char *s = json_string_value(v);
    static const struct {
        const char *name;
        SpecialTokenTraining value;
    } names[] = {{"turn", TRAIN_SPECIAL_TURN},
                 {"all", TRAIN_SPECIAL_ALL},
                 {"last", TRAIN_SPECIAL_LAST},
                 {"none", TRAIN_SPECIAL_NONE}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i].name) == 0) return *out = names[i].value, 0;
    return err_set("key '%s': expected turn, all, last or none", key);
}

static json_t *default_roles(void) {
    json_t *r = json_object();
    const char *pairs[][2] = {{"human", "user"},          {"user", "user"},
                              {"assistant", "assistant"}, {"gpt", "assistant"},
                              {"system", "system"},       {"tool", "tool"}};
    for (size_t i = 0; i < 6; i++)
        json_object_set_new(r, pairs[i][0], json_string(pairs[i][1]));
    return r;
}

/* roles: {target: [sources]} in the config -> {source: target}. */
static int read_roles(const json_t *v, json_t **out) {
    if (!v || json_is_null(v)) return *out = default_roles(), 0;
    if (!json_is_object(v)) return err_set("key 'roles': expected a mapping of role: [names]");
    *out = json_object();
    const char *target;
    json_t *sources;
    json_object_foreach((json_t *)v, target, sources) {
        if (!json_is_array(sources))
            return err_set("key 'roles.%s': expected a list of names", target);
        size_t i;
        json_t *src;
        json_array_foreach(sources, i, src) {
            if (!json_is_string(src)) return err_set("key 'roles.%s': expected names", target);
            json_object_set_new(*out, json_string_value(src), json_string(target));
        }
    }
    return 0;
}

static const char *map_role(const ChatSftStrategy *s, const char *role) {
    const char *mapped = json_string_value(json_object_get(s->roles, role));
    return mapped ? mapped : role;
}

static const char *opt_string(const json_t *o, const char *key, const char *fallback) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : fallback;
}

int chat_sft_init(ChatSftStrategy *s, const TrainConfig *cfg, const DatasetConfig *dc, int index,
                  const Tokenizer *tok, int32_t eos_id) {
    memset(s, 0, sizeof *s);
    const json_t *o = dc->options;
    s->tok = tok;
    s->eos_id = s->eot_id = eos_id;
    s->field_messages = opt_string(o, "field_messages", "messages");
    s->field_system = opt_string(o, "field_system", "system");
    s->field_tools = opt_string(o, "field_tools", "tools");
    s->drop_system_message = json_is_true(json_object_get(o, "drop_system_message"));
    ChatTemplateSource src = {0};
    char *text = NULL;
    int rc = chat_template_source_load(cfg->tokenizer_config, &src);
    if (rc == 0) s->special_tokens = json_incref(src.special_tokens);
    const char *name = opt_string(o, "chat_template",
                                  cfg->chat_template ? cfg->chat_template : "tokenizer_default");
    if (rc == 0) rc = template_choice_text(name, cfg->chat_template_jinja, &src, &text);
    if (rc == 0) rc = chat_template_compile(text, strlen(text), &s->tpl);
    free(text);
    chat_template_source_free(&src);
    if (rc == 0) rc = read_roles(json_object_get(o, "roles"), &s->roles);
    if (rc == 0) {
        const json_t *map = json_object_get(o, "message_property_mappings");
        if (map && json_is_object(map) && json_object_size(map) > 0) {
            s->property_map = json_deep_copy(map);
        } else {
            s->property_map = json_object();
            const char *keys[] = {"role", "content", "tool", "reasoning_content"};
            for (int i = 0; i < 4; i++)
                json_object_set_new(s->property_map, keys[i], json_string(keys[i]));
        }
        const json_t *rtt = json_object_get(o, "roles_to_train");
        s->roles_to_train = json_array();
        if (rtt && !json_is_null(rtt) && !json_is_array(rtt)) {
            rc = err_set("key 'roles_to_train': expected a list of roles");
        } else if (!rtt || json_is_null(rtt)) {
            json_array_append_new(s->roles_to_train, json_string("assistant"));
        } else {
            size_t i;
            json_t *r;
            json_array_foreach(rtt, i, r) if (json_is_string(r)) json_array_append_new(
                s->roles_to_train, json_string(map_role(s, json_string_value(r))));
        }
    }
    if (rc == 0)
        rc = parse_special(json_object_get(o, "train_on_eos"), "train_on_eos", TRAIN_SPECIAL_TURN,
                           &s->on_eos);
    if (rc == 0)
        rc = parse_special(json_object_get(o, "train_on_eot"), "train_on_eot", s->on_eos,
                           &s->on_eot);
    if (rc == 0 && s->on_eos != s->on_eot) /* the EOT token is the EOS token here */
        rc = err_set(
            "Conflict between train_on_eos and train_on_eot: the EOT token is the EOS token");
    if (rc != 0) {
        chat_sft_free(s);
        return err_prefix("%s:%d: datasets[%d]", cfg->source, dc->line, index);
    }
    return 0;
}

void chat_sft_free(ChatSftStrategy *s) {
    if (s->tpl) chat_template_free(s->tpl);
    json_decref(s->special_tokens);
    json_decref(s->property_map);
    json_decref(s->roles);
    json_decref(s->roles_to_train);
    memset(s, 0, sizeof *s);
}

/* A message of the data as the template sees it (Axolotl's transform_message). */
static json_t *transform_message(const ChatSftStrategy *s, const json_t *msg) {
    json_t *out = json_object();
    const char *key;
    json_t *source;
    json_object_foreach(s->property_map, key, source) {
        const json_t *v = json_object_get(msg, json_string_value(source));
        if (v && !json_is_null(v)) json_object_set(out, key, (json_t *)v);
    }
    const char *role = json_string_value(json_object_get(out, "role"));
    if (role) json_object_set_new(out, "role", json_string(map_role(s, role)));
    /* keys not mapped pass through (the template reads those it uses) */
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)msg, k, v) {
        bool mapped = false;
        json_object_foreach(s->property_map, key, source) mapped |=
            strcmp(json_string_value(source), k) == 0;
        if (!mapped && !json_is_null(v)) json_object_set(out, k, v);
    }
    return out;
}

static int conversation(const ChatSftStrategy *s, const json_t *row, json_t **turns) {
    const json_t *messages = json_object_get(row, s->field_messages);
    if (!messages || json_is_null(messages))
        return err_set("missing field \"%s\" (the conversation; set field_messages)",
                       s->field_messages);
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return err_set("field \"%s\": expected a non-empty list of messages", s->field_messages);
    *turns = json_array();
    json_t *first = transform_message(s, json_array_get(messages, 0));
    const char *first_role = json_string_value(json_object_get(first, "role"));
    bool starts_with_system = first_role && strcmp(first_role, "system") == 0;
    json_decref(first);
    const json_t *system = json_object_get(row, s->field_system);
    if (!starts_with_system && system && !json_is_null(system)) {
        json_t *t = json_object();
        json_object_set_new(t, "role", json_string("system"));
        json_object_set(t, "content", (json_t *)system);
        json_array_append_new(*turns, t);
    }
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) {
            json_decref(*turns);
            return err_set("field \"%s\"[%zu]: expected a message object", s->field_messages, i);
        }
        json_array_append_new(*turns, transform_message(s, m));
    }
    const char *r0 = json_string_value(json_object_get(json_array_get(*turns, 0), "role"));
    if (s->drop_system_message && r0 && strcmp(r0, "system") == 0) json_array_remove(*turns, 0);
    return 0;
}

/* Renders turns with the template and tokenises the text without added special tokens. */
static int render_ids(const ChatSftStrategy *s, json_t *turns, const json_t *tools,
                      int real_last_index, int32_t **ids, size_t *n) {
    json_t *kwargs = real_last_index ? json_object() : NULL;
    if (kwargs) json_object_set_new(kwargs, "real_last_index", json_integer(real_last_index));
    ChatApplyArgs args = {
        .messages = turns, .tools = tools, .special_tokens = s->special_tokens, .kwargs = kwargs};
    ChatRenderResult res;
    int rc = chat_template_apply(s->tpl, &args, &res);
    json_decref(kwargs);
    if (rc != 0) return -1;
    rc = tokenizer_encode(s->tok, res.text, res.len, false, ids, n);
    chat_render_result_free(&res);
    return rc;
}

/* Axolotl's find_turn: [start, end) of turn i's content tokens, or start = end = -1. */
static int find_turn(const ChatSftStrategy *s, json_t *turns, size_t i, const json_t *tools,
                     long *start, long *end) {
    *start = *end = -1;
    json_t *with_dummy = json_array(), *with_content = json_array();
    for (size_t k = 0; k < i; k++) {
        json_array_append(with_dummy, json_array_get(turns, k));
        json_array_append(with_content, json_array_get(turns, k));
    }
    json_t *dummy = json_object();
    json_object_set(dummy, "role", json_object_get(json_array_get(turns, i), "role"));
    json_object_set_new(dummy, "content", json_string("[[dummy_message]]"));
    json_array_append_new(with_dummy, dummy);
    json_array_append(with_content, json_array_get(turns, i));
    int last = (int)json_array_size(turns) - 1;
    int32_t *d = NULL, *f = NULL;
    size_t nd = 0, nf = 0;
    int rc = render_ids(s, with_dummy, tools, last, &d, &nd);
    if (rc == 0) rc = render_ids(s, with_content, tools, last, &f, &nf);
    if (rc == 0 && nd && nf) {
        size_t min = nd < nf ? nd : nf;
        long a = -1, b = -1;
        for (size_t k = 0; k < min && a < 0; k++)
            if (d[k] != f[k]) a = (long)k;
        for (size_t k = 0; k < min && b < 0; k++)
            if (d[nd - 1 - k] != f[nf - 1 - k]) b = (long)(nf - k);
        if (a >= 0 && b >= 0 && b > a) *start = a, *end = b;
    }
    free(d);
    free(f);
    json_decref(with_dummy);
    json_decref(with_content);
    return rc;
}

/* The first position >= from holding `id`, -1 when none. Python's range(-1, n) visits the last
 * element first, so a start of -1 looks there before position 0, as Axolotl does. */
static long find_token(const int32_t *ids, size_t n, long from, int32_t id) {
    if (id < 0) return -1;
    if (from < 0) {
        if (n && ids[n - 1] == id) return -1;
        from = 0;
    }
    for (size_t k = (size_t)from; k < n; k++)
        if (ids[k] == id) return (long)k;
    return -1;
}

static bool role_trained(const ChatSftStrategy *s, const char *role) {
    size_t i;
    json_t *r;
    json_array_foreach(s->roles_to_train, i,
                       r) if (role && strcmp(json_string_value(r), role) == 0) return true;
    return false;
}

int chat_sft_example(const ChatSftStrategy *s, const json_t *row, int32_t **ids_out,
                     uint8_t **labels_out, size_t *n_out) {
    json_t *turns = NULL;
    if (conversation(s, row, &turns) != 0) return -1;
    const json_t *tools = json_object_get(row, s->field_tools);
    if (tools && json_is_null(tools)) tools = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = render_ids(s, turns, tools, 0, &ids, &n);
    uint8_t *labels = rc == 0 ? xcalloc(n ? n : 1, 1) : NULL;
    long last_eos = -1, last_eot = -1;
    size_t n_turns = json_array_size(turns);
    for (size_t i = 0; rc == 0 && i < n_turns; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(turns, i), "role"));
        bool train = role_trained(s, role);
        if (!train && s->on_eos != TRAIN_SPECIAL_ALL && s->on_eot != TRAIN_SPECIAL_ALL) continue;
        long start, end;
        if ((rc = find_turn(s, turns, i, tools, &start, &end)) != 0) break;
        if (train && start >= 0 && end >= 0)
            for (long k = start; k < end && (size_t)k < n; k++)
                labels[k] = 1;
        const struct {
            int32_t id;
            SpecialTokenTraining option;
            long *last;
        } special[] = {{s->eot_id, s->on_eot, &last_eot}, {s->eos_id, s->on_eos, &last_eos}};
        for (int t = 0; t < 2; t++) {
            long at = find_token(ids, n, end, special[t].id);
            if (at == -1 || labs(at - end) > 3) continue; /* Axolotl allows some padding */
            *special[t].last = at;
            if (special[t].option == TRAIN_SPECIAL_ALL ||
                (special[t].option == TRAIN_SPECIAL_TURN && train))
                labels[at] = 1;
        }
    }
    if (rc == 0 && s->on_eot == TRAIN_SPECIAL_LAST && last_eot >= 0) labels[last_eot] = 1;
    if (rc == 0 && s->on_eos == TRAIN_SPECIAL_LAST && last_eos >= 0) labels[last_eos] = 1;
    json_decref(turns);
    if (rc != 0) {
        free(ids);
        free(labels);
        return -1;
    }
    *ids_out = ids;
    *labels_out = labels;
    *n_out = n;
    return 0;
}
