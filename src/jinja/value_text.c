/* Values as text: Python str() and repr(), float repr, and json.dumps as transformers'
 * tojson filter calls it. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- str / repr */

void jv_format_float(JBuf *b, double f) {
    if (isnan(f)) {
        jb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest digit string that reads back to the same double, as Python's repr. */
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    const char *p = buf;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char digits[20];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg) jb_putc(b, '-');
    if (exp10 >= -5 + 1 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                jb_putc(b, i < nd ? digits[i] : '0');
            jb_putc(b, '.');
            if (nd > exp10 + 1)
                jb_put(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else
                jb_putc(b, '0');
        } else {
            jb_puts(b, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                jb_putc(b, '0');
            jb_put(b, digits, (size_t)nd);
        }
    } else {
        jb_putc(b, digits[0]);
        if (nd > 1) {
            jb_putc(b, '.');
            jb_put(b, digits + 1, (size_t)(nd - 1));
        }
        jb_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

static void repr_string(JBuf *b, JStr s) {
    bool has_single = memchr(s.s, '\'', s.n) != NULL, has_double = memchr(s.s, '"', s.n) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    jb_putc(b, q);
    for (size_t i = 0; i < s.n;) {
        size_t start = i;
        int32_t c = ju_decode(s.s, s.n, &i);
        if (c == q || c == '\\') {
            jb_putc(b, '\\');
            jb_putc(b, (char)c);
        } else if (c == '\n') {
            jb_puts(b, "\\n");
        } else if (c == '\r') {
            jb_puts(b, "\\r");
        } else if (c == '\t') {
            jb_puts(b, "\\t");
        } else if (!ju_isprintable(c)) {
            if (c < 0x100)
                jb_printf(b, "\\x%02x", (unsigned)c);
            else if (c < 0x10000)
                jb_printf(b, "\\u%04x", (unsigned)c);
            else
                jb_printf(b, "\\U%08x", (unsigned)c);
        } else {
            jb_put(b, s.s + start, i - start);
        }
    }
    jb_putc(b, q);
}

static int repr_dict_items(JBuf *b, const JDict *d) {
    jb_putc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_puts(b, ", ");
        repr_string(b, d->items[i].key);
        jb_puts(b, ": ");
        if (jv_repr(b, d->items[i].val) != 0) return -1;
    }
    jb_putc(b, '}');
    return 0;
}

static int repr_inner(JBuf *b, const JValue *v);

/* Containers nest at most this deep when printed (Python raises RecursionError too). */
#define MAX_PRINT_DEPTH 1000
static _Thread_local int repr_depth;

int jv_repr(JBuf *b, const JValue *v) {
    if (v->kind != JV_LIST && v->kind != JV_DICT && v->kind != JV_NAMESPACE)
        return repr_inner(b, v);
    if (repr_depth >= MAX_PRINT_DEPTH) return err_set("value nested too deeply to print");
    repr_depth++;
    int rc = repr_inner(b, v);
    repr_depth--;
    return rc;
}

static int repr_inner(JBuf *b, const JValue *v) {
    switch (v->kind) {
    case JV_STRING:
        repr_string(b, v->u.s);
        return 0;
    case JV_UNDEFINED:
        jb_puts(b, "Undefined");
        return 0;
    case JV_LIST:
        if (v->view == JVIEW_RANGE) {
            if (v->range[2] == 1)
                jb_printf(b, "range(%" PRId64 ", %" PRId64 ")", v->range[0], v->range[1]);
            else
                jb_printf(b, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", v->range[0],
                          v->range[1], v->range[2]);
            return 0;
        }
        if (v->view != JVIEW_NONE) {
            jb_printf(b, "%s(", jv_type_name(v));
            JValue plain = *v;
            plain.view = JVIEW_NONE;
            plain.is_tuple = false;
            if (jv_repr(b, &plain) != 0) return -1;
            jb_putc(b, ')');
            return 0;
        }
        jb_putc(b, v->is_tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) jb_puts(b, ", ");
            if (jv_repr(b, v->u.list.items[i]) != 0) return -1;
        }
        if (v->is_tuple && v->u.list.n == 1) jb_putc(b, ',');
        jb_putc(b, v->is_tuple ? ')' : ']');
        return 0;
    case JV_DICT:
        return repr_dict_items(b, v->u.dict);
    default:
        return jv_to_str(b, v);
    }
}

int jv_to_str(JBuf *b, const JValue *v) {
    switch (v->kind) {
    case JV_UNDEFINED:
        return 0;
    case JV_NONE:
        jb_puts(b, "None");
        return 0;
    case JV_BOOL:
        jb_puts(b, v->u.b ? "True" : "False");
        return 0;
    case JV_INT:
        jb_printf(b, "%" PRId64, v->u.i);
        return 0;
    case JV_BIGINT:
        jb_put(b, v->u.s.s, v->u.s.n);
        return 0;
    case JV_FLOAT:
        jv_format_float(b, v->u.f);
        return 0;
    case JV_STRING:
        jb_put(b, v->u.s.s, v->u.s.n);
        return 0;
    case JV_LIST:
    case JV_DICT:
        return jv_repr(b, v);
    case JV_NAMESPACE:
        jb_puts(b, "<Namespace ");
        if (repr_dict_items(b, v->u.dict) != 0) return -1;
        jb_putc(b, '>');
        return 0;
    case JV_FUNC:
        if (v->u.fn->kind == JF_MACRO)
            jb_printf(b, "<Macro '%s'>", v->u.fn->name);
        else if (v->u.fn->kind == JF_METHOD)
            jb_printf(b, "<built-in method %s of %s object>", v->u.fn->name,
                      jv_type_name(v->u.fn->self));
        else
            jb_printf(b, "<function %s>", v->u.fn->name);
        return 0;
    case JV_LOOP:
        jb_printf(b, "<LoopContext %" PRId64 "/%" PRId64 ">", v->u.loop->index0 + 1,
                  v->u.loop->length);
        return 0;
    case JV_ITER:
        /* Python prints an address here; no renderer can reproduce it. */
        jb_printf(b, "<%s object>", v->iter_name);
        return 0;
    }
    return 0;
}

JValue *jv_str_of(JArena *a, const JValue *v) {
    if (v->kind == JV_STRING) return (JValue *)v;
    JBuf b;
    jb_init(&b, a);
    jv_to_str(&b, v);
    return jv_str_ref(a, jb_str(&b));
}

/* ---------------------------------------------------------------- json.dumps */

static void json_str_out(JBuf *b, JStr s, bool ensure_ascii) {
    jb_putc(b, '"');
    for (size_t i = 0; i < s.n;) {
        size_t start = i;
        int32_t c = ju_decode(s.s, s.n, &i);
        switch (c) {
        case '"':
            jb_puts(b, "\\\"");
            break;
        case '\\':
            jb_puts(b, "\\\\");
            break;
        case '\n':
            jb_puts(b, "\\n");
            break;
        case '\r':
            jb_puts(b, "\\r");
            break;
        case '\t':
            jb_puts(b, "\\t");
            break;
        case '\b':
            jb_puts(b, "\\b");
            break;
        case '\f':
            jb_puts(b, "\\f");
            break;
        default:
            if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
                if (c >= 0x10000) {
                    int32_t v = c - 0x10000;
                    jb_printf(b, "\\u%04x\\u%04x", (unsigned)(0xd800 | (v >> 10)),
                              (unsigned)(0xdc00 | (v & 0x3ff)));
                } else {
                    jb_printf(b, "\\u%04x", (unsigned)c);
                }
            } else {
                jb_put(b, s.s + start, i - start);
            }
        }
    }
    jb_putc(b, '"');
}

