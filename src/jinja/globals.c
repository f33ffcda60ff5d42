/* Calling a value, and the globals jinja2 and transformers define: range, namespace, dict,
 * raise_exception and strftime_now. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <math.h>
#include <string.h>
#include <time.h>

static JValue *call_global(JCtx *c, JFunc *fn, const JArgs *a, int line);

JValue *jinja_call(JCtx *c, JFrame *f, JValue *fn, const JArgs *args, int line) {
    (void)f;
    if (fn->kind == JV_UNDEFINED) return jinja_fail_undefined(line, fn);
    if (fn->kind != JV_FUNC)
        return jinja_fail(line, "'%s' object is not callable", jv_type_name(fn));
    switch (fn->u.fn->kind) {
    case JF_MACRO:
        return jinja_call_macro(c, fn->u.fn, args, line);
    case JF_METHOD:
        return jinja_call_method(c, fn->u.fn, args, line);
    case JF_GLOBAL:
        return call_global(c, fn->u.fn, args, line);
    }
    return NULL;
}

static const char *const global_names[] = {"range",           "namespace",    "dict",
                                           "raise_exception", "strftime_now", NULL};
static const char *const unsupported_globals[] = {"lipsum", "cycler", "joiner", NULL};

JValue *jinja_global(JCtx *c, const char *name) {
    bool known = jinja_name_in(global_names, name),
         unsupported = jinja_name_in(unsupported_globals, name);
    if (!known && !unsupported) return NULL;
    JValue *v = ja_alloc(c->arena, sizeof *v);
    v->kind = JV_FUNC;
    v->u.fn = ja_alloc(c->arena, sizeof(JFunc));
    v->u.fn->kind = JF_GLOBAL;
    v->u.fn->name = ja_memdup(c->arena, name, strlen(name));
    return v;
}

static JValue *make_namespace(JCtx *c, const JArgs *a, int line, bool is_dict) {
    JValue *ns = jv_dict(c->arena);
    if (!is_dict) ns->kind = JV_NAMESPACE;
    const char *what = is_dict ? "dict" : "namespace";
    if (a->nargs > 1)
        return jinja_fail(line, "%s expected at most 1 argument, got %zu", what, a->nargs);
    if (a->nargs == 1) {
        JValue *src = a->args[0];
        if (src->kind == JV_DICT || src->kind == JV_NAMESPACE) {
            for (size_t i = 0; i < src->u.dict->n; i++)
                jv_dict_set(c->arena, ns->u.dict, src->u.dict->items[i].key,
                            src->u.dict->items[i].val);
        } else if (src->kind == JV_LIST) {
            for (size_t i = 0; i < src->u.list.n; i++) {
                JValue *pair = src->u.list.items[i];
                if (pair->kind != JV_LIST || pair->u.list.n != 2 ||
                    pair->u.list.items[0]->kind != JV_STRING)
                    return jinja_fail(
                        line, "%s(): sequence items must be (string key, value) pairs", what);
                jv_dict_set(c->arena, ns->u.dict, pair->u.list.items[0]->u.s,
                            pair->u.list.items[1]);
            }
        } else {
            return jinja_fail(line, "%s(): cannot convert '%s' to a mapping", what,
                              jv_type_name(src));
        }
    }
    for (size_t k = 0; k < a->nkw; k++) {
        if (!is_dict && a->kwnames[k].n && a->kwnames[k].s[0] == '_')
            return jinja_fail(line,
                              "Chat templates cannot store underscore-prefixed attributes on a "
                              "namespace, but got '%s'. Please rename the attribute.",
                              a->kwnames[k].s);
        jv_dict_set(c->arena, ns->u.dict, a->kwnames[k], a->kwvals[k]);
    }
    return ns;
}

static JValue *call_global(JCtx *c, JFunc *fn, const JArgs *a, int line) {
    const char *name = fn->name;
    if (!strcmp(name, "range")) {
        if (a->nkw) return jinja_fail(line, "range() takes no keyword arguments");
        if (a->nargs < 1 || a->nargs > 3)
            return jinja_fail(line, "range expected 1 to 3 arguments, got %zu", a->nargs);
        int64_t v[3];
        for (size_t i = 0; i < a->nargs; i++) {
            if (a->args[i]->kind == JV_UNDEFINED) return jinja_fail_undefined(line, a->args[i]);
            if (a->args[i]->kind != JV_INT && a->args[i]->kind != JV_BOOL)
                return jinja_fail(line, "'%s' object cannot be interpreted as an integer",
                                  jv_type_name(a->args[i]));
            v[i] = a->args[i]->kind == JV_INT ? a->args[i]->u.i : a->args[i]->u.b;
        }
        int64_t start = a->nargs == 1 ? 0 : v[0], stop = a->nargs == 1 ? v[0] : v[1];
        int64_t step = a->nargs == 3 ? v[2] : 1;
        if (step == 0) return jinja_fail(line, "range() arg 3 must not be zero");
        double count = 0;
        if (step > 0 && stop > start) count = ceil(((double)stop - (double)start) / (double)step);
        if (step < 0 && start > stop) count = ceil(((double)start - (double)stop) / (double)-step);
        if (count > 100000)
            return jinja_fail(
                line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        JValue *l = jv_list(c->arena, (size_t)count, false);
        for (size_t i = 0; i < (size_t)count; i++)
            l->u.list.items[i] = jv_int(c->arena, start + (int64_t)i * step);
        l->view = JVIEW_RANGE;
        l->range[0] = start;
        l->range[1] = stop;
        l->range[2] = step;
        return l;
    }
    if (!strcmp(name, "namespace")) return make_namespace(c, a, line, false);
    if (!strcmp(name, "dict")) return make_namespace(c, a, line, true);
    if (!strcmp(name, "raise_exception")) {
        JBuf b;
        jb_init(&b, c->arena);
        if (a->nargs >= 1) jv_to_str(&b, a->args[0]);
        return jinja_fail(line, "raise_exception: %s", jb_str(&b).s);
    }
    if (!strcmp(name, "strftime_now")) {
        if (a->nargs != 1 || a->args[0]->kind != JV_STRING)
            return jinja_fail(line, "strftime_now() takes one string argument");
        struct tm tmv;
        if (c->now) {
            tmv = *c->now;
        } else {
            time_t t = time(NULL);
            localtime_r(&t, &tmv);
        }
        const char *fmt = a->args[0]->u.s.s;
        if (fmt[0] == '\0') return jv_cstr(c->arena, "");
        /* strftime reports 0 both for "too small" and for an empty result; grow until it
         * fits or the buffer is absurdly large for the format. */
        for (size_t cap = 256; cap <= ((size_t)1 << 20); cap *= 4) {
            char *buf = ja_alloc(c->arena, cap);
            size_t n = strftime(buf, cap, fmt, &tmv);
            if (n > 0) return jv_str(c->arena, buf, n);
        }
        return jv_cstr(c->arena, "");
    }
    return jinja_fail(line, "the global '%s' is not supported by this renderer", name);
}
