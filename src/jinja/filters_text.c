/* The filters that work on one string or number (abs, capitalize, center, default, escape,
 * float, format, indent, int, lower, replace, round, string, title, tojson, trim, truncate,
 * upper, wordcount, ...), after jinja2 3.1's filters.py and transformers' tojson. Most coerce
 * an undefined value to ""; the numeric ones raise on it, as jinja2 does. */
#include "jinja/filters.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jinja2's title filter: split at runs of [-\s({\[<], then each piece gets its first
 * character upper-cased and the rest lower-cased. */
static JValue *jinja_title(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    bool at_start = true;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        bool sep = ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) {
            ju_encode(&b, cp);
            at_start = true;
        } else {
            pystr_put_case(&b, cp, at_start ? PYSTR_UPPER : PYSTR_LOWER);
            at_start = false;
        }
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

static JValue *html_escape(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.s[i]) {
        case '&':
            jb_puts(&b, "&amp;");
            break;
        case '<':
            jb_puts(&b, "&lt;");
            break;
        case '>':
            jb_puts(&b, "&gt;");
            break;
        case '"':
            jb_puts(&b, "&#34;");
            break;
        case '\'':
            jb_puts(&b, "&#39;");
            break;
        default:
            jb_putc(&b, s.s[i]);
        }
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

JValue *jf_abs(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    if (v->kind == JV_FLOAT) return jv_float(c->arena, fabs(v->u.f));
    if (v->kind == JV_INT) {
        if (v->u.i == INT64_MIN) return jinja_fail(line, "integer overflow");
        return jv_int(c->arena, v->u.i < 0 ? -v->u.i : v->u.i);
    }
    if (v->kind == JV_BOOL) return jv_int(c->arena, v->u.b);
    return jinja_fail(line, "bad operand type for abs(): '%s'", jv_type_name(v));
}

JValue *jf_attr(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[1];
    static const char *const names[] = {"name"};
    if (jinja_bind_args(a, what, names, 1, p, line) != 0) return NULL;
    if (!p[0] || !jinja_str_arg(p[0], what, line))
        return p[0] ? NULL : jinja_fail(line, "attr needs a name");
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    JValue *r = jinja_attribute(c, v, p[0]->u.s.s, p[0]->u.s.n);
    return r ? r : jv_undefined_attr(c->arena, v, p[0]->u.s.s);
}

JValue *jf_capitalize(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return pystr_capitalize(c, jv_str_of(c->arena, v)->u.s);
}

JValue *jf_center(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[1];
    static const char *const names[] = {"width"};
    if (jinja_bind_args(a, what, names, 1, p, line) != 0) return NULL;
    int64_t width;
    if (jinja_arg_int(p[0], 80, &width, what, line) != 0) return NULL;
    JStr s = jv_str_of(c->arena, v)->u.s;
    int64_t len = (int64_t)ju_length(s.s, s.n);
    if (width <= len) return jv_str_ref(c->arena, s);
    if (width > (1 << 20)) return jinja_fail(line, "center: width too large");
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    JBuf b;
    jb_init(&b, c->arena);
    for (int64_t i = 0; i < left; i++)
        jb_putc(&b, ' ');
    jb_put(&b, s.s, s.n);
    for (int64_t i = 0; i < marg - left; i++)
        jb_putc(&b, ' ');
    return jv_str_ref(c->arena, jb_str(&b));
}

JValue *jf_default(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"default_value", "boolean"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED || (jinja_arg_bool(p[1], false) && !jv_truthy(v)))
        return p[0] ? p[0] : jv_cstr(c->arena, "");
    return v;
}

JValue *jf_escape(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return html_escape(c, jv_str_of(c->arena, v)->u.s);
}

JValue *jf_float(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[1];
    static const char *const names[] = {"default"};
    if (jinja_bind_args(a, what, names, 1, p, line) != 0) return NULL;
    JValue *dflt = p[0] ? p[0] : jv_float(c->arena, 0.0);
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    if (v->kind == JV_FLOAT) return v;
    if (v->kind == JV_INT || v->kind == JV_BOOL) return jv_float(c->arena, jv_as_double(v));
    double d;
    if (v->kind == JV_STRING && pystr_to_float(v->u.s, &d)) return jv_float(c->arena, d);
    return dflt;
}

JValue *jf_format(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    /* soft_str(value) % (kwargs or args) */
    if (a->nargs && a->nkw)
        return jinja_fail(line, "can't handle positional and keyword arguments at the same time");
    JValue *args;
    if (a->nkw) {
        args = jv_dict(c->arena);
        for (size_t k = 0; k < a->nkw; k++)
            jv_dict_set(c->arena, args->u.dict, a->kwnames[k], a->kwvals[k]);
    } else {
        args = jv_list(c->arena, a->nargs, true);
        for (size_t k = 0; k < a->nargs; k++)
            args->u.list.items[k] = a->args[k];
    }
    return pystr_printf(c, jv_str_of(c->arena, v)->u.s, args, line);
}

