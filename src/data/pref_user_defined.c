/* user_defined.default (axolotl-config.md §4.4, §4.6): field names and format strings given as a
 * mapping under `type:`.
 *
 *   DPO: field_prompt [prompt], field_system [system], field_chosen [chosen], field_rejected
 *        [rejected], prompt_format [{prompt}], chosen_format [{chosen}], rejected_format
 *        [{rejected}].
 *   KTO: field_prompt, field_system, field_completion [completion], field_label [label],
 *        prompt_format, completion_format [{completion}]; label = row[field_label].
 *
 * A format is a Python str.format string with named placeholders only: {name}, and {{ / }} for
 * literal braces. prompt_format may use {prompt} and {system} (the row's system when truthy,
 * else ""), chosen_format {chosen}, rejected_format {rejected}, completion_format {completion}.
 * An empty or null format means the default. Conversions, format specs, indexes and positional
 * fields are refused when the dataset is opened.
 *
 * Upstream's KTO variant raises KeyError when prompt_format has {system} and the row has none;
 * rlhf.c substitutes "", as the DPO variant does (axolotl-config.md §15.7). */
#include "data/pref_types.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *field_prompt, *field_system, *field_chosen, *field_rejected;
    const char *field_completion, *field_label;
    const char *prompt_format, *chosen_format, *rejected_format, *completion_format;
} UserDefined;

typedef struct {
    const char *name;
    const char *value;
} FormatArg;

