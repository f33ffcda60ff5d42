/* The value type of the Jinja subset: construction, undefined values with jinja2's wording,
 * dicts, conversion from JSON, truthiness and type names, and Python == and <. */
#include "jinja/jinja_internal.h"

#include "common/error.h"
#include "common/json_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- values */

JValue jv_none_value = {.kind = JV_NONE};
JValue jv_true_value = {.kind = JV_BOOL, .u.b = true};
JValue jv_false_value = {.kind = JV_BOOL, .u.b = false};
JValue jv_undefined_value = {.kind = JV_UNDEFINED, .u.undef_msg = "value is undefined"};

JValue *jv_int(JArena *a, int64_t i) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_INT;
    v->u.i = i;
    return v;
}

JValue *jv_float(JArena *a, double f) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_FLOAT;
    v->u.f = f;
    return v;
}

JValue *jv_bool(bool b) {
    return b ? &jv_true_value : &jv_false_value;
}

JValue *jv_str(JArena *a, const char *s, size_t n) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_STRING;
    v->u.s.s = ja_memdup(a, s, n);
    v->u.s.n = n;
    return v;
}

JValue *jv_str_ref(JArena *a, JStr s) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_STRING;
    v->u.s = s;
    return v;
}

JValue *jv_cstr(JArena *a, const char *s) {
    return jv_str(a, s, strlen(s));
}

JValue *jv_list(JArena *a, size_t n, bool is_tuple) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_LIST;
    v->is_tuple = is_tuple;
    v->u.list.n = n;
    v->u.list.items = n ? ja_alloc(a, n * sizeof(JValue *)) : NULL;
    return v;
}

JValue *jv_list_of(JArena *a, JValue *const *items, size_t n) {
    JValue *l = jv_list(a, n, false);
    for (size_t i = 0; i < n; i++)
        l->u.list.items[i] = items[i];
    return l;
}

JValue *jv_iter(JArena *a, JValue **items, size_t n, const char *iter_name) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_ITER;
    v->u.list.items = items;
    v->u.list.n = n;
    v->iter_name = iter_name;
    return v;
}

JValue *jv_dict(JArena *a) {
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_DICT;
    v->u.dict = ja_alloc(a, sizeof(JDict));
    return v;
}

JValue *jv_undefined(JArena *a, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_UNDEFINED;
    v->u.undef_msg = ja_memdup(a, msg, strlen(msg));
    return v;
}

/* jinja2's object_type_repr: "dict object", "None", ... */
static const char *object_type_repr(const JValue *v) {
    switch (v->kind) {
    case JV_NONE:
        return "None";
    case JV_UNDEFINED:
        return "Undefined";
    case JV_BOOL:
        return "bool object";
    case JV_INT:
    case JV_BIGINT:
        return "int object";
    case JV_FLOAT:
        return "float object";
    case JV_STRING:
        return "str object";
    case JV_LIST:
        return v->is_tuple ? "tuple object" : "list object";
    case JV_DICT:
        return "dict object";
    case JV_NAMESPACE:
        return "jinja2.utils.Namespace object";
    case JV_FUNC:
        return "function object";
    case JV_LOOP:
        return "jinja2.runtime.LoopContext object";
    case JV_ITER:
        return "generator object";
    }
    return "object";
}

JValue *jv_undefined_attr(JArena *a, const JValue *obj, const char *attr) {
    if (obj->kind == JV_NONE) return jv_undefined(a, "'None' has no attribute '%s'", attr);
    return jv_undefined(a, "'%s' has no attribute '%s'", object_type_repr(obj), attr);
}

JValue *jv_undefined_item(JArena *a, const JValue *obj, const JValue *key) {
    JBuf b;
    jb_init(&b, a);
    jv_repr(&b, key);
    JStr k = jb_str(&b);
    if (key->kind == JV_STRING)
        return jv_undefined(a, "'%s' has no attribute %s", object_type_repr(obj), k.s);
    return jv_undefined(a, "'%s' has no element %s", object_type_repr(obj), k.s);
}

