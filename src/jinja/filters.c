/* The filter table: every filter jinja2 defines that this renderer implements, by name, with
 * what its subject costs. The parser resolves a name to its row once (jinja_filter_resolve),
 * so an unknown filter is a compile-time error as in jinja2, and rendering indexes the row. */
#include "jinja/filters.h"

#include "common/error.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    JFilterFn *fn;
    /* Whether it goes through the items of a list or dict it is applied to (not so for length,
     * first, default, ...): its subject is charged accordingly (jinja_charge). */
    bool walks_items;
} JFilter;

/* Aliases (d, e, count, forceescape) are rows of their own: errors name the filter as the
 * template wrote it. */
static const JFilter filters[] = {
    {"abs", jf_abs, true},           {"attr", jf_attr, true},
    {"batch", jf_batch, true},       {"capitalize", jf_capitalize, true},
    {"center", jf_center, true},     {"count", jf_length, false},
    {"d", jf_default, false},        {"default", jf_default, false},
    {"dictsort", jf_dictsort, true}, {"e", jf_escape, true},
    {"escape", jf_escape, true},     {"first", jf_first, false},
    {"float", jf_float, true},       {"forceescape", jf_escape, true},
    {"format", jf_format, true},     {"indent", jf_indent, true},
    {"int", jf_int, true},           {"items", jf_items, true},
    {"join", jf_join, true},         {"last", jf_last, false},
    {"length", jf_length, false},    {"list", jf_list, true},
    {"lower", jf_lower, true},       {"map", jf_map, true},
    {"max", jf_max, true},           {"min", jf_min, true},
    {"reject", jf_reject, true},     {"rejectattr", jf_rejectattr, true},
    {"replace", jf_replace, true},   {"reverse", jf_reverse, true},
    {"round", jf_round, true},       {"safe", jf_safe, true},
    {"select", jf_select, true},     {"selectattr", jf_selectattr, true},
    {"sort", jf_sort, true},         {"string", jf_string, true},
    {"sum", jf_sum, true},           {"title", jf_title, true},
    {"tojson", jf_tojson, true},     {"trim", jf_trim, true},
    {"truncate", jf_truncate, true}, {"unique", jf_unique, true},
    {"upper", jf_upper, true},       {"wordcount", jf_wordcount, true},
};

#define NFILTERS ((int)(sizeof filters / sizeof *filters))

/* jinja2 filters this renderer does not implement: named as such in errors. */
static const char *const unsupported_filters[] = {
    "filesizeformat", "groupby", "pprint",   "random",  "slice", "striptags",
    "urlencode",      "urlize",  "wordwrap", "xmlattr", NULL,
};

int jinja_filter_id(const char *name) {
    for (int i = 0; i < NFILTERS; i++)
        if (strcmp(filters[i].name, name) == 0) return i;
    if (jinja_name_in(unsupported_filters, name)) return -2;
    return -1;
}

int jinja_filter_resolve(const char *name, int line) {
    int id = jinja_filter_id(name);
    if (id == -1) jinja_fail(line, "No filter named '%s'.", name);
    if (id == -2) jinja_fail(line, "filter '%s' is not supported by this renderer", name);
    return id < 0 ? -1 : id;
}

bool jinja_filter_walks_items(int id) {
    return filters[id].walks_items;
}

JValue *jinja_apply_filter(JCtx *c, int id, JValue *v, const JArgs *a, int line) {
    if (id < 0 || id >= NFILTERS)
        return jinja_fail(line, "internal error: unknown filter id %d", id);
    char what[64];
    snprintf(what, sizeof what, "filter '%s'", filters[id].name);
    return filters[id].fn(c, v, a, what, line);
}