JValue *jf_indent(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[3];
    static const char *const names[] = {"width", "first", "blank"};
    if (jinja_bind_args(a, what, names, 3, p, line) != 0) return NULL;
    JStr ind;
    if (p[0] && p[0]->kind == JV_STRING) {
        ind = p[0]->u.s;
    } else {
        int64_t w;
        if (jinja_arg_int(p[0], 4, &w, what, line) != 0) return NULL;
        if (w > 1000) return jinja_fail(line, "indent: width too large");
        char *sp = ja_alloc(c->arena, (size_t)(w > 0 ? w : 0) + 1);
        for (int64_t i = 0; i < w; i++)
            sp[i] = ' ';
        ind = (JStr){sp, (size_t)(w > 0 ? w : 0)};
    }
    JStr s = jv_str_of(c->arena, v)->u.s;
    /* s += "\n" then splitlines(), as jinja2 does. */
    JBuf tmp;
    jb_init(&tmp, c->arena);
    jb_put(&tmp, s.s, s.n);
    jb_putc(&tmp, '\n');
    JStr *lines;
    size_t n;
    if (pystr_splitlines(c, jb_str(&tmp), &lines, &n, line) != 0) return NULL;
    JBuf b;
    jb_init(&b, c->arena);
    if (jinja_arg_bool(p[1], false)) jb_put(&b, ind.s, ind.n);
    bool blank = jinja_arg_bool(p[2], false);
    for (size_t i = 0; i < n; i++) {
        if (i) {
            jb_putc(&b, '\n');
            if (blank || lines[i].n) jb_put(&b, ind.s, ind.n);
        }
        jb_put(&b, lines[i].s, lines[i].n);
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

JValue *jf_int(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"default", "base"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
    JValue *dflt = p[0] ? p[0] : jv_int(c->arena, 0);
    int64_t base;
    if (jinja_arg_int(p[1], 10, &base, what, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    if (v->kind == JV_INT || v->kind == JV_BIGINT) return v;
    if (v->kind == JV_BOOL) return jv_int(c->arena, v->u.b);
    double d;
    if (v->kind == JV_STRING) {
        int64_t i;
        if (pystr_to_int(v->u.s, base, &i)) return jv_int(c->arena, i);
        JValue *big = base == 10 ? jv_int_from_text(c->arena, v->u.s.s, v->u.s.n) : NULL;
        if (big) return big; /* Python's int(str) has no size limit */
        if (!pystr_to_float(v->u.s, &d)) return dflt;
    } else if (v->kind == JV_FLOAT) {
        d = v->u.f;
    } else {
        return dflt;
    }
    /* jinja2's do_int: int(value), then int(float(value)) on ValueError; int(inf) raises
     * OverflowError, which it does not catch. Past int64 the result is exact (bigint.c). */
    if (isnan(d)) return dflt;
    if (isinf(d))
        return jinja_fail(line, "OverflowError: cannot convert float infinity to integer");
    return jv_int_from_double(c->arena, d);
}

JValue *jf_lower(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return pystr_case(c, jv_str_of(c->arena, v)->u.s, PYSTR_LOWER);
}

JValue *jf_upper(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return pystr_case(c, jv_str_of(c->arena, v)->u.s, PYSTR_UPPER);
}

JValue *jf_replace(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[3];
    static const char *const names[] = {"old", "new", "count"};
    if (jinja_bind_args(a, what, names, 3, p, line) != 0) return NULL;
    if (!p[0] || !p[1]) return jinja_fail(line, "replace needs the old and the new string");
    int64_t count;
    if (jinja_arg_int(p[2], -1, &count, what, line) != 0) return NULL;
    return pystr_replace(c, jv_str_of(c->arena, v)->u.s, jv_str_of(c->arena, p[0])->u.s,
                         jv_str_of(c->arena, p[1])->u.s, count);
}

JValue *jf_round(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"precision", "method"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
    int64_t prec;
    if (jinja_arg_int(p[0], 0, &prec, what, line) != 0) return NULL;
    const char *method = p[1] && p[1]->kind == JV_STRING ? p[1]->u.s.s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jinja_fail(line, "method must be common, ceil or floor");
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    if (!jv_is_number(v))
        return jinja_fail(line, "round: expected a number, got '%s'", jv_type_name(v));
    if (!strcmp(method, "common") && v->kind != JV_FLOAT)
        return v->kind == JV_BOOL ? jv_int(c->arena, v->u.b) : v;
    double x = jv_as_double(v), r;
    if (!strcmp(method, "common")) {
        /* Python's round(): correctly rounded, ties to even -- what glibc's printf does. */
        if (prec >= 0 && prec <= 300 && isfinite(x)) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            r = strtod(buf, NULL);
        } else {
            double scale = pow(10.0, (double)prec);
            r = nearbyint(x * scale) / scale;
        }
    } else {
        double scale = pow(10.0, (double)prec);
        r = (!strcmp(method, "ceil") ? ceil(x * scale) : floor(x * scale)) / scale;
    }
    return jv_float(c->arena, r);
}

JValue *jf_safe(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED) return jv_cstr(c->arena, "");
    return jv_str_of(c->arena, v);
}

JValue *jf_string(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return jv_str_of(c->arena, v);
}

JValue *jf_title(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return jinja_title(c, jv_str_of(c->arena, v)->u.s);
}

/* Binds its own name, "tojson", as transformers' filter does, not "filter 'tojson'". */
JValue *jf_tojson(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    JValue *p[4];
    if (jinja_bind_args(a, "tojson", names, 4, p, line) != 0) return NULL;
    JJsonOpts o = {.ensure_ascii = jinja_arg_bool(p[0], false),
                   .sort_keys = jinja_arg_bool(p[3], false)};
    if (p[1] && p[1]->kind != JV_NONE) {
        if (p[1]->kind == JV_STRING) {
            o.indent = p[1]->u.s.s;
        } else if (p[1]->kind == JV_INT || p[1]->kind == JV_BOOL) {
            int64_t k = p[1]->kind == JV_INT ? p[1]->u.i : p[1]->u.b;
            if (k > 1000) return jinja_fail(line, "tojson: indent too large");
            char *ind = ja_alloc(c->arena, (size_t)(k > 0 ? k : 0) + 1);
            for (int64_t i = 0; i < k; i++)
                ind[i] = ' ';
            o.indent = ind;
        } else {
            return jinja_fail(line, "tojson: indent must be an integer or a string");
        }
    }
    o.item_sep = o.indent ? (JStr){",", 1} : (JStr){", ", 2};
    o.key_sep = (JStr){": ", 2};
    if (p[2] && p[2]->kind != JV_NONE) {
        JValue *s = p[2];
        if (s->kind != JV_LIST || s->u.list.n != 2 || s->u.list.items[0]->kind != JV_STRING ||
            s->u.list.items[1]->kind != JV_STRING)
            return jinja_fail(line, "tojson: separators must be a pair of strings");
        o.item_sep = s->u.list.items[0]->u.s;
        o.key_sep = s->u.list.items[1]->u.s;
    }
    JBuf b;
    jb_init(&b, c->arena);
    if (jv_to_json(&b, v, &o) != 0) return jinja_fail(line, "tojson: %s", err_msg());
    return jv_str_ref(c->arena, jb_str(&b));
}

JValue *jf_trim(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    return pystr_strip_call(c, jv_str_of(c->arena, v)->u.s, a, what, true, true, line);
}

JValue *jf_truncate(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[4];
    static const char *const names[] = {"length", "killwords", "end", "leeway"};
    if (jinja_bind_args(a, what, names, 4, p, line) != 0) return NULL;
    int64_t length, leeway;
    if (jinja_arg_int(p[0], 255, &length, what, line) != 0 ||
        jinja_arg_int(p[3], 5, &leeway, what, line) != 0)
        return NULL;
    JStr end = p[2] ? jv_str_of(c->arena, p[2])->u.s : (JStr){"...", 3};
    if (v->kind != JV_STRING) {
        /* jinja2 measures and slices the value itself: a short sequence comes back as it
         * is, anything else fails as Python does. */
        JValue *l = jinja_len(c, v, line);
        if (!l) return NULL;
        if (l->u.i <= length + leeway) return v;
        return jinja_fail(line, "truncate: cannot truncate a '%s'", jv_type_name(v));
    }
    JStr s = v->u.s;
    int64_t len = (int64_t)ju_length(s.s, s.n), endlen = (int64_t)ju_length(end.s, end.n);
    if (length < endlen)
        return jinja_fail(line, "expected length >= %" PRId64 ", got %" PRId64, endlen, length);
    if (leeway < 0) return jinja_fail(line, "expected leeway >= 0, got %" PRId64, leeway);
    if (len <= length + leeway) return jv_str_ref(c->arena, s);
    size_t cut = 0;
    for (int64_t k = 0; k < length - endlen; k++)
        ju_decode(s.s, s.n, &cut);
    if (!jinja_arg_bool(p[1], false)) {
        /* rsplit(" ", 1)[0] */
        for (size_t i = cut; i-- > 0;)
            if (s.s[i] == ' ') {
                cut = i;
                break;
            }
    }
    JBuf b;
    jb_init(&b, c->arena);
    jb_put(&b, s.s, cut);
    jb_put(&b, end.s, end.n);
    return jv_str_ref(c->arena, jb_str(&b));
}

JValue *jf_wordcount(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    JStr s = jv_str_of(c->arena, v)->u.s;
    int64_t count = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        bool w = cp == '_' || pystr_is_alnum(cp);
        if (w && !in_word) count++;
        in_word = w;
    }
    return jv_int(c->arena, count);
}