/* Python's fmt.format(**args) for named fields; *out is malloc'd. */
static int py_format(const char *fmt, const FormatArg *args, size_t n_args, char **out) {
    size_t cap = strlen(fmt) + 1, len = 0;
    for (size_t i = 0; i < n_args; i++)
        cap += strlen(args[i].value);
    char *buf = xmalloc(cap + 1);
    for (const char *p = fmt; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            buf[len++] = *p;
            p += 2;
            continue;
        }
        if (*p == '}') {
            free(buf);
            return err_set("Single '}' encountered in format string");
        }
        if (*p != '{') {
            buf[len++] = *p++;
            continue;
        }
        const char *end = strchr(p + 1, '}');
        if (!end) {
            free(buf);
            return err_set("Single '{' encountered in format string");
        }
        size_t k = (size_t)(end - p - 1);
        const FormatArg *arg = NULL;
        for (size_t i = 0; i < n_args && !arg; i++)
            if (strlen(args[i].name) == k && memcmp(args[i].name, p + 1, k) == 0) arg = &args[i];
        if (!arg) {
            char available[128] = "";
            for (size_t i = 0; i < n_args; i++)
                snprintf(available + strlen(available), sizeof available - strlen(available),
                         "%s{%s}", i ? ", " : "", args[i].name);
            int rc = err_set("placeholder {%.*s} is not available (only %s; write {{ and }} for "
                             "literal braces)",
                             (int)k, p + 1, available);
            free(buf);
            return rc;
        }
        size_t v = strlen(arg->value);
        if (len + v + 1 > cap) buf = xrealloc(buf, (cap = len + v + cap) + 1);
        memcpy(buf + len, arg->value, v);
        len += v;
        p = end + 1;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

static int read_option(const json_t *mapping, const char *key, const char *fallback,
                       const char **out) {
    const json_t *v = json_object_get(mapping, key);
    if (!v || json_is_null(v) ||
        (json_is_string(v) && json_string_length(v) == 0 && strstr(key, "_format"))) {
        *out = fallback;
        return 0;
    }
    if (!json_is_string(v)) return err_set("type.%s: expected a string", key);
    *out = json_string_value(v);
    return 0;
}

/* Checks a format against its placeholders once, so a bad one fails before any row is read. */
static int check_format(const char *key, const char *fmt, const char *const *names, size_t n) {
    FormatArg args[2];
    for (size_t i = 0; i < n; i++)
        args[i] = (FormatArg){names[i], ""};
    char *s;
    if (py_format(fmt, args, n, &s) != 0) return err_prefix("type.%s \"%s\"", key, fmt);
    free(s);
    return 0;
}

static int open_user_defined(PrefFormat *f, const PrefOpenContext *ctx) {
    const json_t *m = json_object_get(ctx->dc->options, "type");
    if (!json_is_object(m))
        return err_set("User-defined dataset type must be a dictionary. Got: %s", ctx->dc->type);
    UserDefined *u = xcalloc(1, sizeof *u);
    f->state = u;
    f->free_state = free;
    static const char *const prompt_names[] = {"prompt", "system"};
    static const char *const chosen_name[] = {"chosen"}, *const rejected_name[] = {"rejected"},
                             *const completion_name[] = {"completion"};
    if (read_option(m, "field_prompt", "prompt", &u->field_prompt) ||
        read_option(m, "field_system", "system", &u->field_system) ||
        read_option(m, "prompt_format", "{prompt}", &u->prompt_format) ||
        check_format("prompt_format", u->prompt_format, prompt_names, 2))
        return -1;
    if (ctx->cfg->rl == RL_KTO)
        return read_option(m, "field_completion", "completion", &u->field_completion) ||
                       read_option(m, "field_label", "label", &u->field_label) ||
                       read_option(m, "completion_format", "{completion}", &u->completion_format) ||
                       check_format("completion_format", u->completion_format, completion_name, 1)
                   ? -1
                   : 0;
    return read_option(m, "field_chosen", "chosen", &u->field_chosen) ||
                   read_option(m, "field_rejected", "rejected", &u->field_rejected) ||
                   read_option(m, "chosen_format", "{chosen}", &u->chosen_format) ||
                   read_option(m, "rejected_format", "{rejected}", &u->rejected_format) ||
                   check_format("chosen_format", u->chosen_format, chosen_name, 1) ||
                   check_format("rejected_format", u->rejected_format, rejected_name, 1)
               ? -1
               : 0;
}

/* format with {name} = str(row[field]). */
static int format_field(const char *fmt, const char *name, const json_t *row, const char *field,
                        char **out) {
    char *value = pref_field_text(row, field);
    if (!value) return -1;
    int rc = py_format(fmt, &(FormatArg){name, value}, 1, out);
    free(value);
    return rc;
}

static int format_prompt(const UserDefined *u, const json_t *row, char **out) {
    char *prompt = pref_field_text(row, u->field_prompt);
    if (!prompt) return -1;
    char *system = pref_field_truthy(row, u->field_system) ? pref_field_text(row, u->field_system)
                                                           : xstrdup("");
    int rc = system ? py_format(u->prompt_format,
                                (FormatArg[]){{"prompt", prompt}, {"system", system}}, 2, out)
                    : -1;
    free(prompt);
    free(system);
    return rc;
}

static int dpo_row(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const UserDefined *u = f->state;
    return format_prompt(u, row, &out->prompt) ||
                   format_field(u->chosen_format, "chosen", row, u->field_chosen, &out->chosen) ||
                   format_field(u->rejected_format, "rejected", row, u->field_rejected,
                                &out->rejected)
               ? -1
               : 0;
}

static int kto_row(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const UserDefined *u = f->state;
    return format_prompt(u, row, &out->prompt) ||
                   format_field(u->completion_format, "completion", row, u->field_completion,
                                &out->completion) ||
                   pref_field_label(row, u->field_label, &out->label)
               ? -1
               : 0;
}

const PrefType pref_user_defined_types[] = {{.name = "user_defined.default",
                                             .loaders = PREF_LOADER_DPO,
                                             .row = dpo_row,
                                             .open = open_user_defined},
                                            {.name = "user_defined.default",
                                             .loaders = PREF_LOADER_KTO,
                                             .row = kto_row,
                                             .open = open_user_defined},
                                            {.name = NULL}};