JValue *jv_dict_get(const JDict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].key.n == n && memcmp(d->items[i].key.s, key, n) == 0)
            return d->items[i].val;
    return NULL;
}

void jv_dict_set(JArena *a, JDict *d, JStr key, JValue *val) {
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].key.n == key.n && memcmp(d->items[i].key.s, key.s, key.n) == 0) {
            d->items[i].val = val;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        JPair *items = ja_alloc(a, cap * sizeof *items);
        if (d->n) memcpy(items, d->items, d->n * sizeof *items);
        d->items = items;
        d->cap = cap;
    }
    d->items[d->n].key = key;
    d->items[d->n].val = val;
    d->n++;
}

JValue *jv_from_json(JArena *a, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        JValue *v = jv_dict(a);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) {
            size_t n = strlen(k);
            jv_dict_set(a, v->u.dict, (JStr){ja_memdup(a, k, n), n}, jv_from_json(a, x));
        }
        return v;
    }
    case JSON_ARRAY: {
        JValue *v = jv_list(a, json_array_size(j), false);
        for (size_t i = 0; i < v->u.list.n; i++)
            v->u.list.items[i] = jv_from_json(a, json_array_get(j, i));
        return v;
    }
    case JSON_STRING: {
        const char *big = json_bignum_text(j);
        if (!big) return jv_str(a, json_string_value(j), json_string_length(j));
        JValue *v = json_bignum_is_integer(big) ? jv_int_from_text(a, big, strlen(big)) : NULL;
        return v ? v : jv_float(a, strtod(big, NULL));
    }
    case JSON_INTEGER:
        return jv_int(a, (int64_t)json_integer_value(j));
    case JSON_REAL:
        return jv_float(a, json_real_value(j));
    case JSON_TRUE:
        return &jv_true_value;
    case JSON_FALSE:
        return &jv_false_value;
    case JSON_NULL:
        return &jv_none_value;
    }
    return &jv_none_value;
}

bool jv_truthy(const JValue *v) {
    switch (v->kind) {
    case JV_UNDEFINED:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0.0;
    case JV_STRING:
        return v->u.s.n != 0;
    case JV_LIST:
        return v->u.list.n != 0;
    case JV_DICT:
        return v->u.dict->n != 0;
    default:
        return true;
    }
}

bool jv_is_number(const JValue *v) {
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}

int64_t jv_as_int(const JValue *v) {
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

double jv_as_double(const JValue *v) {
    if (v->kind == JV_BIGINT) return jv_bigint_double(v);
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : v->u.b ? 1.0 : 0.0;
}

const char *jv_type_name(const JValue *v) {
    switch (v->kind) {
    case JV_UNDEFINED:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
    case JV_BIGINT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STRING:
        return "str";
    case JV_LIST:
        switch (v->view) {
        case JVIEW_ITEMS:
            return "dict_items";
        case JVIEW_KEYS:
            return "dict_keys";
        case JVIEW_VALUES:
            return "dict_values";
        case JVIEW_RANGE:
            return "range";
        default:
            return v->is_tuple ? "tuple" : "list";
        }
    case JV_ITER:
        return v->iter_name;
    case JV_DICT:
        return "dict";
    case JV_NAMESPACE:
        return "Namespace";
    case JV_FUNC:
        return v->u.fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* ---------------------------------------------------------------- comparison */

bool jv_equal(const JValue *a, const JValue *b) {
    if (a->kind == JV_BIGINT || b->kind == JV_BIGINT) {
        if (a->kind == JV_FLOAT || b->kind == JV_FLOAT)
            return jv_as_double(a) == jv_as_double(b); /* exact enough: floats that big are */
        bool ia = a->kind == JV_INT || a->kind == JV_BOOL || a->kind == JV_BIGINT,
             ib = b->kind == JV_INT || b->kind == JV_BOOL || b->kind == JV_BIGINT;
        return ia && ib && jv_int_compare(a, b) == 0;
    }
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_INT ? a->u.i : a->u.b,
                    y = b->kind == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEFINED:
    case JV_NONE:
        return true;
    case JV_STRING:
        return a->u.s.n == b->u.s.n && memcmp(a->u.s.s, b->u.s.s, a->u.s.n) == 0;
    case JV_LIST:
        if (a->is_tuple != b->is_tuple || a->view != b->view || a->u.list.n != b->u.list.n)
            return false;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!jv_equal(a->u.list.items[i], b->u.list.items[i])) return false;
        return true;
    case JV_DICT: {
        const JDict *x = a->u.dict, *y = b->u.dict;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            const JValue *w = jv_dict_get(y, x->items[i].key.s, x->items[i].key.n);
            if (!w || !jv_equal(x->items[i].val, w)) return false;
        }
        return true;
    }
    case JV_NAMESPACE:
        return a->u.dict == b->u.dict;
    case JV_FUNC:
        return a->u.fn == b->u.fn;
    case JV_LOOP:
        return a->u.loop == b->u.loop;
    case JV_ITER:
        return a == b;
    default:
        return false;
    }
}

