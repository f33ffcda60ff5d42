/* Expression evaluation: names, attribute and item access, slices, calls, filters, tests,
 * operators and literals, each node charged to the render's allowance (limits.c). Errors
 * carry the template line, as jinja2's do. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

JValue *jinja_fail(int line, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set("line %d: %s", line, msg);
    return NULL;
}

JValue *jinja_fail_undefined(int line, const JValue *undef) {
    return jinja_fail(line, "%s", undef->u.undef_msg);
}

/* Charges the value a filter or test is applied to: a string is always read through, a list
 * or dict only by builtins that walk its items (a template may ask `messages|length` once per
 * message; that must not cost the square of the conversation). */
static int charge_subject(JCtx *c, JValue *v, bool walks_items, int line) {
    if (v->kind == JV_STRING || walks_items) return jinja_charge_values(c, &v, 1, line);
    return jinja_charge(c, 1, line);
}

JValue *jinja_lookup(JCtx *c, JFrame *f, JStr name) {
    for (; f; f = f->parent) {
        JValue *v = jv_dict_get(&f->vars, name.s, name.n);
        if (v) return v;
    }
    JValue *v = jv_dict_get(c->globals, name.s, name.n);
    if (v) return v;
    v = jinja_global(c, name.s);
    if (v) return v;
    return jv_undefined(c->arena, "'%s' is undefined", name.s);
}

/* ---------------------------------------------------------------- slicing */

static int64_t clamp_index(int64_t i, int64_t len, bool negative_step, bool is_start) {
    (void)is_start;
    if (i < 0) {
        i += len;
        if (i < 0) i = negative_step ? -1 : 0;
    } else if (i >= len) {
        i = negative_step ? len - 1 : len;
    }
    return i;
}

static int slice_part(JCtx *c, JFrame *f, const JNode *n, bool *present, int64_t *out) {
    *present = false;
    if (!n) return 0;
    JValue *v = jinja_eval(c, f, n);
    if (!v) return -1;
    if (v->kind == JV_NONE) return 0;
    if (v->kind != JV_INT && v->kind != JV_BOOL) {
        jinja_fail(n->line, "slice indices must be integers or None");
        return -1;
    }
    *present = true;
    *out = jv_as_int(v);
    return 0;
}

static JValue *eval_slice(JCtx *c, JFrame *f, JValue *obj, const JNode *s) {
    bool has_start, has_stop, has_step;
    int64_t start = 0, stop = 0, step = 1;
    if (slice_part(c, f, s->a, &has_start, &start) != 0 ||
        slice_part(c, f, s->b, &has_stop, &stop) != 0 ||
        slice_part(c, f, s->c, &has_step, &step) != 0)
        return NULL;
    if (!has_step) step = 1;
    if (step == 0) return jinja_fail(s->line, "slice step cannot be zero");
    if (obj->kind == JV_UNDEFINED) return jinja_fail_undefined(s->line, obj);
    /* Strings are sliced by code point. */
    size_t *offs = NULL;
    int64_t len;
    if (obj->kind == JV_STRING) {
        len = (int64_t)ju_length(obj->u.s.s, obj->u.s.n);
        offs = ja_alloc(c->arena, (size_t)(len + 1) * sizeof *offs);
        size_t i = 0;
        for (int64_t k = 0; k < len; k++) {
            offs[k] = i;
            ju_decode(obj->u.s.s, obj->u.s.n, &i);
        }
        offs[len] = obj->u.s.n;
    } else if (obj->kind == JV_LIST && (obj->view == JVIEW_NONE || obj->view == JVIEW_RANGE)) {
        len = (int64_t)obj->u.list.n;
    } else {
        /* jinja2's getitem swallows the TypeError: the result is undefined. */
        return jv_undefined(c->arena, "'%s' object has no element slice(...)", jv_type_name(obj));
    }
    bool neg = step < 0;
    start = has_start ? clamp_index(start, len, neg, true) : (neg ? len - 1 : 0);
    stop = has_stop ? clamp_index(stop, len, neg, false) : (neg ? -1 : len);
    int64_t count = 0;
    if (!neg && stop > start) count = (stop - start + step - 1) / step;
    if (neg && start > stop) count = (start - stop + (-step) - 1) / (-step);
    if (obj->kind == JV_STRING) {
        JBuf b;
        jb_init(&b, c->arena);
        for (int64_t k = 0, i = start; k < count; k++, i += step)
            jb_put(&b, obj->u.s.s + offs[i], offs[i + 1] - offs[i]);
        return jv_str_ref(c->arena, jb_str(&b));
    }
    JValue *r = jv_list(c->arena, (size_t)count, obj->is_tuple);
    for (int64_t k = 0, i = start; k < count; k++, i += step)
        r->u.list.items[k] = obj->u.list.items[i];
    if (obj->view == JVIEW_RANGE && count > 0) {
        r->view = JVIEW_RANGE;
        r->range[0] = obj->range[0] + start * obj->range[2];
        r->range[2] = obj->range[2] * step;
        r->range[1] = r->range[0] + count * r->range[2];
    }
    return r;
}

