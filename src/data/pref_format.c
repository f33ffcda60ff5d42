/* Type resolution (axolotl-config.md §4.1), the typeless row, and the row helpers every family
 * shares. */
#include "data/pref_types.h"

#include "jinja/jinja.h"
#include "common/error.h"
#include "common/json_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void pref_strings_free(PrefStrings *s) {
    free(s->prompt);
    free(s->chosen);
    free(s->rejected);
    free(s->completion);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------------------ row helpers */

char *pref_py_str(const json_t *v) {
    if (json_is_string(v) && !json_bignum_text(v)) return xstrdup(json_string_value(v));
    JArena arena = {0};
    JBuf b;
    jb_init(&b, &arena);
    char *out = jv_to_str(&b, jv_from_json(&arena, v)) == 0 ? xstrdup(jb_str(&b).s) : NULL;
    ja_free(&arena);
    if (!out) err_set("a value with no text form");
    return out;
}

const json_t *pref_field_value(const json_t *row, const char *key) {
    const json_t *v = json_object_get(row, key);
    return v && !json_is_null(v) ? v : NULL;
}

char *pref_field_text(const json_t *row, const char *key) {
    const json_t *v = pref_field_value(row, key);
    if (!v) {
        err_set("missing field \"%s\"", key);
        return NULL;
    }
    char *s = pref_py_str(v);
    if (!s) err_prefix("field \"%s\"", key);
    return s;
}

bool pref_field_truthy(const json_t *row, const char *key) {
    const json_t *v = json_object_get(row, key);
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0.0;
    case JSON_TRUE:
        return true;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    default:
        return false;
    }
}

const json_t *pref_field_message(const json_t *row, const char *key, long index) {
    const json_t *list = pref_field_value(row, key);
    if (!list) {
        err_set("missing field \"%s\"", key);
        return NULL;
    }
    long n = json_is_array(list) ? (long)json_array_size(list) : -1;
    long at = index < 0 ? n + index : index;
    if (n < 0 || at < 0 || at >= n) {
        err_set("field \"%s\": expected a list of at least %ld messages", key,
                index < 0 ? -index : index + 1);
        return NULL;
    }
    const json_t *m = json_array_get(list, (size_t)at);
    if (!json_is_object(m)) {
        err_set("field \"%s\"[%ld]: expected a message object", key, at);
        return NULL;
    }
    return m;
}

char *pref_message_text(const json_t *row, const char *key, long index, const char *prop) {
    const json_t *m = pref_field_message(row, key, index);
    if (!m) return NULL;
    const json_t *v = pref_field_value(m, prop);
    if (!v) {
        long n = (long)json_array_size(json_object_get(row, key));
        err_set("field \"%s\"[%ld]: missing \"%s\"", key, index < 0 ? n + index : index, prop);
        return NULL;
    }
    return pref_py_str(v);
}

int pref_field_label(const json_t *row, const char *key, bool *label) {
    const json_t *v = pref_field_value(row, key);
    if (!v)
        return err_set("missing field \"%s\" (KTO rows need a label: true = desirable, false = "
                       "undesirable)",
                       key);
    if (!json_is_boolean(v)) return err_set("field \"%s\": expected true or false", key);
    *label = json_is_true(v);
    return 0;
}

char *pref_concat(const char *first, ...) {
    va_list ap;
    size_t n = 0;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *))
        n += strlen(s);
    va_end(ap);
    char *out = xmalloc(n + 1), *p = out;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *)) {
        size_t k = strlen(s);
        memcpy(p, s, k);
        p += k;
    }
    va_end(ap);
    *p = '\0';
    return out;
}

/* ------------------------------------------------------------------- rows used as they are */

