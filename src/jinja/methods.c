/* Python methods on values: which a sandboxed template may call (the others are unsafe or
 * unsupported, and say so when called), and calling the dict, list and loop ones; str
 * methods are pystr.c's. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <string.h>

static const char *const str_methods[] = {
    "strip",    "lstrip",    "rstrip",    "split",      "rsplit",       "startswith",
    "endswith", "upper",     "lower",     "title",      "capitalize",   "replace",
    "find",     "rfind",     "index",     "rindex",     "count",        "join",
    "isdigit",  "isalpha",   "isalnum",   "isspace",    "islower",      "isupper",
    "istitle",  "isnumeric", "isdecimal", "splitlines", "removeprefix", "removesuffix",
    "swapcase", "casefold",  NULL,
};
static const char *const str_unsupported[] = {
    "format",       "format_map",  "center",  "ljust",      "rjust",     "zfill",
    "partition",    "rpartition",  "encode",  "expandtabs", "translate", "maketrans",
    "isidentifier", "isprintable", "isascii", NULL,
};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};
static const char *const dict_unsupported[] = {"copy", "fromkeys", NULL};
static const char *const dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const list_methods[] = {"index", "count", NULL};
static const char *const list_unsupported[] = {"copy", NULL};
static const char *const list_unsafe[] = {"append", "clear",   "extend", "insert", "pop",
                                          "remove", "reverse", "sort",   NULL};

JMethodKind jinja_method_kind(const JValue *obj, const char *name) {
    switch (obj->kind) {
    case JV_STRING:
        if (jinja_name_in(str_methods, name)) return JM_OK;
        if (jinja_name_in(str_unsupported, name)) return JM_UNSUPPORTED;
        return JM_NONE;
    case JV_DICT:
        if (jinja_name_in(dict_methods, name)) return JM_OK;
        if (jinja_name_in(dict_unsupported, name)) return JM_UNSUPPORTED;
        if (jinja_name_in(dict_unsafe, name)) return JM_UNSAFE;
        return JM_NONE;
    case JV_LIST:
        if (jinja_name_in(list_methods, name)) return JM_OK;
        if (obj->is_tuple) return JM_NONE;
        if (jinja_name_in(list_unsupported, name)) return JM_UNSUPPORTED;
        if (jinja_name_in(list_unsafe, name)) return JM_UNSAFE;
        return JM_NONE;
    case JV_LOOP:
        if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return JM_OK;
        return JM_NONE;
    default:
        return JM_NONE;
    }
}

JValue *jinja_method_value(JCtx *c, JValue *obj, const char *name, JMethodKind kind) {
    if (kind == JM_UNSAFE)
        return jv_undefined(c->arena, "access to attribute '%s' of '%s' object is unsafe.", name,
                            jv_type_name(obj));
    JValue *v = ja_alloc(c->arena, sizeof *v);
    v->kind = JV_FUNC;
    v->u.fn = ja_alloc(c->arena, sizeof(JFunc));
    v->u.fn->kind = JF_METHOD;
    v->u.fn->name = ja_memdup(c->arena, name, strlen(name));
    v->u.fn->self = obj;
    /* Unsupported methods resolve, so that calling them can say so. */
    return v;
}

JValue *jinja_call_method(JCtx *c, JFunc *fn, const JArgs *a, int line) {
    JValue *self = fn->self;
    const char *name = fn->name;
    JMethodKind mk = jinja_method_kind(self, name);
    if (mk == JM_UNSUPPORTED)
        return jinja_fail(line, "the method %s.%s() is not supported by this renderer",
                          jv_type_name(self), name);
    if (mk == JM_UNSAFE)
        return jinja_fail(line, "access to attribute '%s' of '%s' object is unsafe.", name,
                          jv_type_name(self));
    switch (self->kind) {
    case JV_STRING:
        return pystr_call_method(c, self, name, a, line);
    case JV_DICT: {
        const JDict *d = self->u.dict;
        if (!strcmp(name, "get")) {
            if (a->nkw || a->nargs < 1 || a->nargs > 2)
                return jinja_fail(line, "dict.get() takes 1 or 2 positional arguments");
            JValue *dflt = a->nargs == 2 ? a->args[1] : &jv_none_value;
            JValue *k = a->args[0];
            if (k->kind != JV_STRING) return dflt;
            JValue *v = jv_dict_get(d, k->u.s.s, k->u.s.n);
            return v ? v : dflt;
        }
        if (a->nargs || a->nkw) return jinja_fail(line, "dict.%s() takes no arguments", name);
        JValue *l = jv_list(c->arena, d->n, false);
        l->view = !strcmp(name, "keys")     ? JVIEW_KEYS
                  : !strcmp(name, "values") ? JVIEW_VALUES
                                            : JVIEW_ITEMS;
        for (size_t i = 0; i < d->n; i++) {
            if (!strcmp(name, "keys")) {
                l->u.list.items[i] = jv_str_ref(c->arena, d->items[i].key);
            } else if (!strcmp(name, "values")) {
                l->u.list.items[i] = d->items[i].val;
            } else {
                JValue *pair = jv_list(c->arena, 2, true);
                pair->u.list.items[0] = jv_str_ref(c->arena, d->items[i].key);
                pair->u.list.items[1] = d->items[i].val;
                l->u.list.items[i] = pair;
            }
        }
        return l;
    }
    case JV_LIST: {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "list.%s() takes one argument here", name);
        int64_t count = 0;
        for (size_t i = 0; i < self->u.list.n; i++)
            if (jv_equal(self->u.list.items[i], a->args[0])) {
                if (!strcmp(name, "index")) return jv_int(c->arena, (int64_t)i);
                count++;
            }
        if (!strcmp(name, "index")) return jinja_fail(line, "value is not in list");
        return jv_int(c->arena, count);
    }
    case JV_LOOP:
        if (!strcmp(name, "cycle")) {
            if (a->nargs == 0) return jinja_fail(line, "no items for cycling given");
            return a->args[self->u.loop->index0 % (int64_t)a->nargs];
        }
        return jinja_fail(line, "loop.changed() is not supported by this renderer");
    default:
        return jinja_fail(line, "'%s' object has no method '%s'", jv_type_name(self), name);
    }
}
