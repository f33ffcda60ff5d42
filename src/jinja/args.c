/* What the builtins share: binding a call's arguments to parameter names the way Python
 * does, reading optional int/bool/str arguments, and iterating a value as Python's iter()
 * does. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <string.h>

int jinja_bind_args(const JArgs *a, const char *what, const char *const *names, size_t n,
                    JValue **out, int line) {
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (a->nargs > n) {
        jinja_fail(line, "%s takes at most %zu argument%s (%zu given)", what, n, n == 1 ? "" : "s",
                   a->nargs);
        return -1;
    }
    for (size_t i = 0; i < a->nargs; i++)
        out[i] = a->args[i];
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (strcmp(names[i], a->kwnames[k].s) == 0) break;
        if (i == n) {
            jinja_fail(line, "%s got an unexpected keyword argument '%s'", what, a->kwnames[k].s);
            return -1;
        }
        if (out[i]) {
            jinja_fail(line, "%s got multiple values for argument '%s'", what, names[i]);
            return -1;
        }
        out[i] = a->kwvals[k];
    }
    return 0;
}

bool jinja_arg_bool(const JValue *v, bool def) {
    return v ? jv_truthy(v) : def;
}

int jinja_arg_int(const JValue *v, int64_t def, int64_t *out, const char *what, int line) {
    if (!v || v->kind == JV_NONE) {
        *out = def;
        return 0;
    }
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    jinja_fail(line, "%s: expected an integer, got '%s'", what, jv_type_name(v));
    return -1;
}

JValue *jinja_str_arg(const JValue *v, const char *what, int line) {
    if (v->kind == JV_STRING) return (JValue *)v;
    return jinja_fail(line, "%s: expected a string, got '%s'", what, jv_type_name(v));
}

int jinja_iterate(JCtx *c, JValue *v, JValue ***items, size_t *n, int line) {
    switch (v->kind) {
    case JV_LIST:
        *items = v->u.list.items;
        *n = v->u.list.n;
        return 0;
    case JV_DICT: {
        const JDict *d = v->u.dict;
        *n = d->n;
        *items = ja_alloc(c->arena, (d->n ? d->n : 1) * sizeof(JValue *));
        for (size_t i = 0; i < d->n; i++)
            (*items)[i] = jv_str_ref(c->arena, d->items[i].key);
        return 0;
    }
    case JV_STRING: {
        size_t count = ju_length(v->u.s.s, v->u.s.n), k = 0;
        if (jinja_charge(c, count, line) != 0) return -1; /* a value per character */
        *items = ja_alloc(c->arena, (count ? count : 1) * sizeof(JValue *));
        for (size_t i = 0; i < v->u.s.n;) {
            size_t start = i;
            ju_decode(v->u.s.s, v->u.s.n, &i);
            (*items)[k++] = jv_str(c->arena, v->u.s.s + start, i - start);
        }
        *n = count;
        return 0;
    }
    case JV_UNDEFINED:
        *items = NULL;
        *n = 0;
        return 0;
    case JV_LOOP:
        *items = v->u.loop->items;
        *n = (size_t)v->u.loop->length;
        return 0;
    case JV_ITER:
        if (v->iter_error) {
            jinja_fail(line, "%s", v->iter_error);
            return -1;
        }
        /* One pass: whoever iterates takes what is left. */
        *items = v->u.list.items;
        *n = v->u.list.n;
        if (v->u.list.n) v->u.list.items += v->u.list.n; /* an empty one may hold NULL */
        v->u.list.n = 0;
        return 0;
    default:
        jinja_fail(line, "'%s' object is not iterable", jv_type_name(v));
        return -1;
    }
}

bool jinja_name_in(const char *const *names, const char *name) {
    for (; *names; names++)
        if (strcmp(*names, name) == 0) return true;
    return false;
}