static char *string_field(const json_t *row, const char *key) {
    const json_t *v = pref_field_value(row, key);
    if (!v) {
        err_set("missing field \"%s\"", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        err_set("field \"%s\": expected a string (rows without a `type` are used as they are)",
                key);
        return NULL;
    }
    return xstrdup(json_string_value(v));
}

/* TRL's own columns: prompt, chosen, rejected (kto: prompt, completion, label, or a pair). */
static int row_as_is(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    (void)f;
    out->prompt = string_field(row, "prompt");
    if (!out->prompt) return -1;
    return (out->chosen = string_field(row, "chosen")) &&
                   (out->rejected = string_field(row, "rejected"))
               ? 0
               : -1;
}

static int kto_row_as_is(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    if (!json_object_get(row, "completion") && json_object_get(row, "chosen") &&
        json_object_get(row, "rejected")) {
        out->paired = true;
        return row_as_is(f, row, out);
    }
    out->prompt = string_field(row, "prompt");
    if (!out->prompt || !(out->completion = string_field(row, "completion"))) return -1;
    return pref_field_label(row, "label", &out->label);
}

static const PrefType typeless_pairs = {
    .name = "(none)", .loaders = PREF_LOADER_DPO | PREF_LOADER_ORPO, .row = row_as_is};
static const PrefType typeless_kto = {
    .name = "(none)", .loaders = PREF_LOADER_KTO, .row = kto_row_as_is};

/* Axolotl's passthrough.default: the row unchanged, i.e. as if no type were given. */
static const PrefType passthrough_types[] = {
    {.name = "passthrough.default", .loaders = PREF_LOADER_DPO, .row = row_as_is}, {.name = NULL}};

/* --------------------------------------------------------------------------------- catalogue */

static const PrefType *const families[] = {pref_chatml_types,       pref_llama3_types,
                                           pref_zephyr_types,       pref_chat_template_types,
                                           pref_user_defined_types, passthrough_types};
#define N_FAMILIES (sizeof families / sizeof *families)

static PrefLoader loader_of(RlMethod rl) {
    return rl == RL_KTO ? PREF_LOADER_KTO : rl == RL_ORPO ? PREF_LOADER_ORPO : PREF_LOADER_DPO;
}

static const PrefType *find_type(const char *name, PrefLoader loader) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const PrefType *t = families[f]; t->name; t++)
            if ((t->loaders & loader) && strcmp(t->name, name) == 0) return t;
    return NULL;
}

const char *pref_format_type_names(RlMethod rl) {
    static char lists[3][2048];
    PrefLoader loader = loader_of(rl);
    char *buf = lists[loader == PREF_LOADER_DPO ? 0 : loader == PREF_LOADER_KTO ? 1 : 2];
    if (buf[0]) return buf;
    size_t len = 0;
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const PrefType *t = families[f]; t->name; t++)
            if (t->loaders & loader)
                len += (size_t)snprintf(buf + len, 2048 - len, "%s%s", len ? ", " : "", t->name);
    return buf;
}

int pref_format_open(PrefFormat **out, const TrainConfig *cfg, int index, FILE *log) {
    const DatasetConfig *dc = &cfg->datasets[index];
    const json_t *type_value = json_object_get(dc->options, "type");
    PrefLoader loader = loader_of(cfg->rl);
    const PrefType *type = NULL;
    if (json_is_object(type_value)) {
        type = find_type("user_defined.default", loader);
    } else if (!dc->type) {
        type = loader == PREF_LOADER_KTO ? &typeless_kto : &typeless_pairs;
    } else {
        char name[512];
        snprintf(name, sizeof name, "%s%s", dc->type, strchr(dc->type, '.') ? "" : ".default");
        type = find_type(name, loader);
        if (!type)
            return err_set("%s:%d: datasets[%d].type: \"%s\" is not a dataset type for rl: %s; "
                           "the types for rl: %s are %s",
                           cfg->source, dc->line, index, dc->type, rl_method_name(cfg->rl),
                           rl_method_name(cfg->rl), pref_format_type_names(cfg->rl));
    }
    if (!type)
        return err_set("%s:%d: datasets[%d].type: a mapping (user_defined) is not a dataset type "
                       "for rl: %s; the types for rl: %s are %s",
                       cfg->source, dc->line, index, rl_method_name(cfg->rl),
                       rl_method_name(cfg->rl), pref_format_type_names(cfg->rl));
    if (type->deprecated_for)
        fprintf(log,
                "warning: %s:%d: datasets[%d].type: \"%s\" is deprecated (Axolotl renamed it to "
                "\"%s\" and no longer accepts the old name); using %s\n",
                cfg->source, dc->line, index, dc->type, type->deprecated_for, type->deprecated_for);
    PrefFormat *f = xcalloc(1, sizeof *f);
    f->type = type;
    PrefOpenContext ctx = {cfg, dc, index, log};
    if (type->open && type->open(f, &ctx) != 0) {
        pref_format_close(f);
        return err_prefix("%s:%d: datasets[%d] (type %s)", cfg->source, dc->line, index,
                          type->name);
    }
    *out = f;
    return 0;
}

void pref_format_close(PrefFormat *f) {
    if (!f) return;
    if (f->free_state) f->free_state(f->state);
    free(f);
}

int pref_format_row(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    memset(out, 0, sizeof *out);
    if (f->type->row(f, row, out) == 0) return 0;
    pref_strings_free(out);
    return -1;
}
