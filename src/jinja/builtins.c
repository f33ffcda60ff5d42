/* Filters, tests, Python methods on values, attribute/item lookup and the globals
 * (range, namespace, dict, raise_exception, strftime_now) of the Jinja subset.
 *
 * Each builtin follows jinja2 3.1's filters.py/tests.py (and transformers' tojson),
 * including how it treats undefined values: most coerce them to "" or an empty
 * sequence; arithmetic and int()/float() on them raise. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- name tables */

enum {
    F_ABS,
    F_ATTR,
    F_BATCH,
    F_CAPITALIZE,
    F_CENTER,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_DICTSORT,
    F_E,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_TRUNCATE,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
    F_COUNT_
};

static const char *const filter_names[F_COUNT_] = {
    "abs",      "attr",       "batch",  "capitalize", "center",  "count",       "d",      "default",
    "dictsort", "e",          "escape", "first",      "float",   "forceescape", "format", "indent",
    "int",      "items",      "join",   "last",       "length",  "list",        "lower",  "map",
    "max",      "min",        "reject", "rejectattr", "replace", "reverse",     "round",  "safe",
    "select",   "selectattr", "sort",   "string",     "sum",     "title",       "tojson", "trim",
    "truncate", "unique",     "upper",  "wordcount",
};

/* jinja2 filters this renderer does not implement: named as such in errors. */
static const char *const unsupported_filters[] = {
    "filesizeformat", "groupby", "pprint",   "random",  "slice", "striptags",
    "urlencode",      "urlize",  "wordwrap", "xmlattr", NULL,
};

enum {
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_DEFINED,
    T_UNDEFINED,
    T_FILTER,
    T_TEST,
    T_NONE,
    T_BOOLEAN,
    T_FALSE,
    T_TRUE,
    T_INTEGER,
    T_FLOAT,
    T_LOWER,
    T_UPPER,
    T_STRING,
    T_MAPPING,
    T_NUMBER,
    T_SEQUENCE,
    T_ITERABLE,
    T_CALLABLE,
    T_SAMEAS,
    T_ESCAPED,
    T_IN,
    T_EQ_SYM,
    T_EQ,
    T_EQUALTO,
    T_NE_SYM,
    T_NE,
    T_GT_SYM,
    T_GT,
    T_GREATERTHAN,
    T_GE,
    T_GE_SYM,
    T_LT_SYM,
    T_LT,
    T_LESSTHAN,
    T_LE_SYM,
    T_LE,
    T_COUNT_
};

static const char *const test_names[T_COUNT_] = {
    "odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
    "boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
    "mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
    "==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
    "ge",      ">=",     "<",           "lt",       "lessthan",  "<=",     "le",
};

int jinja_filter_id(const char *name) {
    for (int i = 0; i < F_COUNT_; i++)
        if (strcmp(filter_names[i], name) == 0) return i;
    for (int i = 0; unsupported_filters[i]; i++)
        if (strcmp(unsupported_filters[i], name) == 0) return -2;
    return -1;
}

int jinja_test_id(const char *name) {
    for (int i = 0; i < T_COUNT_; i++)
        if (strcmp(test_names[i], name) == 0) return i;
    return -1;
}

bool jinja_filter_walks_items(int id) {
    return id != F_COUNT && id != F_LENGTH && id != F_FIRST && id != F_LAST && id != F_D &&
           id != F_DEFAULT;
}

bool jinja_test_walks_items(int id) {
    return id == T_IN || id >= T_EQ_SYM; /* the comparisons compare item by item */
}

const char *jinja_filter_name(int id) {
    return id >= 0 && id < F_COUNT_ ? filter_names[id] : "?";
}

const char *jinja_test_name(int id) {
    return id >= 0 && id < T_COUNT_ ? test_names[id] : "?";
}

/* ---------------------------------------------------------------- argument binding */

/* Binds args to the parameter names (positional order) of `what`; out[i] is NULL when
 * parameter i was not given. */
