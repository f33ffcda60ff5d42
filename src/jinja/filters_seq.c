/* The filters that go through a sequence or mapping (batch, dictsort, first, join, length,
 * list, map, max, reverse, select, sort, sum, unique, ...), after jinja2 3.1's filters.py.
 * Those jinja2 writes as generators return one-pass iterators (JV_ITER) and fail lazily,
 * when consumed, as jinja2's do. */
#include "jinja/filters.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* jinja2's generator filters (select, map, unique, batch, items, ...) fail only when the
 * generator is consumed: a non-iterable input gives an iterator that fails then. */
static JValue *lazy_error(JCtx *c) {
    const char *msg = err_msg();
    const char *colon = strstr(msg, ": "); /* drop the "line N: " prefix; it is re-added */
    JValue *v = jv_iter(c->arena, NULL, 0, "generator");
    v->iter_error = ja_memdup(c->arena, colon ? colon + 2 : msg, strlen(colon ? colon + 2 : msg));
    return v;
}

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
    return v->kind == JV_STRING ? pystr_case(c, v->u.s, PYSTR_LOWER) : v;
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
            if (jinja_test_by_name(c, test, x, targs, ntargs, line, &r) != 0) return NULL;
        } else {
            r = jv_truthy(x);
        }
        if (r == select) out[nout++] = items[i];
    }
    return jv_iter(c->arena, out, nout, "generator");
}

static JValue *min_max(JCtx *c, JValue *v, const JArgs *a, bool want_max, int line) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    JValue *p[2];
    if (jinja_bind_args(a, want_max ? "max" : "min", names, 2, p, line) != 0) return NULL;
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
        if (!jinja_arg_bool(p[0], false)) k = lower_if_string(c, k);
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

JValue *jf_batch(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"linecount", "fill_with"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
    int64_t count;
    if (!p[0]) return jinja_fail(line, "batch needs a line count");
    if (jinja_arg_int(p[0], 1, &count, what, line) != 0) return NULL;
    if (count <= 0) return jinja_fail(line, "batch: line count must be positive");
    JValue **items;
    size_t n;
    if (jinja_iterate(c, v, &items, &n, line) != 0) return lazy_error(c);
    size_t nb = (n + (size_t)count - 1) / (size_t)count;
    JValue *out = jv_list(c->arena, nb, false);
    for (size_t b = 0; b < nb; b++) {
        size_t len = n - b * (size_t)count < (size_t)count ? n - b * (size_t)count : (size_t)count;
        bool fill = p[1] && p[1]->kind != JV_NONE && len < (size_t)count;
        JValue *row = jv_list(c->arena, fill ? (size_t)count : len, false);
        for (size_t i = 0; i < row->u.list.n; i++)
            row->u.list.items[i] = i < len ? items[b * (size_t)count + i] : p[1];
        out->u.list.items[b] = row;
    }
    return jv_iter(c->arena, out->u.list.items, nb, "generator");
}

JValue *jf_length(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    return jinja_len(c, v, line);
}

JValue *jf_dictsort(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[3];
    static const char *const names[] = {"case_sensitive", "by", "reverse"};
    if (jinja_bind_args(a, what, names, 3, p, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED) return jinja_fail_undefined(line, v);
    if (v->kind != JV_DICT)
        return jinja_fail(line, "dictsort: '%s' object has no attribute 'items'", jv_type_name(v));
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
        if (!jinja_arg_bool(p[0], false)) e[i].key = lower_if_string(c, e[i].key);
    }
    if (jinja_charge(c, sort_work(d->n), line) != 0) return NULL;
    if (sort_entries(e, d->n, jinja_arg_bool(p[2], false), tmp) != 0)
        return jinja_fail(line, "%s", err_msg());
    JValue *l = jv_list(c->arena, d->n, false);
    for (size_t i = 0; i < d->n; i++)
        l->u.list.items[i] = e[i].item;
    return l;
}

/* first of an iterator takes its next item, using it up by one as next() does; last of one
 * fails as in jinja2, a generator not being reversible. */
