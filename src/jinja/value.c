/* Arena, buffers, UTF-8 helpers and the value type of the Jinja subset: construction,
 * Python str()/repr(), ==, <, and json.dumps. */
#include "jinja/jinja.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- arena */

struct JArenaBlock {
    JArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define JA_BLOCK_MIN ((size_t)64 * 1024)

void *ja_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    JArenaBlock *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JA_BLOCK_MIN ? n : JA_BLOCK_MIN;
        b = xmalloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    if (a->limit && a->used > a->limit) a->over_limit = true;
    memset(p, 0, n);
    return p;
}

char *ja_memdup(JArena *a, const char *s, size_t n) {
    char *d = ja_alloc(a, n + 1);
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void ja_free(JArena *a) {
    JArenaBlock *b = a->head;
    while (b) {
        JArenaBlock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---------------------------------------------------------------- buffers */

void jb_init(JBuf *b, JArena *a) {
    b->arena = a;
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Makes room for `extra` more bytes and the NUL; false (and the arena marked over its limit)
 * when that would pass the arena's cap: the caller then drops the write. */
static bool jb_reserve(JBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    JArena *a = b->arena;
    if (a->limit && extra >= a->limit) { /* checked first: the doubling below can't overflow */
        a->over_limit = true;
        return false;
    }
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    if (a->limit && a->used + cap > a->limit) {
        a->over_limit = true;
        return false;
    }
    char *d = ja_alloc(a, cap);
    if (b->len) memcpy(d, b->data, b->len);
    b->data = d;
    b->cap = cap;
    return true;
}

void jb_put(JBuf *b, const char *s, size_t n) {
    if (!n || !jb_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void jb_puts(JBuf *b, const char *s) {
    jb_put(b, s, strlen(s));
}

void jb_putc(JBuf *b, char c) {
    if (!jb_reserve(b, 1)) return;
    b->data[b->len++] = c;
}

void jb_printf(JBuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        jb_put(b, small, (size_t)n);
        return;
    }
    if (!jb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

JStr jb_str(JBuf *b) {
    if (!jb_reserve(b, 0)) return (JStr){"", 0}; /* nothing written yet, none may be */
    b->data[b->len] = '\0';
    return (JStr){b->data, b->len};
}

/* ---------------------------------------------------------------- UTF-8 */

int32_t ju_decode(const char *str, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    size_t k = *i;
    unsigned c = s[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + (size_t)len > n) {
        *i = k + 1;
        return (int32_t)c;
    }
    int32_t cp = len == 1   ? (int32_t)c
                 : len == 2 ? (int32_t)(c & 0x1f)
                 : len == 3 ? (int32_t)(c & 0x0f)
                            : (int32_t)(c & 0x07);
    for (int j = 1; j < len; j++) {
        if ((s[k + j] & 0xc0) != 0x80) {
            *i = k + 1;
            return (int32_t)c;
        }
        cp = (cp << 6) | (s[k + j] & 0x3f);
    }
    *i = k + (size_t)len;
    return cp;
}

void ju_encode(JBuf *b, int32_t cp) {
    char t[4];
    if (cp < 0x80) {
        jb_putc(b, (char)cp);
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 2);
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 4);
    }
}

size_t ju_length(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        ju_decode(s, n, &i);
        count++;
    }
    return count;
}

bool ju_isspace(int32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t ju_rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80)
            start--;
        size_t k = start;
        int32_t c = ju_decode(s, end, &k);
        if (k != end || !ju_isspace(c)) break;
        end = start;
    }
    return end;
}

bool ju_isprintable(int32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x7f) return true;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

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
    case JSON_STRING:
        return jv_str(a, json_string_value(j), json_string_length(j));
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

double jv_as_double(const JValue *v) {
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

/* ---------------------------------------------------------------- comparison */

bool jv_equal(const JValue *a, const JValue *b) {
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