/* ---------------------------------------------------------------- expressions */

/* A call's arguments: the positional ones, then *star's items; the keyword ones, then **dstar's
 * items, then `extra` (the caller of a call block; NULL: none) as caller=. Python's rules: *x
 * takes any iterable, **x a mapping with string keys, and a name given twice is an error. */
static int eval_args_with(JCtx *c, JFrame *f, const JNode *n, JValue *extra, JArgs *args) {
    JValue **star = NULL, *dstar = NULL;
    size_t nstar = 0, ndstar = 0;
    if (n->star) {
        JValue *v = jinja_eval(c, f, n->star);
        if (!v) return -1;
        if (jinja_iterate(c, v, &star, &nstar, n->line) != 0) {
            jinja_fail(n->line, "argument after * must be an iterable, not %s", jv_type_name(v));
            return -1;
        }
    }
    if (n->dstar) {
        dstar = jinja_eval(c, f, n->dstar);
        if (!dstar) return -1;
        if (dstar->kind != JV_DICT) {
            jinja_fail(n->line, "argument after ** must be a mapping, not %s", jv_type_name(dstar));
            return -1;
        }
        ndstar = dstar->u.dict->n;
    }
    args->nargs = n->items.n + nstar;
    args->args = args->nargs ? ja_alloc(c->arena, args->nargs * sizeof(JValue *)) : NULL;
    for (size_t i = 0; i < n->items.n; i++)
        if (!(args->args[i] = jinja_eval(c, f, n->items.v[i]))) return -1;
    for (size_t i = 0; i < nstar; i++)
        args->args[n->items.n + i] = star[i];
    size_t nkw = n->kwvals.n + ndstar + (extra != NULL);
    args->nkw = nkw;
    args->kwnames = n->kwnames;
    args->kwvals = nkw ? ja_alloc(c->arena, nkw * sizeof(JValue *)) : NULL;
    for (size_t i = 0; i < n->kwvals.n; i++)
        if (!(args->kwvals[i] = jinja_eval(c, f, n->kwvals.v[i]))) return -1;
    if (nkw > n->kwvals.n) {
        JStr *names = ja_alloc(c->arena, nkw * sizeof(JStr));
        if (n->kwvals.n) memcpy(names, n->kwnames, n->kwvals.n * sizeof(JStr));
        size_t k = n->kwvals.n;
        for (size_t i = 0; i < ndstar; i++, k++) {
            names[k] = dstar->u.dict->items[i].key;
            args->kwvals[k] = dstar->u.dict->items[i].val;
        }
        if (extra) {
            names[k] = (JStr){"caller", 6};
            args->kwvals[k] = extra;
        }
        for (size_t i = 0; i < nkw; i++)
            for (size_t j = 0; j < i; j++)
                if (names[i].n == names[j].n && memcmp(names[i].s, names[j].s, names[i].n) == 0) {
                    jinja_fail(n->line, "got multiple values for keyword argument '%s'",
                               names[i].s);
                    return -1;
                }
        args->kwnames = names;
    }
    if (jinja_charge_values(c, args->args, args->nargs, n->line) != 0) return -1;
    return jinja_charge_values(c, args->kwvals, args->nkw, n->line);
}