static JValue *first_or_last(JCtx *c, JValue *v, const JArgs *a, const char *what, int line,
                             bool last) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    if (v->kind == JV_ITER) {
        if (v->iter_error) return jinja_fail(line, "%s", v->iter_error);
        if (last) return jinja_fail(line, "'%s' object is not reversible", v->iter_name);
        if (v->u.list.n == 0) return jv_undefined(c->arena, "No first item, sequence was empty.");
        JValue *x = v->u.list.items[0];
        v->u.list.items++;
        v->u.list.n--;
        return x;
    }
    JValue **items;
    size_t n;
    if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
    if (n == 0)
        return jv_undefined(c->arena, "No %s item, sequence was empty.", last ? "last" : "first");
    return items[last ? n - 1 : 0];
}

JValue *jf_first(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    return first_or_last(c, v, a, what, line, false);
}

JValue *jf_last(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    return first_or_last(c, v, a, what, line, true);
}

JValue *jf_items(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    if (v->kind == JV_UNDEFINED) return jv_iter(c->arena, NULL, 0, "generator");
    if (v->kind != JV_DICT) {
        jinja_fail(line, "Can only get item pairs from a mapping.");
        return lazy_error(c);
    }
    JFunc fn = {.kind = JF_METHOD, .name = "items", .self = v};
    JArgs none = {0};
    JValue *l = jinja_call_method(c, &fn, &none, line);
    return l ? jv_iter(c->arena, l->u.list.items, l->u.list.n, "generator") : NULL;
}

JValue *jf_join(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"d", "attribute"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
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

JValue *jf_list(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
    JValue **items;
    size_t n;
    if (jinja_iterate(c, v, &items, &n, line) != 0) return NULL;
    return jv_list_of(c->arena, items, n);
}

JValue *jf_map(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
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
    if (fname->kind != JV_STRING) return jinja_fail(line, "map: the filter name must be a string");
    int fid = jinja_filter_resolve(fname->u.s.s, line);
    if (fid < 0) return NULL;
    JArgs rest = *a;
    rest.args++;
    rest.nargs--;
    for (size_t i = 0; i < n; i++)
        if (!(out->u.list.items[i] = jinja_apply_filter(c, fid, items[i], &rest, line)))
            return NULL;
    return jv_iter(c->arena, out->u.list.items, n, "generator");
}

/* max, min, select, reject, selectattr, rejectattr: one shared body each, bound to its
 * variant; they bind their own parameter names (see min_max, select_reject). */
#define VARIANT_FILTER(name, call)                                                                 \
    JValue *jf_##name(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {            \
        return call;                                                                               \
    }

VARIANT_FILTER(max, min_max(c, v, a, true, line))
VARIANT_FILTER(min, min_max(c, v, a, false, line))
VARIANT_FILTER(reject, select_reject(c, v, a, false, false, line))
VARIANT_FILTER(rejectattr, select_reject(c, v, a, false, true, line))
VARIANT_FILTER(select, select_reject(c, v, a, true, false, line))
VARIANT_FILTER(selectattr, select_reject(c, v, a, true, true, line))

JValue *jf_reverse(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    if (jinja_bind_args(a, what, NULL, 0, NULL, line) != 0) return NULL;
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

JValue *jf_sort(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[3];
    static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
    if (jinja_bind_args(a, what, names, 3, p, line) != 0) return NULL;
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
        if (!jinja_arg_bool(p[1], false)) e[i].key = lower_if_string(c, e[i].key);
    }
    if (jinja_charge(c, sort_work(n), line) != 0) return NULL;
    if (sort_entries(e, n, jinja_arg_bool(p[0], false), tmp) != 0)
        return jinja_fail(line, "%s", err_msg());
    JValue *l = jv_list(c->arena, n, false);
    for (size_t i = 0; i < n; i++)
        l->u.list.items[i] = e[i].item;
    return l;
}

JValue *jf_sum(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"attribute", "start"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
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

JValue *jf_unique(JCtx *c, JValue *v, const JArgs *a, const char *what, int line) {
    JValue *p[2];
    static const char *const names[] = {"case_sensitive", "attribute"};
    if (jinja_bind_args(a, what, names, 2, p, line) != 0) return NULL;
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
        if (!jinja_arg_bool(p[0], false)) k = lower_if_string(c, k);
        if (k->kind == JV_LIST && !k->is_tuple) return jinja_fail(line, "unhashable type: 'list'");
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