static void json_newline(JBuf *b, const JJsonOpts *o, int level) {
    jb_putc(b, '\n');
    for (int i = 0; i < level; i++)
        jb_puts(b, o->indent);
}

static int key_less(const void *x, const void *y) {
    const JPair *a = x, *b = y;
    size_t n = a->key.n < b->key.n ? a->key.n : b->key.n;
    int c = memcmp(a->key.s, b->key.s, n);
    if (c) return c;
    return a->key.n < b->key.n ? -1 : a->key.n > b->key.n;
}

static int to_json(JBuf *b, const JValue *v, const JJsonOpts *o, int level) {
    if (level > MAX_PRINT_DEPTH) return err_set("value nested too deeply for JSON");
    switch (v->kind) {
    case JV_NONE:
        jb_puts(b, "null");
        return 0;
    case JV_BOOL:
        jb_puts(b, v->u.b ? "true" : "false");
        return 0;
    case JV_INT:
        jb_printf(b, "%" PRId64, v->u.i);
        return 0;
    case JV_BIGINT:
        jb_put(b, v->u.s.s, v->u.s.n);
        return 0;
    case JV_FLOAT:
        if (isnan(v->u.f))
            jb_puts(b, "NaN");
        else if (isinf(v->u.f))
            jb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else
            jv_format_float(b, v->u.f);
        return 0;
    case JV_STRING:
        json_str_out(b, v->u.s, o->ensure_ascii);
        return 0;
    case JV_LIST:
        if (v->view != JVIEW_NONE)
            return err_set("Object of type %s is not JSON serializable", jv_type_name(v));
        if (v->u.list.n == 0) {
            jb_puts(b, "[]");
            return 0;
        }
        jb_putc(b, '[');
        if (o->indent) json_newline(b, o, level + 1);
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) {
                jb_put(b, o->item_sep.s, o->item_sep.n);
                if (o->indent) json_newline(b, o, level + 1);
            }
            if (to_json(b, v->u.list.items[i], o, level + 1) != 0) return -1;
        }
        if (o->indent) json_newline(b, o, level);
        jb_putc(b, ']');
        return 0;
    case JV_DICT: {
        const JDict *d = v->u.dict;
        if (d->n == 0) {
            jb_puts(b, "{}");
            return 0;
        }
        const JPair *items = d->items;
        if (o->sort_keys) {
            JPair *sorted = ja_alloc(b->arena, d->n * sizeof *sorted);
            memcpy(sorted, d->items, d->n * sizeof *sorted);
            qsort(sorted, d->n, sizeof *sorted, key_less);
            items = sorted;
        }
        jb_putc(b, '{');
        if (o->indent) json_newline(b, o, level + 1);
        for (size_t i = 0; i < d->n; i++) {
            if (i) {
                jb_put(b, o->item_sep.s, o->item_sep.n);
                if (o->indent) json_newline(b, o, level + 1);
            }
            json_str_out(b, items[i].key, o->ensure_ascii);
            jb_put(b, o->key_sep.s, o->key_sep.n);
            if (to_json(b, items[i].val, o, level + 1) != 0) return -1;
        }
        if (o->indent) json_newline(b, o, level);
        jb_putc(b, '}');
        return 0;
    }
    case JV_UNDEFINED:
        return err_set("Object of type Undefined is not JSON serializable");
    case JV_NAMESPACE:
        return err_set("Object of type TemplateNamespace is not JSON serializable");
    default:
        return err_set("Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jv_to_json(JBuf *b, const JValue *v, const JJsonOpts *o) {
    return to_json(b, v, o, 0);
}