static int eval_args(JCtx *c, JFrame *f, const JNode *n, JArgs *args) {
    return eval_args_with(c, f, n, NULL, args);
}

/* The filter of N_FILTER node n applied to v, its arguments evaluated in f. */
static JValue *apply_filter_node(JCtx *c, JFrame *f, const JNode *n, JValue *v) {
    if (n->op < 0) /* a jinja2 filter this renderer lacks: fails here, when applied */
        return jinja_fail(n->line, "filter '%s' is not supported by this renderer", n->name.s);
    JArgs args;
    if (eval_args(c, f, n, &args) != 0 ||
        charge_subject(c, v, jinja_filter_walks_items(n->op), n->line) != 0)
        return NULL;
    return jinja_apply_filter(c, n->op, v, &args, n->line);
}

JValue *jinja_apply_filter_chain(JCtx *c, JFrame *f, const JNode *n, JValue *v) {
    if (!n) return v;
    if (n->a) {
        v = jinja_apply_filter_chain(c, f, n->a, v);
        if (!v) return NULL;
    }
    return apply_filter_node(c, f, n, v);
}

JValue *jinja_eval_call(JCtx *c, JFrame *f, const JNode *n, JValue *caller) {
    JValue *fn = jinja_eval(c, f, n->a);
    if (!fn) return NULL;
    JArgs args;
    if (eval_args_with(c, f, n, caller, &args) != 0) return NULL;
    if (fn->kind == JV_FUNC && fn->u.fn->kind == JF_METHOD &&
        jinja_charge_values(c, &fn->u.fn->self, 1, n->line) != 0)
        return NULL;
    return jinja_call(c, f, fn, &args, n->line);
}