static int bind(const JArgs *a, const char *what, const char *const *names, size_t n, JValue **out,
                int line) {
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

static bool arg_bool(const JValue *v, bool def) {
    return v ? jv_truthy(v) : def;
}

static int arg_int(const JValue *v, int64_t def, int64_t *out, const char *what, int line) {
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

static JValue *str_arg(JCtx *c, const JValue *v, const char *what, int line) {
    if (v->kind == JV_STRING) return (JValue *)v;
    (void)c;
    return jinja_fail(line, "%s: expected a string, got '%s'", what, jv_type_name(v));
}

/* ---------------------------------------------------------------- iteration */

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

static JValue *list_of(JCtx *c, JValue **items, size_t n) {
    JValue *l = jv_list(c->arena, n, false);
    for (size_t i = 0; i < n; i++)
        l->u.list.items[i] = items[i];
    return l;
}

/* jinja2's generator filters (select, map, unique, batch, items, ...) fail only when the
 * generator is consumed: a non-iterable input gives an iterator that fails then. */
static JValue *lazy_error(JCtx *c) {
    const char *msg = err_msg();
    const char *colon = strstr(msg, ": "); /* drop the "line N: " prefix; it is re-added */
    JValue *v = jv_iter(c->arena, NULL, 0, "generator");
    v->iter_error = ja_memdup(c->arena, colon ? colon + 2 : msg, strlen(colon ? colon + 2 : msg));
    return v;
}

/* ---------------------------------------------------------------- string helpers */

typedef enum { CASE_LOWER, CASE_UPPER, CASE_TITLE } CaseOp;

static void put_case(JBuf *b, int32_t cp, CaseOp op) {
    if (op != CASE_LOWER && cp == 0xdf) { /* ß has no single upper-case letter */
        jb_puts(b, op == CASE_UPPER ? "SS" : "Ss");
        return;
    }
    int32_t r = op == CASE_LOWER   ? utf8proc_tolower(cp)
                : op == CASE_UPPER ? utf8proc_toupper(cp)
                                   : utf8proc_totitle(cp);
    ju_encode(b, r);
}

static JValue *str_case(JCtx *c, JStr s, CaseOp op) {
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0; i < s.n;) {
        size_t start = i;
        int32_t cp = ju_decode(s.s, s.n, &i);
        if (cp < 0x80) {
            char ch = s.s[start];
            if (op == CASE_LOWER && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            if (op != CASE_LOWER && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
            jb_putc(&b, ch);
        } else {
            put_case(&b, cp, op);
        }
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

static bool is_cased(int32_t cp) {
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT;
}

static bool is_alnum(int32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    utf8proc_category_t cat = utf8proc_category(cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

/* Python str.title(): a cased character after an uncased one is title-cased, other
 * cased characters are lower-cased. */
static JValue *py_title(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    bool prev_cased = false;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        bool cased = is_cased(cp);
        if (cased)
            put_case(&b, cp, prev_cased ? CASE_LOWER : CASE_TITLE);
        else
            ju_encode(&b, cp);
        prev_cased = cased;
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

/* Python str.capitalize(): first character title-cased, the rest lower-cased. */
static JValue *py_capitalize(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0, k = 0; i < s.n; k++) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        put_case(&b, cp, k == 0 ? CASE_TITLE : CASE_LOWER);
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

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
            put_case(&b, cp, at_start ? CASE_UPPER : CASE_LOWER);
            at_start = false;
        }
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

static bool in_chars(int32_t cp, const JStr *chars) {
    if (!chars) return ju_isspace(cp);
    for (size_t i = 0; i < chars->n;) {
        if (ju_decode(chars->s, chars->n, &i) == cp) return true;
    }
    return false;
}

/* Python str.strip/lstrip/rstrip with optional chars (NULL: whitespace). */
static JValue *py_strip(JCtx *c, JStr s, const JStr *chars, bool left, bool right) {
    size_t start = 0, end = s.n;
    if (left) {
        while (start < end) {
            size_t k = start;
            int32_t cp = ju_decode(s.s, end, &k);
            if (!in_chars(cp, chars)) break;
            start = k;
        }
    }
    if (right) {
        while (end > start) {
            size_t p = end - 1;
            while (p > start && ((unsigned char)s.s[p] & 0xc0) == 0x80)
                p--;
            size_t k = p;
            int32_t cp = ju_decode(s.s, end, &k);
            if (k != end || !in_chars(cp, chars)) break;
            end = p;
        }
    }
    return jv_str(c->arena, s.s + start, end - start);
}

static JValue *py_replace(JCtx *c, JStr s, JStr old, JStr new_, int64_t count) {
    JBuf b;
    jb_init(&b, c->arena);
    if (count < 0) count = INT64_MAX;
    if (old.n == 0) {
        /* "" matches before every character and at the end. */
        int64_t done = 0;
        size_t i = 0;
        while (i <= s.n) {
            if (done < count) {
                jb_put(&b, new_.s, new_.n);
                done++;
            }
            if (i == s.n) break;
            size_t start = i;
            ju_decode(s.s, s.n, &i);
            jb_put(&b, s.s + start, i - start);
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.n && !c->arena->over_limit) { /* past the cap the rest is dropped anyway */
        const char *hit = done < count ? memmem(s.s + i, s.n - i, old.s, old.n) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s.s);
        jb_put(&b, s.s + i, at - i);
        jb_put(&b, new_.s, new_.n);
        i = at + old.n;
        done++;
    }
    jb_put(&b, s.s + i, s.n - i);
    return jv_str_ref(c->arena, jb_str(&b));
}

/* Python str.split(sep=None, maxsplit=-1); rsplit when from_right. */
static JValue *py_split(JCtx *c, JStr s, const JStr *sep, int64_t maxsplit, bool from_right,
                        int line) {
    if (sep && sep->n == 0) return jinja_fail(line, "empty separator");
    /* Every piece is a value made: charge the most there can be before making them. */
    if (jinja_charge(c, sep ? s.n / sep->n + 1 : s.n / 2 + 1, line) != 0) return NULL;
    JValue **parts = ja_alloc(c->arena, (s.n + 2) * sizeof *parts);
    size_t np = 0;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!from_right) {
        size_t i = 0;
        int64_t splits = 0;
        if (sep) {
            for (;;) {
                const char *hit =
                    splits < maxsplit ? memmem(s.s + i, s.n - i, sep->s, sep->n) : NULL;
                if (!hit) break;
                size_t at = (size_t)(hit - s.s);
                parts[np++] = jv_str(c->arena, s.s + i, at - i);
                i = at + sep->n;
                splits++;
            }
            parts[np++] = jv_str(c->arena, s.s + i, s.n - i);
        } else {
            for (;;) {
                while (i < s.n) {
                    size_t k = i;
                    if (!ju_isspace(ju_decode(s.s, s.n, &k))) break;
                    i = k;
                }
                if (i >= s.n) break;
                if (splits >= maxsplit) {
                    /* The rest, with trailing whitespace kept as Python does. */
                    parts[np++] = jv_str(c->arena, s.s + i, s.n - i);
                    break;
                }
                size_t start = i;
                while (i < s.n) {
                    size_t k = i;
                    if (ju_isspace(ju_decode(s.s, s.n, &k))) break;
                    i = k;
                }
                parts[np++] = jv_str(c->arena, s.s + start, i - start);
                splits++;
            }
        }
        return list_of(c, parts, np);
    }
    /* rsplit */
    size_t end = s.n;
    int64_t splits = 0;
    if (sep) {
        for (;;) {
            if (splits >= maxsplit || end < sep->n) break;
            size_t at = end - sep->n;
            bool found = false;
            for (;; at--) {
                if (memcmp(s.s + at, sep->s, sep->n) == 0) {
                    found = true;
                    break;
                }
                if (at == 0) break;
            }
            if (!found) break;
            parts[np++] = jv_str(c->arena, s.s + at + sep->n, end - at - sep->n);
            end = at;
            splits++;
        }
        parts[np++] = jv_str(c->arena, s.s, end);
    } else {
        for (;;) {
            while (end > 0 && ju_isspace((unsigned char)s.s[end - 1]))
                end--;
            if (end == 0) break;
            if (splits >= maxsplit) {
                parts[np++] = jv_str(c->arena, s.s, end);
                break;
            }
            size_t start = end;
            while (start > 0 && !ju_isspace((unsigned char)s.s[start - 1]))
                start--;
            parts[np++] = jv_str(c->arena, s.s + start, end - start);
            end = start;
            splits++;
        }
    }
    for (size_t i = 0; i < np / 2; i++) {
        JValue *t = parts[i];
        parts[i] = parts[np - 1 - i];
        parts[np - 1 - i] = t;
    }
    return list_of(c, parts, np);
}

/* Python str.splitlines() boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029. */
static bool is_line_break(int32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
           cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static int py_splitlines(JCtx *c, JStr s, JStr **out, size_t *count, int line) {
    size_t most = 1; /* counted first, to charge every line before making them */
    for (size_t i = 0; i < s.n;)
        most += is_line_break(ju_decode(s.s, s.n, &i));
    if (jinja_charge(c, most, line) != 0) return -1;
    JStr *lines = ja_alloc(c->arena, most * sizeof *lines);
    size_t n = 0, start = 0, i = 0;
    while (i < s.n) {
        size_t at = i;
        int32_t cp = ju_decode(s.s, s.n, &i);
        if (!is_line_break(cp)) continue;
        lines[n++] = (JStr){s.s + start, at - start};
        if (cp == '\r' && i < s.n && s.s[i] == '\n') i++;
        start = i;
    }
    if (start < s.n) lines[n++] = (JStr){s.s + start, s.n - start};
    *out = lines;
    *count = n;
    return 0;
}

static bool str_starts(JStr s, JStr p) {
    return p.n <= s.n && memcmp(s.s, p.s, p.n) == 0;
}

static bool str_ends(JStr s, JStr p) {
    return p.n <= s.n && memcmp(s.s + s.n - p.n, p.s, p.n) == 0;
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

/* ---------------------------------------------------------------- number parsing */

/* Python int(s, base) for a string. Returns false when Python would raise. */
static bool parse_py_int(JStr s, int64_t base, int64_t *out) {
    size_t i = 0, n = s.n;
    while (i < n && ju_isspace((unsigned char)s.s[i]))
        i++;
    while (n > i && ju_isspace((unsigned char)s.s[n - 1]))
        n--;
    bool neg = false;
    if (i < n && (s.s[i] == '+' || s.s[i] == '-')) neg = s.s[i++] == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (i + 1 < n && s.s[i] == '0') {
            char p = (char)(s.s[i + 1] | 0x20);
            int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                i += 2;
                if (i < n && s.s[i] == '_') i++;
            }
        }
        if (base == 0) {
            /* Base 0 without prefix: decimal, and no leading zeros unless the value is 0. */
            base = 10;
            if (i + 1 < n && s.s[i] == '0') {
                for (size_t k = i; k < n; k++)
                    if (s.s[k] != '0' && s.s[k] != '_') return false;
            }
        }
    }
    if (base < 2 || base > 36 || i >= n) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char ch = s.s[i];
        if (ch == '_') {
            if (!prev_digit || i + 1 >= n) return false;
            prev_digit = false;
            continue;
        }
        int d = (ch >= '0' && ch <= '9')                     ? ch - '0'
                : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ? (ch | 0x20) - 'a' + 10
                                                             : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Python float(s). */
static bool parse_py_float(JStr s, double *out) {
    size_t i = 0, n = s.n;
    while (i < n && ju_isspace((unsigned char)s.s[i]))
        i++;
    while (n > i && ju_isspace((unsigned char)s.s[n - 1]))
        n--;
    if (i >= n) return false;
    char buf[128];
    size_t k = 0;
    for (; i < n && k + 1 < sizeof buf; i++) {
        if (s.s[i] == '_') {
            if (k == 0 || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || i + 1 >= n ||
                !(s.s[i + 1] >= '0' && s.s[i + 1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = s.s[i];
    }
    if (i < n) return false;
    buf[k] = '\0';
    /* strtod accepts hex floats and "infinity"/"nan(...)" forms Python rejects or spells
     * differently; allow only decimal forms, inf, infinity and nan. */
    const char *p = buf;
    if (*p == '+' || *p == '-') p++;
    if (strcasecmp(p, "inf") && strcasecmp(p, "infinity") && strcasecmp(p, "nan")) {
        for (const char *q = p; *q; q++)
            if (!strchr("0123456789.eE+-", *q)) return false;
    }
    char *end;
    double d = strtod(buf, &end);
    if (*end || end == buf) return false;
    *out = d;
    return true;
}

/* ---------------------------------------------------------------- attribute lookup */

typedef enum { M_NONE, M_OK, M_UNSUPPORTED, M_UNSAFE } MethodKind;

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

static bool in_names(const char *const *names, const char *name) {
    for (; *names; names++)
        if (strcmp(*names, name) == 0) return true;
    return false;
}

static MethodKind method_kind(const JValue *obj, const char *name) {
    switch (obj->kind) {
    case JV_STRING:
        if (in_names(str_methods, name)) return M_OK;
        if (in_names(str_unsupported, name)) return M_UNSUPPORTED;
        return M_NONE;
    case JV_DICT:
        if (in_names(dict_methods, name)) return M_OK;
        if (in_names(dict_unsupported, name)) return M_UNSUPPORTED;
        if (in_names(dict_unsafe, name)) return M_UNSAFE;
        return M_NONE;
    case JV_LIST:
        if (in_names(list_methods, name)) return M_OK;
        if (obj->is_tuple) return M_NONE;
        if (in_names(list_unsupported, name)) return M_UNSUPPORTED;
        if (in_names(list_unsafe, name)) return M_UNSAFE;
        return M_NONE;
    case JV_LOOP:
        if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return M_OK;
        return M_NONE;
    default:
        return M_NONE;
    }
}

static JValue *method_value(JCtx *c, JValue *obj, const char *name, MethodKind kind) {
    if (kind == M_UNSAFE)
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

static JValue *loop_attr(JCtx *c, JLoop *l, const char *name) {
    int64_t i = l->index0, n = l->length;
    if (!strcmp(name, "index")) return jv_int(c->arena, i + 1);
    if (!strcmp(name, "index0")) return jv_int(c->arena, i);
    if (!strcmp(name, "revindex")) return jv_int(c->arena, n - i);
    if (!strcmp(name, "revindex0")) return jv_int(c->arena, n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(c->arena, n);
    if (!strcmp(name, "depth")) return jv_int(c->arena, l->depth);
    if (!strcmp(name, "depth0")) return jv_int(c->arena, l->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items[i - 1] : jv_undefined(c->arena, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items[i + 1] : jv_undefined(c->arena, "there is no next item");
    return NULL;
}

JValue *jinja_getattr(JCtx *c, JValue *obj, const char *name, size_t n) {
    if (obj->kind == JV_LOOP) {
        JValue *v = loop_attr(c, obj->u.loop, name);
        if (v) return v;
    }
    MethodKind mk = method_kind(obj, name);
    if (mk != M_NONE) return method_value(c, obj, name, mk);
    if (obj->kind == JV_DICT || obj->kind == JV_NAMESPACE) {
        JValue *v = jv_dict_get(obj->u.dict, name, n);
        if (v) return v;
    }
    return jv_undefined_attr(c->arena, obj, name);
}

/* Python sequence index with negative wrap-around; false when out of range. */
static bool seq_index(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

JValue *jinja_getitem(JCtx *c, JValue *obj, JValue *key, int line) {
    (void)line;
    bool int_key = key->kind == JV_INT || key->kind == JV_BOOL;
    int64_t ik = key->kind == JV_INT ? key->u.i : key->kind == JV_BOOL ? key->u.b : 0;
    size_t idx;
    switch (obj->kind) {
    case JV_DICT:
        if (key->kind == JV_STRING) {
            JValue *v = jv_dict_get(obj->u.dict, key->u.s.s, key->u.s.n);
            if (v) return v;
        }
        break;
    case JV_LIST:
        if ((obj->view == JVIEW_NONE || obj->view == JVIEW_RANGE) && int_key &&
            seq_index(ik, obj->u.list.n, &idx))
            return obj->u.list.items[idx];
        break;
    case JV_STRING:
        if (int_key) {
            size_t len = ju_length(obj->u.s.s, obj->u.s.n);
            if (seq_index(ik, len, &idx)) {
                size_t i = 0;
                for (size_t k = 0; k < idx; k++)
                    ju_decode(obj->u.s.s, obj->u.s.n, &i);
                size_t start = i;
                ju_decode(obj->u.s.s, obj->u.s.n, &i);
                return jv_str(c->arena, obj->u.s.s + start, i - start);
            }
        }
        break;
    default:
        break;
    }
    /* jinja2 falls back to the attribute for string keys. */
    if (key->kind == JV_STRING) {
        if (obj->kind == JV_LOOP) {
            JValue *v = loop_attr(c, obj->u.loop, key->u.s.s);
            if (v) return v;
        }
        MethodKind mk = method_kind(obj, key->u.s.s);
        if (mk != M_NONE) return method_value(c, obj, key->u.s.s, mk);
        if (obj->kind == JV_NAMESPACE) {
            JValue *v = jv_dict_get(obj->u.dict, key->u.s.s, key->u.s.n);
            if (v) return v;
        }
    }
    return jv_undefined_item(c->arena, obj, key);
}

/* ---------------------------------------------------------------- calling */

static JValue *call_method(JCtx *c, JFunc *fn, const JArgs *a, int line);
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
        return call_method(c, fn->u.fn, args, line);
    case JF_GLOBAL:
        return call_global(c, fn->u.fn, args, line);
    }
    return NULL;
}

static const char *const global_names[] = {"range",           "namespace",    "dict",
                                           "raise_exception", "strftime_now", NULL};
static const char *const unsupported_globals[] = {"lipsum", "cycler", "joiner", NULL};

JValue *jinja_global(JCtx *c, const char *name) {
    bool known = in_names(global_names, name), unsupported = in_names(unsupported_globals, name);
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

static JValue *find_in_str(JCtx *c, JStr s, JStr sub, bool from_right, bool raise, int line) {
    int64_t pos = -1;
    if (sub.n <= s.n) {
        if (!from_right) {
            const char *hit = sub.n ? memmem(s.s, s.n, sub.s, sub.n) : s.s;
            if (hit) pos = (int64_t)ju_length(s.s, (size_t)(hit - s.s));
        } else {
            for (size_t at = s.n - sub.n + 1; at-- > 0;)
                if (memcmp(s.s + at, sub.s, sub.n) == 0) {
                    pos = (int64_t)ju_length(s.s, at);
                    break;
                }
        }
    }
    if (pos < 0 && raise) return jinja_fail(line, "substring not found");
    return jv_int(c->arena, pos);
}

static bool str_all(JStr s, bool (*pred)(int32_t)) {
    if (s.n == 0) return false;
    for (size_t i = 0; i < s.n;)
        if (!pred(ju_decode(s.s, s.n, &i))) return false;
    return true;
}

static bool cp_digit(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NO;
}
static bool cp_decimal(int32_t cp) {
    return cp < 0x80 ? (cp >= '0' && cp <= '9') : utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
}
static bool cp_numeric(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}
static bool cp_alpha(int32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
static bool cp_space(int32_t cp) {
    return ju_isspace(cp);
}

/* islower/isupper: at least one cased character and none of the other case. */
static bool str_is_case(JStr s, bool upper) {
    bool any = false;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
            if (!upper) return false;
            any = true;
        } else if (cat == UTF8PROC_CATEGORY_LL) {
            if (upper) return false;
            any = true;
        }
    }
    return any;
}

/* Python's startswith/endswith accept a string or a tuple of strings. */
static int affix_test(JCtx *c, JStr s, JValue *arg, bool ends, bool *res, int line) {
    (void)c;
    if (arg->kind == JV_STRING) {
        *res = ends ? str_ends(s, arg->u.s) : str_starts(s, arg->u.s);
        return 0;
    }
    if (arg->kind == JV_LIST && arg->is_tuple) {
        *res = false;
        for (size_t i = 0; i < arg->u.list.n; i++) {
            JValue *x = arg->u.list.items[i];
            if (x->kind != JV_STRING) {
                jinja_fail(line, "tuple for %s must only contain str, not %s",
                           ends ? "endswith" : "startswith", jv_type_name(x));
                return -1;
            }
            if (ends ? str_ends(s, x->u.s) : str_starts(s, x->u.s)) *res = true;
        }
        return 0;
    }
    jinja_fail(line, "%s first arg must be str or a tuple of str, not %s",
               ends ? "endswith" : "startswith", jv_type_name(arg));
    return -1;
}

static JValue *call_str_method(JCtx *c, JValue *self, const char *name, const JArgs *a, int line) {
    JStr s = self->u.s;
    JValue *p[3];
    char what[64];
    snprintf(what, sizeof what, "str.%s()", name);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        static const char *const names[] = {"chars"};
        if (bind(a, what, names, 1, p, line) != 0) return NULL;
        JStr *chars = NULL;
        if (p[0] && p[0]->kind != JV_NONE) {
            if (!str_arg(c, p[0], what, line)) return NULL;
            chars = &p[0]->u.s;
        }
        return py_strip(c, s, chars, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        static const char *const names[] = {"sep", "maxsplit"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        JStr *sep = NULL;
        if (p[0] && p[0]->kind != JV_NONE) {
            if (!str_arg(c, p[0], what, line)) return NULL;
            sep = &p[0]->u.s;
        }
        int64_t maxsplit;
        if (arg_int(p[1], -1, &maxsplit, what, line) != 0) return NULL;
        return py_split(c, s, sep, maxsplit, name[0] == 'r', line);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "%s takes exactly one argument here", what);
        bool res;
        if (affix_test(c, s, a->args[0], name[0] == 'e', &res, line) != 0) return NULL;
        return jv_bool(res);
    }
    if (a->nargs == 0 && a->nkw == 0) {
        if (!strcmp(name, "upper")) return str_case(c, s, CASE_UPPER);
        if (!strcmp(name, "lower") || !strcmp(name, "casefold")) return str_case(c, s, CASE_LOWER);
        if (!strcmp(name, "title")) return py_title(c, s);
        if (!strcmp(name, "capitalize")) return py_capitalize(c, s);
        if (!strcmp(name, "swapcase")) {
            JBuf b;
            jb_init(&b, c->arena);
            for (size_t i = 0; i < s.n;) {
                int32_t cp = ju_decode(s.s, s.n, &i);
                utf8proc_category_t cat = utf8proc_category(cp);
                put_case(&b, cp,
                         cat == UTF8PROC_CATEGORY_LU   ? CASE_LOWER
                         : cat == UTF8PROC_CATEGORY_LL ? CASE_UPPER
                                                       : CASE_LOWER);
            }
            return jv_str_ref(c->arena, jb_str(&b));
        }
        if (!strcmp(name, "isdigit")) return jv_bool(str_all(s, cp_digit));
        if (!strcmp(name, "isdecimal")) return jv_bool(str_all(s, cp_decimal));
        if (!strcmp(name, "isnumeric")) return jv_bool(str_all(s, cp_numeric));
        if (!strcmp(name, "isalpha")) return jv_bool(str_all(s, cp_alpha));
        if (!strcmp(name, "isalnum")) return jv_bool(str_all(s, is_alnum));
        if (!strcmp(name, "isspace")) return jv_bool(str_all(s, cp_space));
        if (!strcmp(name, "islower")) return jv_bool(str_is_case(s, false));
        if (!strcmp(name, "isupper")) return jv_bool(str_is_case(s, true));
        if (!strcmp(name, "istitle")) {
            /* Upper/title-case only after uncased characters, lower-case only after cased
             * ones, and at least one cased character. */
            bool prev_cased = false, any = false;
            for (size_t i = 0; i < s.n;) {
                utf8proc_category_t cat = utf8proc_category(ju_decode(s.s, s.n, &i));
                if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
                    if (prev_cased) return &jv_false_value;
                    prev_cased = any = true;
                } else if (cat == UTF8PROC_CATEGORY_LL) {
                    if (!prev_cased) return &jv_false_value;
                    prev_cased = any = true;
                } else {
                    prev_cased = false;
                }
            }
            return jv_bool(any);
        }
        if (!strcmp(name, "splitlines")) {
            JStr *lines;
            size_t n;
            if (py_splitlines(c, s, &lines, &n, line) != 0) return NULL;
            JValue *l = jv_list(c->arena, n, false);
            for (size_t i = 0; i < n; i++)
                l->u.list.items[i] = jv_str_ref(c->arena, lines[i]);
            return l;
        }
    }
    if (!strcmp(name, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        if (bind(a, what, names, 3, p, line) != 0) return NULL;
        if (!p[0] || !p[1]) return jinja_fail(line, "%s takes at least 2 arguments", what);
        if (!str_arg(c, p[0], what, line) || !str_arg(c, p[1], what, line)) return NULL;
        int64_t count;
        if (arg_int(p[2], -1, &count, what, line) != 0) return NULL;
        return py_replace(c, s, p[0]->u.s, p[1]->u.s, count);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
        !strcmp(name, "rindex")) {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "%s: only the one-argument form is supported", what);
        if (!str_arg(c, a->args[0], what, line)) return NULL;
        bool raise = !strcmp(name, "index") || !strcmp(name, "rindex");
        return find_in_str(c, s, a->args[0]->u.s, name[0] == 'r', raise, line);
    }
    if (!strcmp(name, "count")) {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "%s: only the one-argument form is supported", what);
        if (!str_arg(c, a->args[0], what, line)) return NULL;
        JStr sub = a->args[0]->u.s;
        if (sub.n == 0) return jv_int(c->arena, (int64_t)ju_length(s.s, s.n) + 1);
        int64_t count = 0;
        for (size_t i = 0; i + sub.n <= s.n;) {
            const char *hit = memmem(s.s + i, s.n - i, sub.s, sub.n);
            if (!hit) break;
            count++;
            i = (size_t)(hit - s.s) + sub.n;
        }
        return jv_int(c->arena, count);
    }
    if (!strcmp(name, "join")) {
        if (a->nargs != 1 || a->nkw) return jinja_fail(line, "%s takes exactly one argument", what);
        JValue **items;
        size_t n;
        if (jinja_iterate(c, a->args[0], &items, &n, line) != 0) return NULL;
        JBuf b;
        jb_init(&b, c->arena);
        for (size_t i = 0; i < n; i++) {
            if (items[i]->kind != JV_STRING)
                return jinja_fail(line, "sequence item %zu: expected str instance, %s found", i,
                                  jv_type_name(items[i]));
            if (i) jb_put(&b, s.s, s.n);
            jb_put(&b, items[i]->u.s.s, items[i]->u.s.n);
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if (a->nargs != 1 || a->nkw) return jinja_fail(line, "%s takes exactly one argument", what);
        if (!str_arg(c, a->args[0], what, line)) return NULL;
        JStr x = a->args[0]->u.s;
        if (name[6] == 'p' && str_starts(s, x)) return jv_str(c->arena, s.s + x.n, s.n - x.n);
        if (name[6] == 's' && str_ends(s, x)) return jv_str(c->arena, s.s, s.n - x.n);
        return self;
    }
    return jinja_fail(line, "%s: unexpected arguments", what);
}

static JValue *call_method(JCtx *c, JFunc *fn, const JArgs *a, int line) {
    JValue *self = fn->self;
    const char *name = fn->name;
    MethodKind mk = method_kind(self, name);
    if (mk == M_UNSUPPORTED)
        return jinja_fail(line, "the method %s.%s() is not supported by this renderer",
                          jv_type_name(self), name);
    if (mk == M_UNSAFE)
        return jinja_fail(line, "access to attribute '%s' of '%s' object is unsafe.", name,
                          jv_type_name(self));
    switch (self->kind) {
    case JV_STRING:
        return call_str_method(c, self, name, a, line);
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

/* ---------------------------------------------------------------- tests */

static int run_test_by_name(JCtx *c, JValue *name, JValue *v, JValue **args, size_t nargs, int line,
                            bool *res);

int jinja_apply_test(JCtx *c, int id, JValue *v, const JArgs *a, int line, bool *res) {
    JValue *arg = a->nargs ? a->args[0] : a->nkw ? a->kwvals[0] : NULL;
    bool needs_arg = id == T_DIVISIBLEBY || id == T_SAMEAS || id == T_IN || id >= T_EQ_SYM;
    if (needs_arg && !arg) {
        jinja_fail(line, "test '%s' needs an argument", test_names[id]);
        return -1;
    }
    switch (id) {
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        if (v->kind == JV_UNDEFINED) {
            jinja_fail_undefined(line, v);
            return -1;
        }
        JValue *d = id == T_DIVISIBLEBY ? arg : jv_int(c->arena, 2);
        if (!jv_is_number(v) || !jv_is_number(d)) {
            jinja_fail(line, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(v),
                       jv_type_name(d));
            return -1;
        }
        double r;
        if (v->kind != JV_FLOAT && d->kind != JV_FLOAT) {
            int64_t x = v->kind == JV_INT ? v->u.i : v->u.b,
                    y = d->kind == JV_INT ? d->u.i : d->u.b;
            if (y == 0) {
                jinja_fail(line, "integer division or modulo by zero");
                return -1;
            }
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            r = (double)m;
        } else {
            double x = jv_as_double(v), y = jv_as_double(d);
            if (y == 0.0) {
                jinja_fail(line, "float modulo");
                return -1;
            }
            r = fmod(x, y);
            if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        }
        *res = id == T_ODD ? r == 1.0 : r == 0.0;
        return 0;
    }
    case T_DEFINED:
        *res = v->kind != JV_UNDEFINED;
        return 0;
    case T_UNDEFINED:
        *res = v->kind == JV_UNDEFINED;
        return 0;
    case T_FILTER:
        *res = v->kind == JV_STRING && jinja_filter_id(v->u.s.s) >= 0;
        return 0;
    case T_TEST:
        *res = v->kind == JV_STRING && jinja_test_id(v->u.s.s) >= 0;
        return 0;
    case T_NONE:
        *res = v->kind == JV_NONE;
        return 0;
    case T_BOOLEAN:
        *res = v->kind == JV_BOOL;
        return 0;
    case T_FALSE:
        *res = v->kind == JV_BOOL && !v->u.b;
        return 0;
    case T_TRUE:
        *res = v->kind == JV_BOOL && v->u.b;
        return 0;
    case T_INTEGER:
        *res = v->kind == JV_INT;
        return 0;
    case T_FLOAT:
        *res = v->kind == JV_FLOAT;
        return 0;
    case T_LOWER:
    case T_UPPER: {
        JValue *s = jv_str_of(c->arena, v);
        *res = str_is_case(s->u.s, id == T_UPPER);
        return 0;
    }
    case T_STRING:
        *res = v->kind == JV_STRING;
        return 0;
    case T_MAPPING:
        *res = v->kind == JV_DICT;
        return 0;
    case T_NUMBER:
        *res = jv_is_number(v);
        return 0;
    case T_SEQUENCE:
        *res = v->kind == JV_STRING ||
               (v->kind == JV_LIST && (v->view == JVIEW_NONE || v->view == JVIEW_RANGE)) ||
               v->kind == JV_DICT || v->kind == JV_UNDEFINED;
        return 0;
    case T_ITERABLE:
        *res = v->kind == JV_STRING || v->kind == JV_LIST || v->kind == JV_DICT ||
               v->kind == JV_UNDEFINED || v->kind == JV_LOOP || v->kind == JV_ITER;
        return 0;
    case T_CALLABLE:
        *res = v->kind == JV_FUNC || v->kind == JV_UNDEFINED || v->kind == JV_LOOP;
        return 0;
    case T_SAMEAS:
        if (v->kind == JV_NONE || v->kind == JV_BOOL || v->kind == JV_UNDEFINED)
            *res = v->kind == arg->kind && (v->kind != JV_BOOL || v->u.b == arg->u.b) &&
                   (v->kind != JV_UNDEFINED || v == arg);
        else
            *res = v == arg;
        return 0;
    case T_ESCAPED:
        *res = false;
        return 0;
    case T_IN:
        return jinja_contains(c, arg, v, line, res);
    case T_EQ_SYM:
    case T_EQ:
    case T_EQUALTO:
        *res = jv_equal(v, arg);
        return 0;
    case T_NE_SYM:
    case T_NE:
        *res = !jv_equal(v, arg);
        return 0;
    default: {
        /* Orderings. */
        bool lt;
        bool greater =
            id == T_GT_SYM || id == T_GT || id == T_GREATERTHAN || id == T_GE || id == T_GE_SYM;
        bool or_equal = id == T_GE || id == T_GE_SYM || id == T_LE_SYM || id == T_LE;
        if (v->kind == JV_UNDEFINED || arg->kind == JV_UNDEFINED) {
            jinja_fail_undefined(line, v->kind == JV_UNDEFINED ? v : arg);
            return -1;
        }
        int rc = greater != or_equal ? jv_less(arg, v, &lt) : jv_less(v, arg, &lt);
        if (rc != 0) {
            jinja_fail(line, "%s", err_msg());
            return -1;
        }
        *res = or_equal ? !lt : lt;
        return 0;
    }
    }
}

static int run_test_by_name(JCtx *c, JValue *name, JValue *v, JValue **args, size_t nargs, int line,
                            bool *res) {
    if (name->kind != JV_STRING) {
        jinja_fail(line, "a test name must be a string, got '%s'", jv_type_name(name));
        return -1;
    }
    int id = jinja_test_id(name->u.s.s);
    if (id < 0) {
        jinja_fail(line, "No test named '%s'.", name->u.s.s);
        return -1;
    }
    JArgs a = {.args = args, .nargs = nargs};
    return jinja_apply_test(c, id, v, &a, line, res);
}

/* ---------------------------------------------------------------- printf-style % */

/* Pads `body` (with sign/prefix kept in front of zero padding) to `width` code points. */
static void put_padded(JBuf *b, const char *sign, const char *prefix, const char *body,
                       size_t body_len, int64_t width, bool left, bool zero) {
    int64_t len = (int64_t)(strlen(sign) + strlen(prefix) + ju_length(body, body_len));
    int64_t pad = width > len ? width - len : 0;
    if (!left && !zero)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, ' ');
    jb_puts(b, sign);
    jb_puts(b, prefix);
    if (!left && zero)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, '0');
    jb_put(b, body, body_len);
    if (left)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, ' ');
}

/* Python's `fmt % args` (printf-style formatting): args is a tuple of positional values,
 * a dict for %(name)s, or any single value. */
JValue *jinja_printf(JCtx *c, JStr fmt, JValue *args, int line) {
    JValue **list = &args;
    size_t nlist = 1, next = 0;
    if (args->kind == JV_LIST && args->is_tuple) {
        list = args->u.list.items;
        nlist = args->u.list.n;
    }
    /* Python accepts unused arguments when the argument "looks like a mapping". */
    bool mapping_like = (args->kind == JV_DICT) || (args->kind == JV_LIST && !args->is_tuple);
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0; i < fmt.n;) {
        if (fmt.s[i] != '%') {
            jb_putc(&b, fmt.s[i++]);
            continue;
        }
        if (++i >= fmt.n) return jinja_fail(line, "incomplete format");
        JValue *v = NULL;
        if (fmt.s[i] == '(') {
            size_t start = ++i;
            int depth = 1;
            while (i < fmt.n && depth) {
                if (fmt.s[i] == '(') depth++;
                if (fmt.s[i] == ')') depth--;
                i++;
            }
            if (depth) return jinja_fail(line, "incomplete format key");
            if (args->kind != JV_DICT) return jinja_fail(line, "format requires a mapping");
            v = jv_dict_get(args->u.dict, fmt.s + start, i - 1 - start);
            if (!v)
                return jinja_fail(line, "KeyError: '%.*s'", (int)(i - 1 - start), fmt.s + start);
        }
        bool left = false, plus = false, space = false, alt = false, zero = false;
        for (; i < fmt.n && strchr("-+ #0", fmt.s[i]); i++) {
            char f = fmt.s[i];
            left |= f == '-', plus |= f == '+', space |= f == ' ', alt |= f == '#',
                zero |= f == '0';
        }
        int64_t width = -1, prec = -1;
        for (int part = 0; part < 2; part++) {
            int64_t *dst = part ? &prec : &width;
            if (part) {
                if (i >= fmt.n || fmt.s[i] != '.') break;
                i++;
                *dst = 0;
            }
            if (i < fmt.n && fmt.s[i] == '*') {
                if (next >= nlist)
                    return jinja_fail(line, "not enough arguments for format string");
                JValue *w = list[next++];
                if (w->kind != JV_INT) return jinja_fail(line, "* wants int");
                *dst = w->u.i;
                i++;
            } else {
                while (i < fmt.n && fmt.s[i] >= '0' && fmt.s[i] <= '9') {
                    *dst = (*dst < 0 ? 0 : *dst) * 10 + (fmt.s[i++] - '0');
                    if (*dst > 100000) return jinja_fail(line, "width or precision too big");
                }
            }
        }
        if (width < 0 && width != -1) {
            left = true;
            width = -width;
        }
        while (i < fmt.n && strchr("hlL", fmt.s[i]))
            i++;
        if (i >= fmt.n) return jinja_fail(line, "incomplete format");
        char conv = fmt.s[i++];
        if (conv == '%') {
            jb_putc(&b, '%');
            continue;
        }
        if (!v) {
            if (next >= nlist) return jinja_fail(line, "not enough arguments for format string");
            v = list[next++];
        }
        if (v->kind == JV_UNDEFINED && conv != 's' && conv != 'r' && conv != 'a')
            return jinja_fail_undefined(line, v);
        const char *sign = "";
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            JBuf t;
            jb_init(&t, c->arena);
            if (conv == 's')
                jv_to_str(&t, v);
            else if (jv_repr(&t, v) != 0)
                return jinja_fail(line, "%s", err_msg());
            JStr str = jb_str(&t);
            size_t cut = str.n;
            if (prec >= 0) {
                cut = 0;
                for (int64_t k = 0; k < prec && cut < str.n; k++)
                    ju_decode(str.s, str.n, &cut);
            }
            put_padded(&b, "", "", str.s, cut, width, left, false);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X':
        case 'c': {
            int64_t iv;
            if (v->kind == JV_INT || v->kind == JV_BOOL) {
                iv = v->kind == JV_INT ? v->u.i : v->u.b;
            } else if (v->kind == JV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18)
                    return jinja_fail(line, "cannot convert float %s to integer",
                                      isnan(v->u.f) ? "NaN" : "infinity");
                iv = (int64_t)v->u.f;
            } else if (conv == 'c' && v->kind == JV_STRING && ju_length(v->u.s.s, v->u.s.n) == 1) {
                put_padded(&b, "", "", v->u.s.s, v->u.s.n, width, left, false);
                break;
            } else {
                return jinja_fail(line, "%%%c format: %s is required, not %s", conv,
                                  conv == 'c' ? "an int or a unicode character"
                                  : conv == 'd' || conv == 'i' || conv == 'u' ? "a real number"
                                                                              : "an integer",
                                  jv_type_name(v));
            }
            if (conv == 'c') {
                if (iv < 0 || iv > 0x10ffff)
                    return jinja_fail(line, "%%c arg not in range(0x110000)");
                JBuf t;
                jb_init(&t, c->arena);
                ju_encode(&t, (int32_t)iv);
                put_padded(&b, "", "", t.data, t.len, width, left, false);
                break;
            }
            bool neg = iv < 0;
            uint64_t mag = neg ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
            char digits[80];
            int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
            const char *alphabet = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            int nd = 0;
            char rev[70];
            do {
                rev[nd++] = alphabet[mag % (uint64_t)base];
                mag /= (uint64_t)base;
            } while (mag);
            int len = 0;
            for (int64_t k = nd; k < prec && len < 64; k++)
                digits[len++] = '0';
            while (nd)
                digits[len++] = rev[--nd];
            sign = neg ? "-" : plus ? "+" : space ? " " : "";
            const char *prefix = !alt          ? ""
                                 : conv == 'o' ? "0o"
                                 : conv == 'x' ? "0x"
                                 : conv == 'X' ? "0X"
                                               : "";
            put_padded(&b, sign, prefix, digits, (size_t)len, width, left, zero && !left);
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': {
            if (!jv_is_number(v))
                return jinja_fail(line, "must be real number, not %s", jv_type_name(v));
            double d = jv_as_double(v);
            char spec[32], out[512];
            snprintf(spec, sizeof spec, "%%%s%s%s%s.%d%c", plus ? "+" : "", space ? " " : "",
                     alt ? "#" : "", "",
                     (int)(prec < 0     ? 6
                           : prec > 300 ? 300
                                        : prec),
                     conv);
            snprintf(out, sizeof out, spec, d);
            /* Sign first, then zero padding, as Python does. */
            const char *body = out;
            char sg[2] = {0, 0};
            if (*body == '-' || *body == '+' || *body == ' ') {
                sg[0] = *body;
                body++;
            }
            put_padded(&b, sg, "", body, strlen(body), width, left, zero && !left && isfinite(d));
            break;
        }
        default:
            return jinja_fail(line, "unsupported format character '%c' (0x%x)", conv,
                              (unsigned)(unsigned char)conv);
        }
    }
    if (next < nlist && !mapping_like && !(args->kind == JV_LIST && args->is_tuple && nlist == 0))
        return jinja_fail(line, "not all arguments converted during string formatting");
    return jv_str_ref(c->arena, jb_str(&b));
}

/* ---------------------------------------------------------------- filters */

/* Sorting helpers: stable merge sort of values by key. */
typedef struct {
    JValue *key;
    JValue *item;
} SortEntry;

/* A merge sort's comparisons, n log2 n: charged before sorting (jinja_charge). */
static uint64_t sort_work(size_t n) {
    uint64_t work = 1;
    for (size_t k = n; k > 1; k >>= 1)
        work += n;
    return work;
}

static int sort_entries(SortEntry *e, size_t n, bool reverse, SortEntry *tmp) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (sort_entries(e, h, reverse, tmp) != 0 || sort_entries(e + h, n - h, reverse, tmp) != 0)
        return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        bool take_right;
        /* right before left only when strictly smaller (stability). */
        if (reverse) {
            if (jv_less(e[i].key, e[j].key, &take_right) != 0) return -1;
        } else {
            if (jv_less(e[j].key, e[i].key, &take_right) != 0) return -1;
        }
        tmp[k++] = take_right ? e[j++] : e[i++];
    }
    while (i < h)
        tmp[k++] = e[i++];
    while (j < n)
        tmp[k++] = e[j++];
    memcpy(e, tmp, n * sizeof *e);
    return 0;
}

static JValue *lower_if_string(JCtx *c, JValue *v) {
    return v->kind == JV_STRING ? str_case(c, v->u.s, CASE_LOWER) : v;
}

/* make_attrgetter: "a.b.0" looked up with getitem, part by part. */
static JValue *get_attribute_path(JCtx *c, JValue *item, JValue *attr, JValue *dflt, int line) {
    if (attr->kind == JV_INT) {
        if (item->kind == JV_UNDEFINED) return jinja_fail_undefined(line, item);
        JValue *v = jinja_getitem(c, item, attr, line);
        return (dflt && v && v->kind == JV_UNDEFINED) ? dflt : v;
    }
    if (attr->kind != JV_STRING) return jinja_fail(line, "attribute name must be a string");
    JStr s = attr->u.s;
    size_t start = 0;
    for (size_t i = 0; i <= s.n; i++) {
        if (i < s.n && s.s[i] != '.') continue;
        JStr part = {s.s + start, i - start};
        bool digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            if (part.s[k] < '0' || part.s[k] > '9') digits = false;
        JValue *key = digits
                          ? jv_int(c->arena, strtoll(ja_memdup(c->arena, part.s, part.n), NULL, 10))
                          : jv_str(c->arena, part.s, part.n);
        if (item->kind == JV_UNDEFINED) return jinja_fail_undefined(line, item);
        item = jinja_getitem(c, item, key, line);
        if (!item) return NULL;
        if (dflt && item->kind == JV_UNDEFINED) item = dflt;
        start = i + 1;
    }
    return item;
}

/* select/reject/selectattr/rejectattr. */
static JValue *select_reject(JCtx *c, JValue *v, const JArgs *a, bool select, bool attr, int line) {
    JValue **items;
    size_t n;
    if (jinja_iterate(c, v, &items, &n, line) != 0) return lazy_error(c);
    size_t off = 0;
    JValue *attr_name = NULL;
    if (attr) {
        if (a->nargs < 1) return jinja_fail(line, "Missing parameter for attribute name");
        attr_name = a->args[0];
        off = 1;
    }
    JValue *test = a->nargs > off ? a->args[off] : NULL;
    JValue **targs = a->nargs > off + 1 ? a->args + off + 1 : NULL;
    size_t ntargs = a->nargs > off + 1 ? a->nargs - off - 1 : 0;
    JValue **out = ja_alloc(c->arena, (n ? n : 1) * sizeof *out);
    size_t nout = 0;
    for (size_t i = 0; i < n; i++) {
        JValue *x = items[i];
        if (attr && !(x = get_attribute_path(c, x, attr_name, NULL, line))) return NULL;
        bool r;
        if (test) {
            if (run_test_by_name(c, test, x, targs, ntargs, line, &r) != 0) return NULL;
        } else {
            r = jv_truthy(x);
        }
        if (r == select) out[nout++] = items[i];
    }
    return jv_iter(c->arena, out, nout, "generator");
}

static JValue *do_tojson(JCtx *c, JValue *v, const JArgs *a, int line) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    JValue *p[4];
    if (bind(a, "tojson", names, 4, p, line) != 0) return NULL;
    JJsonOpts o = {.ensure_ascii = arg_bool(p[0], false), .sort_keys = arg_bool(p[3], false)};
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

static JValue *len_of(JCtx *c, JValue *v, int line) {
    switch (v->kind) {
    case JV_STRING:
        return jv_int(c->arena, (int64_t)ju_length(v->u.s.s, v->u.s.n));
    case JV_LIST:
        return jv_int(c->arena, (int64_t)v->u.list.n);
    case JV_DICT:
        return jv_int(c->arena, (int64_t)v->u.dict->n);
    case JV_UNDEFINED:
        return jv_int(c->arena, 0);
    case JV_LOOP:
        return jv_int(c->arena, v->u.loop->length);
    default:
        return jinja_fail(line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static JValue *min_max(JCtx *c, JValue *v, const JArgs *a, bool want_max, int line) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    JValue *p[2];
    if (bind(a, want_max ? "max" : "min", names, 2, p, line) != 0) return NULL;
    JValue **items;
    size_t n;
    if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
    if (n == 0)
        return jv_undefined(c->arena, "No %s item, sequence was empty.",
                            want_max ? "largest" : "smallest");
    JValue *best = NULL, *best_key = NULL;
    for (size_t i = 0; i < n; i++) {
        JValue *k = items[i];
        if (p[1] && p[1]->kind != JV_NONE && !(k = get_attribute_path(c, k, p[1], NULL, line)))
            return NULL;
        if (!arg_bool(p[0], false)) k = lower_if_string(c, k);
        bool better = !best;
        if (best) {
            if ((want_max ? jv_less(best_key, k, &better) : jv_less(k, best_key, &better)) != 0)
                return jinja_fail(line, "%s", err_msg());
        }
        if (better) {
            best = items[i];
            best_key = k;
        }
    }
    return best;
}

JValue *jinja_apply_filter(JCtx *c, JFrame *f, int id, JValue *v, const JArgs *a, int line) {
    JValue *p[5];
    const char *what = filter_names[id];
    char whatbuf[64];
    snprintf(whatbuf, sizeof whatbuf, "filter '%s'", what);
    what = whatbuf;
    switch (id) {
    case F_ABS:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
        if (v->kind == JV_FLOAT) return jv_float(c->arena, fabs(v->u.f));
        if (v->kind == JV_INT) {
            if (v->u.i == INT64_MIN) return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, v->u.i < 0 ? -v->u.i : v->u.i);
        }
        if (v->kind == JV_BOOL) return jv_int(c->arena, v->u.b);
        return jinja_fail(line, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        static const char *const names[] = {"name"};
        if (bind(a, what, names, 1, p, line) != 0) return NULL;
        if (!p[0] || !str_arg(c, p[0], what, line))
            return p[0] ? NULL : jinja_fail(line, "attr needs a name");
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
        if (v->kind == JV_LOOP) {
            JValue *r = loop_attr(c, v->u.loop, p[0]->u.s.s);
            if (r) return r;
        }
        MethodKind mk = method_kind(v, p[0]->u.s.s);
        if (mk != M_NONE) return method_value(c, v, p[0]->u.s.s, mk);
        if (v->kind == JV_NAMESPACE) {
            JValue *r = jv_dict_get(v->u.dict, p[0]->u.s.s, p[0]->u.s.n);
            if (r) return r;
        }
        return jv_undefined_attr(c->arena, v, p[0]->u.s.s);
    }
    case F_BATCH: {
        static const char *const names[] = {"linecount", "fill_with"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        int64_t count;
        if (!p[0]) return jinja_fail(line, "batch needs a line count");
        if (arg_int(p[0], 1, &count, what, line) != 0) return NULL;
        if (count <= 0) return jinja_fail(line, "batch: line count must be positive");
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return lazy_error(c);
        size_t nb = (n + (size_t)count - 1) / (size_t)count;
        JValue *out = jv_list(c->arena, nb, false);
        for (size_t b = 0; b < nb; b++) {
            size_t len =
                n - b * (size_t)count < (size_t)count ? n - b * (size_t)count : (size_t)count;
            bool fill = p[1] && p[1]->kind != JV_NONE && len < (size_t)count;
            JValue *row = jv_list(c->arena, fill ? (size_t)count : len, false);
            for (size_t i = 0; i < row->u.list.n; i++)
                row->u.list.items[i] = i < len ? items[b * (size_t)count + i] : p[1];
            out->u.list.items[b] = row;
        }
        return jv_iter(c->arena, out->u.list.items, nb, "generator");
    }
    case F_CAPITALIZE:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        return py_capitalize(c, jv_str_of(c->arena, v)->u.s);
    case F_CENTER: {
        static const char *const names[] = {"width"};
        if (bind(a, what, names, 1, p, line) != 0) return NULL;
        int64_t width;
        if (arg_int(p[0], 80, &width, what, line) != 0) return NULL;
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
    case F_COUNT:
    case F_LENGTH:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        return len_of(c, v, line);
    case F_D:
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        if (v->kind == JV_UNDEFINED || (arg_bool(p[1], false) && !jv_truthy(v)))
            return p[0] ? p[0] : jv_cstr(c->arena, "");
        return v;
    }
    case F_DICTSORT: {
        static const char *const names[] = {"case_sensitive", "by", "reverse"};
        if (bind(a, what, names, 3, p, line) != 0) return NULL;
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
        if (v->kind != JV_DICT)
            return jinja_fail(line, "dictsort: '%s' object has no attribute 'items'",
                              jv_type_name(v));
        int pos = 0;
        if (p[1]) {
            if (p[1]->kind == JV_STRING && !strcmp(p[1]->u.s.s, "value"))
                pos = 1;
            else if (!(p[1]->kind == JV_STRING && !strcmp(p[1]->u.s.s, "key")))
                return jinja_fail(line, "You can only sort by either \"key\" or \"value\"");
        }
        const JDict *d = v->u.dict;
        SortEntry *e = ja_alloc(c->arena, (d->n + 1) * sizeof *e),
                  *tmp = ja_alloc(c->arena, (d->n + 1) * sizeof *e);
        for (size_t i = 0; i < d->n; i++) {
            JValue *pair = jv_list(c->arena, 2, true);
            pair->u.list.items[0] = jv_str_ref(c->arena, d->items[i].key);
            pair->u.list.items[1] = d->items[i].val;
            e[i].item = pair;
            e[i].key = pair->u.list.items[pos];
            if (!arg_bool(p[0], false)) e[i].key = lower_if_string(c, e[i].key);
        }
        if (jinja_charge(c, sort_work(d->n), line) != 0) return NULL;
        if (sort_entries(e, d->n, arg_bool(p[2], false), tmp) != 0)
            return jinja_fail(line, "%s", err_msg());
        JValue *l = jv_list(c->arena, d->n, false);
        for (size_t i = 0; i < d->n; i++)
            l->u.list.items[i] = e[i].item;
        return l;
    }
    case F_E:
    case F_ESCAPE:
    case F_FORCEESCAPE:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        return html_escape(c, jv_str_of(c->arena, v)->u.s);
    case F_FIRST:
    case F_LAST: {
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        if (v->kind == JV_ITER) {
            if (v->iter_error) return jinja_fail(line, "%s", v->iter_error);
            if (id == F_LAST)
                return jinja_fail(line, "'%s' object is not reversible", v->iter_name);
            if (v->u.list.n == 0)
                return jv_undefined(c->arena, "No first item, sequence was empty.");
            JValue *x = v->u.list.items[0];
            v->u.list.items++;
            v->u.list.n--;
            return x;
        }
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        if (n == 0)
            return jv_undefined(c->arena, "No %s item, sequence was empty.",
                                id == F_FIRST ? "first" : "last");
        return items[id == F_FIRST ? 0 : n - 1];
    }
    case F_FLOAT: {
        static const char *const names[] = {"default"};
        if (bind(a, what, names, 1, p, line) != 0) return NULL;
        JValue *dflt = p[0] ? p[0] : jv_float(c->arena, 0.0);
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
        if (v->kind == JV_FLOAT) return v;
        if (v->kind == JV_INT || v->kind == JV_BOOL) return jv_float(c->arena, jv_as_double(v));
        double d;
        if (v->kind == JV_STRING && parse_py_float(v->u.s, &d)) return jv_float(c->arena, d);
        return dflt;
    }
    case F_FORMAT: {
        /* soft_str(value) % (kwargs or args) */
        if (a->nargs && a->nkw)
            return jinja_fail(line,
                              "can't handle positional and keyword arguments at the same time");
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
        return jinja_printf(c, jv_str_of(c->arena, v)->u.s, args, line);
    }
    case F_INDENT: {
        static const char *const names[] = {"width", "first", "blank"};
        if (bind(a, what, names, 3, p, line) != 0) return NULL;
        JStr ind;
        if (p[0] && p[0]->kind == JV_STRING) {
            ind = p[0]->u.s;
        } else {
            int64_t w;
            if (arg_int(p[0], 4, &w, what, line) != 0) return NULL;
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
        if (py_splitlines(c, jb_str(&tmp), &lines, &n, line) != 0) return NULL;
        JBuf b;
        jb_init(&b, c->arena);
        if (arg_bool(p[1], false)) jb_put(&b, ind.s, ind.n);
        bool blank = arg_bool(p[2], false);
        for (size_t i = 0; i < n; i++) {
            if (i) {
                jb_putc(&b, '\n');
                if (blank || lines[i].n) jb_put(&b, ind.s, ind.n);
            }
            jb_put(&b, lines[i].s, lines[i].n);
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    case F_INT: {
        static const char *const names[] = {"default", "base"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        JValue *dflt = p[0] ? p[0] : jv_int(c->arena, 0);
        int64_t base;
        if (arg_int(p[1], 10, &base, what, line) != 0) return NULL;
        if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
        if (v->kind == JV_INT) return v;
        if (v->kind == JV_BOOL) return jv_int(c->arena, v->u.b);
        double d;
        if (v->kind == JV_STRING) {
            int64_t i;
            if (parse_py_int(v->u.s, base, &i)) return jv_int(c->arena, i);
            if (!parse_py_float(v->u.s, &d)) return dflt;
        } else if (v->kind == JV_FLOAT) {
            d = v->u.f;
        } else {
            return dflt;
        }
        if (isnan(d) || isinf(d) || fabs(d) >= 9.2e18) return dflt;
        return jv_int(c->arena, (int64_t)d);
    }
    case F_ITEMS: {
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        if (v->kind == JV_UNDEFINED) return jv_iter(c->arena, NULL, 0, "generator");
        if (v->kind != JV_DICT) {
            jinja_fail(line, "Can only get item pairs from a mapping.");
            return lazy_error(c);
        }
        JFunc fn = {.kind = JF_METHOD, .name = "items", .self = v};
        JArgs none = {0};
        JValue *l = call_method(c, &fn, &none, line);
        return l ? jv_iter(c->arena, l->u.list.items, l->u.list.n, "generator") : NULL;
    }
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        JValue *sep = p[0] ? jv_str_of(c->arena, p[0]) : NULL;
        JBuf b;
        jb_init(&b, c->arena);
        for (size_t i = 0; i < n; i++) {
            JValue *x = items[i];
            if (p[1] && p[1]->kind != JV_NONE && !(x = get_attribute_path(c, x, p[1], NULL, line)))
                return NULL;
            if (i && sep) jb_put(&b, sep->u.s.s, sep->u.s.n);
            jv_to_str(&b, x);
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    case F_LIST: {
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        return list_of(c, items, n);
    }
    case F_LOWER:
    case F_UPPER:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        return str_case(c, jv_str_of(c->arena, v)->u.s, id == F_LOWER ? CASE_LOWER : CASE_UPPER);
    case F_MAP: {
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return lazy_error(c);
        JValue *out = jv_list(c->arena, n, false);
        if (a->nargs == 0) {
            JValue *attr = NULL, *dflt = NULL;
            for (size_t k = 0; k < a->nkw; k++) {
                if (!strcmp(a->kwnames[k].s, "attribute"))
                    attr = a->kwvals[k];
                else if (!strcmp(a->kwnames[k].s, "default"))
                    dflt = a->kwvals[k];
                else
                    return jinja_fail(line, "Unexpected keyword argument '%s'", a->kwnames[k].s);
            }
            if (!attr) return jinja_fail(line, "map requires a filter argument");
            if (dflt && dflt->kind == JV_NONE) dflt = NULL;
            for (size_t i = 0; i < n; i++)
                if (!(out->u.list.items[i] = get_attribute_path(c, items[i], attr, dflt, line)))
                    return NULL;
            return jv_iter(c->arena, out->u.list.items, n, "generator");
        }
        JValue *fname = a->args[0];
        if (fname->kind != JV_STRING)
            return jinja_fail(line, "map: the filter name must be a string");
        int fid = jinja_filter_id(fname->u.s.s);
        if (fid == -1) return jinja_fail(line, "No filter named '%s'.", fname->u.s.s);
        if (fid == -2)
            return jinja_fail(line, "filter '%s' is not supported by this renderer", fname->u.s.s);
        JArgs rest = *a;
        rest.args++;
        rest.nargs--;
        for (size_t i = 0; i < n; i++)
            if (!(out->u.list.items[i] = jinja_apply_filter(c, f, fid, items[i], &rest, line)))
                return NULL;
        return jv_iter(c->arena, out->u.list.items, n, "generator");
    }
    case F_MAX:
    case F_MIN:
        return min_max(c, v, a, id == F_MAX, line);
    case F_REJECT:
    case F_SELECT:
        return select_reject(c, v, a, id == F_SELECT, false, line);
    case F_REJECTATTR:
    case F_SELECTATTR:
        return select_reject(c, v, a, id == F_SELECTATTR, true, line);
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count"};
        if (bind(a, what, names, 3, p, line) != 0) return NULL;
        if (!p[0] || !p[1]) return jinja_fail(line, "replace needs the old and the new string");
        int64_t count;
        if (arg_int(p[2], -1, &count, what, line) != 0) return NULL;
        return py_replace(c, jv_str_of(c->arena, v)->u.s, jv_str_of(c->arena, p[0])->u.s,
                          jv_str_of(c->arena, p[1])->u.s, count);
    }
    case F_REVERSE: {
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        bool was_iter = v->kind == JV_ITER;
        const char *rev_name = "list_reverseiterator";
        if (v->kind == JV_DICT || (v->kind == JV_LIST && v->view == JVIEW_KEYS))
            rev_name = "dict_reversekeyiterator";
        else if (v->kind == JV_LIST && v->view == JVIEW_ITEMS)
            rev_name = "dict_reverseitemiterator";
        else if (v->kind == JV_LIST && v->view == JVIEW_VALUES)
            rev_name = "dict_reversevalueiterator";
        else if (v->kind == JV_LIST && v->view == JVIEW_RANGE)
            rev_name = "range_iterator";
        else if ((v->kind == JV_LIST && v->is_tuple) || v->kind == JV_UNDEFINED)
            rev_name = "reversed";
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        if (v->kind == JV_STRING) {
            JBuf b;
            jb_init(&b, c->arena);
            for (size_t i = n; i-- > 0;)
                jb_put(&b, items[i]->u.s.s, items[i]->u.s.n);
            return jv_str_ref(c->arena, jb_str(&b));
        }
        JValue *l = jv_list(c->arena, n, false);
        for (size_t i = 0; i < n; i++)
            l->u.list.items[i] = items[n - 1 - i];
        /* reversed() of a sequence is an iterator; a generator cannot be reversed, so
         * jinja2 falls back to a reversed list. */
        return was_iter ? l : jv_iter(c->arena, l->u.list.items, n, rev_name);
    }
    case F_ROUND: {
        static const char *const names[] = {"precision", "method"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        int64_t prec;
        if (arg_int(p[0], 0, &prec, what, line) != 0) return NULL;
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
    case F_SAFE:
    case F_STRING:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        if (id == F_SAFE && v->kind == JV_UNDEFINED) return jv_cstr(c->arena, "");
        return jv_str_of(c->arena, v);
    case F_SORT: {
        static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
        if (bind(a, what, names, 3, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        SortEntry *e = ja_alloc(c->arena, (n + 1) * sizeof *e),
                  *tmp = ja_alloc(c->arena, (n + 1) * sizeof *e);
        for (size_t i = 0; i < n; i++) {
            e[i].item = items[i];
            e[i].key = items[i];
            if (p[2] && p[2]->kind != JV_NONE) {
                if (p[2]->kind == JV_STRING && memchr(p[2]->u.s.s, ',', p[2]->u.s.n))
                    return jinja_fail(line,
                                      "sort: several comma-separated attributes are not supported");
                if (!(e[i].key = get_attribute_path(c, items[i], p[2], NULL, line))) return NULL;
            }
            if (!arg_bool(p[1], false)) e[i].key = lower_if_string(c, e[i].key);
        }
        if (jinja_charge(c, sort_work(n), line) != 0) return NULL;
        if (sort_entries(e, n, arg_bool(p[0], false), tmp) != 0)
            return jinja_fail(line, "%s", err_msg());
        JValue *l = jv_list(c->arena, n, false);
        for (size_t i = 0; i < n; i++)
            l->u.list.items[i] = e[i].item;
        return l;
    }
    case F_SUM: {
        static const char *const names[] = {"attribute", "start"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
        JValue *acc = p[1] ? p[1] : jv_int(c->arena, 0);
        for (size_t i = 0; i < n; i++) {
            JValue *x = items[i];
            if (p[0] && p[0]->kind != JV_NONE && !(x = get_attribute_path(c, x, p[0], NULL, line)))
                return NULL;
            if (!(acc = jinja_binop(c, OP_ADD, acc, x, line))) return NULL;
        }
        return acc;
    }
    case F_TITLE:
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        return jinja_title(c, jv_str_of(c->arena, v)->u.s);
    case F_TOJSON:
        return do_tojson(c, v, a, line);
    case F_TRIM: {
        static const char *const names[] = {"chars"};
        if (bind(a, what, names, 1, p, line) != 0) return NULL;
        JStr *chars = NULL;
        if (p[0] && p[0]->kind != JV_NONE) {
            if (!str_arg(c, p[0], what, line)) return NULL;
            chars = &p[0]->u.s;
        }
        return py_strip(c, jv_str_of(c->arena, v)->u.s, chars, true, true);
    }
    case F_TRUNCATE: {
        static const char *const names[] = {"length", "killwords", "end", "leeway"};
        if (bind(a, what, names, 4, p, line) != 0) return NULL;
        int64_t length, leeway;
        if (arg_int(p[0], 255, &length, what, line) != 0 ||
            arg_int(p[3], 5, &leeway, what, line) != 0)
            return NULL;
        JStr end = p[2] ? jv_str_of(c->arena, p[2])->u.s : (JStr){"...", 3};
        if (v->kind != JV_STRING) {
            /* jinja2 measures and slices the value itself: a short sequence comes back as it
             * is, anything else fails as Python does. */
            JValue *l = len_of(c, v, line);
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
        if (!arg_bool(p[1], false)) {
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
    case F_UNIQUE: {
        static const char *const names[] = {"case_sensitive", "attribute"};
        if (bind(a, what, names, 2, p, line) != 0) return NULL;
        JValue **items;
        size_t n;
        if (jinja_iterate(c, v, &items, &n, line) != 0) return lazy_error(c);
        JValue **keys = ja_alloc(c->arena, (n + 1) * sizeof *keys),
               **out = ja_alloc(c->arena, (n + 1) * sizeof *out);
        size_t nout = 0;
        for (size_t i = 0; i < n; i++) {
            JValue *k = items[i];
            if (p[1] && p[1]->kind != JV_NONE && !(k = get_attribute_path(c, k, p[1], NULL, line)))
                return NULL;
            if (!arg_bool(p[0], false)) k = lower_if_string(c, k);
            if (k->kind == JV_LIST && !k->is_tuple)
                return jinja_fail(line, "unhashable type: 'list'");
            if (k->kind == JV_DICT) return jinja_fail(line, "unhashable type: 'dict'");
            bool seen = false; /* against every kept key: charged, as it is quadratic */
            if (jinja_charge(c, nout, line) != 0) return NULL;
            for (size_t j = 0; j < nout && !seen; j++)
                seen = jv_equal(keys[j], k);
            if (!seen) {
                keys[nout] = k;
                out[nout++] = items[i];
            }
        }
        return jv_iter(c->arena, out, nout, "generator");
    }
    case F_WORDCOUNT: {
        if (bind(a, what, NULL, 0, p, line) != 0) return NULL;
        JStr s = jv_str_of(c->arena, v)->u.s;
        int64_t count = 0;
        bool in_word = false;
        for (size_t i = 0; i < s.n;) {
            int32_t cp = ju_decode(s.s, s.n, &i);
            bool w = cp == '_' || is_alnum(cp);
            if (w && !in_word) count++;
            in_word = w;
        }
        return jv_int(c->arena, count);
    }
    }
    return jinja_fail(line, "internal error: unknown filter id %d", id);
}