/* How a compares with b: LESS, EQUAL, or neither (greater, or unordered like NaN). */
typedef enum { ORDER_LESS, ORDER_EQUAL, ORDER_OTHER } JOrder;

/* Python's a < b in one pass: lists compare at their first items that are not ==, and those
 * items by <. Inside a list (`in_list`), items that are == but not orderable (None, dicts)
 * are passed over, as Python does; at the top they are an error. One pass matters: finding
 * the first unequal items with == and then comparing them with < again costs the square of
 * the nesting. */
static int order_of(const JValue *a, const JValue *b, bool in_list, JOrder *o) {
    if ((a->kind == JV_BIGINT && (jv_is_number(b) || b->kind == JV_BIGINT)) ||
        (b->kind == JV_BIGINT && jv_is_number(a))) {
        int c;
        if (a->kind == JV_FLOAT || b->kind == JV_FLOAT) {
            double x = jv_as_double(a), y = jv_as_double(b);
            c = x < y ? -1 : x == y ? 0 : 1;
        } else {
            c = jv_int_compare(a, b);
        }
        *o = c < 0 ? ORDER_LESS : c == 0 ? ORDER_EQUAL : ORDER_OTHER;
        return 0;
    }
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_INT ? a->u.i : a->u.b,
                    y = b->kind == JV_INT ? b->u.i : b->u.b;
            *o = x < y ? ORDER_LESS : x == y ? ORDER_EQUAL : ORDER_OTHER;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *o = x < y ? ORDER_LESS : x == y ? ORDER_EQUAL : ORDER_OTHER;
        }
        return 0;
    }
    if (a->kind == JV_STRING && b->kind == JV_STRING) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = memcmp(a->u.s.s, b->u.s.s, n);
        if (c == 0) c = a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
        *o = c < 0 ? ORDER_LESS : c == 0 ? ORDER_EQUAL : ORDER_OTHER;
        return 0;
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST && a->is_tuple == b->is_tuple &&
        a->view == JVIEW_NONE && b->view == JVIEW_NONE) {
        size_t n = a->u.list.n < b->u.list.n ? a->u.list.n : b->u.list.n;
        for (size_t i = 0; i < n; i++) {
            if (order_of(a->u.list.items[i], b->u.list.items[i], true, o) != 0) return -1;
            if (*o != ORDER_EQUAL) return 0;
        }
        *o = a->u.list.n < b->u.list.n    ? ORDER_LESS
             : a->u.list.n == b->u.list.n ? ORDER_EQUAL
                                          : ORDER_OTHER;
        return 0;
    }
    if (in_list && jv_equal(a, b)) {
        *o = ORDER_EQUAL;
        return 0;
    }
    return err_set("'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}

int jv_less(const JValue *a, const JValue *b, bool *lt) {
    JOrder o;
    if (order_of(a, b, false, &o) != 0) return -1;
    *lt = o == ORDER_LESS;
    return 0;
}