JValue *jinja_eval(JCtx *c, JFrame *f, const JNode *n) {
    if (jinja_charge(c, 1, n->line) != 0) return NULL;
    switch (n->kind) {
    case N_CONST:
        return n->value;
    case N_NAME:
        return jinja_lookup(c, f, n->name);
    case N_GETATTR: {
        JValue *obj = jinja_eval(c, f, n->a);
        if (!obj) return NULL;
        if (obj->kind == JV_UNDEFINED) return jinja_fail_undefined(n->line, obj);
        return jinja_getattr(c, obj, n->name.s, n->name.n);
    }
    case N_GETITEM: {
        JValue *obj = jinja_eval(c, f, n->a);
        if (!obj) return NULL;
        /* Indexing a list or dict is one step; a string is walked code point by code point. */
        if (obj->kind == JV_STRING && jinja_charge_values(c, &obj, 1, n->line) != 0) return NULL;
        if (n->b->kind == N_SLICE) return eval_slice(c, f, obj, n->b);
        JValue *key = jinja_eval(c, f, n->b);
        if (!key) return NULL;
        if (obj->kind == JV_UNDEFINED) return jinja_fail_undefined(n->line, obj);
        return jinja_getitem(c, obj, key, n->line);
    }
    case N_CALL:
        return jinja_eval_call(c, f, n, NULL);
    case N_FILTER: {
        JValue *v = jinja_eval(c, f, n->a);
        return v ? apply_filter_node(c, f, n, v) : NULL;
    }
    case N_TEST: {
        JValue *v = jinja_eval(c, f, n->a);
        if (!v) return NULL;
        JArgs args;
        if (eval_args(c, f, n, &args) != 0 ||
            charge_subject(c, v, jinja_test_walks_items(n->op), n->line) != 0)
            return NULL;
        bool res;
        if (jinja_apply_test(c, n->op, v, &args, n->line, &res) != 0) return NULL;
        return jv_bool(res);
    }
    case N_NOT: {
        JValue *v = jinja_eval(c, f, n->a);
        return v ? jv_bool(!jv_truthy(v)) : NULL;
    }
    case N_NEG:
    case N_POS: {
        JValue *v = jinja_eval(c, f, n->a);
        if (!v) return NULL;
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(n->line, v);
        if (!jv_is_number(v))
            return jinja_fail(n->line, "bad operand type for unary %c: '%s'",
                              n->kind == N_NEG ? '-' : '+', jv_type_name(v));
        if (n->kind == N_POS) return v->kind == JV_BOOL ? jv_int(c->arena, v->u.b) : v;
        if (v->kind == JV_FLOAT) return jv_float(c->arena, -v->u.f);
        if (jv_as_int(v) == INT64_MIN) return jinja_fail(n->line, "integer overflow");
        return jv_int(c->arena, -jv_as_int(v));
    }
    case N_BINOP: {
        JValue *a = jinja_eval(c, f, n->a);
        if (!a) return NULL;
        JValue *b = jinja_eval(c, f, n->b);
        if (!b) return NULL;
        JValue *operands[2] = {a, b};
        if (jinja_charge_values(c, operands, 2, n->line) != 0) return NULL;
        return jinja_binop(c, n->op, a, b, n->line);
    }
    case N_AND: {
        JValue *a = jinja_eval(c, f, n->a);
        if (!a || !jv_truthy(a)) return a;
        return jinja_eval(c, f, n->b);
    }
    case N_OR: {
        JValue *a = jinja_eval(c, f, n->a);
        if (!a || jv_truthy(a)) return a;
        return jinja_eval(c, f, n->b);
    }
    case N_CONCAT: {
        JBuf b;
        jb_init(&b, c->arena);
        for (size_t i = 0; i < n->items.n; i++) {
            JValue *v = jinja_eval(c, f, n->items.v[i]);
            if (!v || jinja_charge_values(c, &v, 1, n->line) != 0) return NULL;
            if (jv_to_str(&b, v) != 0) return jinja_fail(n->line, "%s", err_msg());
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    case N_COMPARE: {
        JValue *left = jinja_eval(c, f, n->a);
        if (!left) return NULL;
        for (size_t i = 0; i < n->items.n; i++) {
            JValue *right = jinja_eval(c, f, n->items.v[i]);
            JValue *operands[2] = {left, right};
            if (!right || jinja_charge_values(c, operands, 2, n->line) != 0) return NULL;
            bool res;
            if (jinja_compare(c, n->cmp_ops[i], left, right, n->line, &res) != 0) return NULL;
            if (!res) return &jv_false_value;
            left = right;
        }
        return &jv_true_value;
    }
    case N_CONDEXPR: {
        JValue *t = jinja_eval(c, f, n->a);
        if (!t) return NULL;
        if (jv_truthy(t)) return jinja_eval(c, f, n->b);
        if (n->c) return jinja_eval(c, f, n->c);
        return jv_undefined(c->arena,
                            "the inline if-expression on line %d evaluated to false and no else "
                            "section was defined.",
                            n->line);
    }
    case N_LIST:
    case N_TUPLE: {
        JValue *l = jv_list(c->arena, n->items.n, n->kind == N_TUPLE);
        for (size_t i = 0; i < n->items.n; i++)
            if (!(l->u.list.items[i] = jinja_eval(c, f, n->items.v[i]))) return NULL;
        return l;
    }
    case N_DICT: {
        JValue *d = jv_dict(c->arena);
        for (size_t i = 0; i + 1 < n->items.n; i += 2) {
            JValue *k = jinja_eval(c, f, n->items.v[i]);
            if (!k) return NULL;
            if (k->kind != JV_STRING)
                return jinja_fail(n->line,
                                  "dict keys of type '%s' are not supported by this renderer "
                                  "(only strings)",
                                  jv_type_name(k));
            JValue *v = jinja_eval(c, f, n->items.v[i + 1]);
            if (!v) return NULL;
            jv_dict_set(c->arena, d->u.dict, k->u.s, v);
        }
        return d;
    }
    default:
        return jinja_fail(n->line, "internal error: unexpected node in expression");
    }
}
