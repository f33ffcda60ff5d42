/* Python str semantics, part two: the str methods a template may call (strip, split,
 * startswith, replace, find, count, join, splitlines, removeprefix, ... and, through
 * pystr_case.c, the case and class methods), with CPython's argument rules and results. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <stdio.h>
#include <string.h>

static bool in_chars(int32_t cp, const JStr *chars) {
    if (!chars) return ju_isspace(cp);
    for (size_t i = 0; i < chars->n;) {
        if (ju_decode(chars->s, chars->n, &i) == cp) return true;
    }
    return false;
}

/* Python str.strip/lstrip/rstrip with optional chars (NULL: whitespace). */
JValue *pystr_strip(JCtx *c, JStr s, const JStr *chars, bool left, bool right) {
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

JValue *pystr_strip_call(JCtx *c, JStr s, const JArgs *a, const char *what, bool left, bool right,
                         int line) {
    static const char *const names[] = {"chars"};
    JValue *chars;
    if (jinja_bind_args(a, what, names, 1, &chars, line) != 0) return NULL;
    if (!chars || chars->kind == JV_NONE) return pystr_strip(c, s, NULL, left, right);
    if (!jinja_str_arg(chars, what, line)) return NULL;
    return pystr_strip(c, s, &chars->u.s, left, right);
}

JValue *pystr_replace(JCtx *c, JStr s, JStr old, JStr new_, int64_t count) {
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
        return jv_list_of(c->arena, parts, np);
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
    return jv_list_of(c->arena, parts, np);
}

/* Python str.splitlines() boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029. */

static bool is_line_break(int32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
           cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

int pystr_splitlines(JCtx *c, JStr s, JStr **out, size_t *count, int line) {
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

JValue *pystr_call_method(JCtx *c, JValue *self, const char *name, const JArgs *a, int line) {
    JStr s = self->u.s;
    JValue *p[3];
    char what[64];
    snprintf(what, sizeof what, "str.%s()", name);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        return pystr_strip_call(c, s, a, what, name[0] != 'r', name[0] != 'l', line);
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        static const char *const names[] = {"sep", "maxsplit"};
        if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
        JStr *sep = NULL;
        if (p[0] && p[0]->kind != JV_NONE) {
            if (!jinja_str_arg(p[0], what, line)) return NULL;
            sep = &p[0]->u.s;
        }
        int64_t maxsplit;
        if (jinja_arg_int(p[1], -1, &maxsplit, what, line) != 0) return NULL;
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
        JValue *r = pystr_case_method(c, s, name);
        if (r) return r;
        if (!strcmp(name, "splitlines")) {
            JStr *lines;
            size_t n;
            if (pystr_splitlines(c, s, &lines, &n, line) != 0) return NULL;
            JValue *l = jv_list(c->arena, n, false);
            for (size_t i = 0; i < n; i++)
                l->u.list.items[i] = jv_str_ref(c->arena, lines[i]);
            return l;
        }
    }
    if (!strcmp(name, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        if (jinja_bind_args(a, what, names, 3, p, line) != 0) return NULL;
        if (!p[0] || !p[1]) return jinja_fail(line, "%s takes at least 2 arguments", what);
        if (!jinja_str_arg(p[0], what, line) || !jinja_str_arg(p[1], what, line)) return NULL;
        int64_t count;
        if (jinja_arg_int(p[2], -1, &count, what, line) != 0) return NULL;
        return pystr_replace(c, s, p[0]->u.s, p[1]->u.s, count);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
        !strcmp(name, "rindex")) {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "%s: only the one-argument form is supported", what);
        if (!jinja_str_arg(a->args[0], what, line)) return NULL;
        bool raise = !strcmp(name, "index") || !strcmp(name, "rindex");
        return find_in_str(c, s, a->args[0]->u.s, name[0] == 'r', raise, line);
    }
    if (!strcmp(name, "count")) {
        if (a->nargs != 1 || a->nkw)
            return jinja_fail(line, "%s: only the one-argument form is supported", what);
        if (!jinja_str_arg(a->args[0], what, line)) return NULL;
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
        if (!jinja_str_arg(a->args[0], what, line)) return NULL;
        JStr x = a->args[0]->u.s;
        if (name[6] == 'p' && str_starts(s, x)) return jv_str(c->arena, s.s + x.n, s.n - x.n);
        if (name[6] == 's' && str_ends(s, x)) return jv_str(c->arena, s.s, s.n - x.n);
        return self;
    }
    return jinja_fail(line, "%s: unexpected arguments", what);
}
