/* Tree-walking evaluator.
 *
 * Scoping, as jinja2 compiles it (checked against jinja2 3.1):
 *  1. `set` at the top level writes the template frame; it shadows render variables.
 *  2. Every iteration of a for loop runs in a fresh frame whose parent is the frame
 *     around the loop, so a `set` in the body lasts until the end of that iteration only
 *     (hence namespace() in real templates). The loop target and `loop` live there too.
 *  3. `if` opens no frame.
 *  4. A macro body runs in a fresh frame whose parent is the template frame, not the
 *     caller's frame: a macro sees its arguments and top-level variables as they are at
 *     call time.
 * Output goes to ctx->out; macros and block sets swap in their own buffer. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { EXEC_OK = 0, EXEC_ERROR = -1, EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

#define MAX_MACRO_DEPTH 64

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

/* ---------------------------------------------------------------- limits */

#define WORK_UNBOUNDED (UINT64_MAX / 4) /* more than any allowance; sums of two can't wrap */

static uint64_t value_work(JValue *v, int depth) {
    JValue **items = NULL;
    size_t n = 0;
    const JDict *d = NULL;
    switch (v->kind) {
    case JV_STRING:
        return 1 + v->u.s.n / 32;
    case JV_LIST:
    case JV_ITER:
        items = v->u.list.items;
        n = v->u.list.n;
        break;
    case JV_DICT:
    case JV_NAMESPACE:
        d = v->u.dict;
        n = d->n;
        break;
    default:
        return 1;
    }
    /* Iterators are used up and namespaces assigned to: only lists and dicts keep a sum. */
    bool fixed = v->kind == JV_LIST || v->kind == JV_DICT;
    if (fixed && v->work) return v->work;
    if (depth >= JINJA_MAX_NESTING) return WORK_UNBOUNDED;
    uint64_t work = 1 + n;
    for (size_t i = 0; i < n && work < WORK_UNBOUNDED; i++)
        work += value_work(d ? d->items[i].val : items[i], depth + 1);
    if (work > WORK_UNBOUNDED) work = WORK_UNBOUNDED;
    /* An unbounded sum found below the top may only be the cut above: don't remember it. */
    if (fixed && (work < WORK_UNBOUNDED || depth == 0)) v->work = work;
    return work;
}

uint64_t jinja_value_work(JValue *v) {
    return value_work(v, 0);
}

int jinja_fail_memory(int line) {
    static const char what[] = "template rendering stopped: it needed more than %zu MiB, the "
                               "limit for one render: the template loops or grows its output "
                               "without end";
    if (line > 0)
        jinja_fail(line, what, (size_t)(JINJA_MEMORY_LIMIT >> 20));
    else
        err_set(what, (size_t)(JINJA_MEMORY_LIMIT >> 20));
    return -1;
}

int jinja_charge(JCtx *c, uint64_t units, int line) {
    if (c->arena->over_limit) return jinja_fail_memory(line);
    if (units > c->work_left) {
        c->work_left = 0;
        jinja_fail(line,
                   "template rendering stopped after %" PRIu64
                   " steps, the limit for one render: the template loops or recurses without "
                   "end, or the conversation is far longer than any context",
                   JINJA_WORK_LIMIT);
        return -1;
    }
    c->work_left -= units;
    return 0;
}

/* Charges the work of the values an operator or builtin is about to go through. */
static int charge_values(JCtx *c, JValue *const *values, size_t n, int line) {
    uint64_t units = 0;
    for (size_t i = 0; i < n && units < WORK_UNBOUNDED; i++)
        units += jinja_value_work(values[i]); /* at most 2 x WORK_UNBOUNDED: no wrap */
    return jinja_charge(c, units, line);
}

/* Charges the value a filter or test is applied to: a string is always read through, a list
 * or dict only by builtins that walk its items (a template may ask `messages|length` once per
 * message; that must not cost the square of the conversation). */
static int charge_subject(JCtx *c, JValue *v, bool walks_items, int line) {
    if (v->kind == JV_STRING || walks_items) return charge_values(c, &v, 1, line);
    return jinja_charge(c, 1, line);
}

static JFrame *new_frame(JCtx *c, JFrame *parent) {
    JFrame *f = ja_alloc(c->arena, sizeof *f);
    f->parent = parent;
    return f;
}

static JValue *lookup(JCtx *c, JFrame *f, JStr name) {
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

/* ---------------------------------------------------------------- arithmetic */

static int64_t as_int(const JValue *v) {
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

static JValue *type_error(int line, const char *op, const JValue *a, const JValue *b) {
    return jinja_fail(line, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                      jv_type_name(a), jv_type_name(b));
}

static JValue *concat_seq(JCtx *c, const JValue *a, const JValue *b) {
    JValue *r = jv_list(c->arena, a->u.list.n + b->u.list.n, a->is_tuple);
    for (size_t i = 0; i < a->u.list.n; i++)
        r->u.list.items[i] = a->u.list.items[i];
    for (size_t i = 0; i < b->u.list.n; i++)
        r->u.list.items[a->u.list.n + i] = b->u.list.items[i];
    return r;
}

static JValue *repeat(JCtx *c, const JValue *seq, int64_t times, int line) {
    if (times < 0) times = 0;
    size_t unit = seq->kind == JV_STRING ? seq->u.s.n : seq->u.list.n * sizeof(JValue *);
    if (unit && (uint64_t)times > JINJA_MEMORY_LIMIT / 4 / unit)
        return jinja_fail(line, "repetition result too large");
    if (seq->kind == JV_STRING) {
        JBuf b;
        jb_init(&b, c->arena);
        for (int64_t i = 0; i < times; i++)
            jb_put(&b, seq->u.s.s, seq->u.s.n);
        return jv_str_ref(c->arena, jb_str(&b));
    }
    size_t n = seq->u.list.n;
    JValue *r = jv_list(c->arena, n * (size_t)times, seq->is_tuple);
    for (size_t i = 0; i < r->u.list.n; i++)
        r->u.list.items[i] = seq->u.list.items[i % n];
    return r;
}

JValue *jinja_binop(JCtx *c, int op, JValue *a, JValue *b, int line) {
    /* str % anything is formatting, even with an undefined right side (printed as ""). */
    if (op == OP_MOD && a->kind == JV_STRING) return jinja_printf(c, a->u.s, b, line);
    if (a->kind == JV_UNDEFINED) return jinja_fail_undefined(line, a);
    if (b->kind == JV_UNDEFINED) return jinja_fail_undefined(line, b);
    const char *sym = jop_text[op];
    bool nums = jv_is_number(a) && jv_is_number(b);
    bool ints = nums && a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    switch (op) {
    case OP_ADD:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(as_int(a), as_int(b), &r))
                return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, r);
        }
        if (nums) return jv_float(c->arena, jv_as_double(a) + jv_as_double(b));
        if (a->kind == JV_STRING && b->kind == JV_STRING) {
            JBuf buf;
            jb_init(&buf, c->arena);
            jb_put(&buf, a->u.s.s, a->u.s.n);
            jb_put(&buf, b->u.s.s, b->u.s.n);
            return jv_str_ref(c->arena, jb_str(&buf));
        }
        if (a->kind == JV_LIST && b->kind == JV_LIST && a->is_tuple == b->is_tuple &&
            a->view == JVIEW_NONE && b->view == JVIEW_NONE)
            return concat_seq(c, a, b);
        if (a->kind == JV_STRING)
            return jinja_fail(line, "can only concatenate str (not \"%s\") to str",
                              jv_type_name(b));
        if (a->kind == JV_LIST)
            return jinja_fail(line, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                              jv_type_name(b), jv_type_name(a));
        return type_error(line, sym, a, b);
    case OP_SUB:
        if (ints) {
            int64_t r;
            if (__builtin_sub_overflow(as_int(a), as_int(b), &r))
                return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, r);
        }
        if (nums) return jv_float(c->arena, jv_as_double(a) - jv_as_double(b));
        return type_error(line, sym, a, b);
    case OP_MUL:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(as_int(a), as_int(b), &r))
                return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, r);
        }
        if (nums) return jv_float(c->arena, jv_as_double(a) * jv_as_double(b));
        if ((a->kind == JV_STRING || (a->kind == JV_LIST && a->view == JVIEW_NONE)) &&
            (b->kind == JV_INT || b->kind == JV_BOOL))
            return repeat(c, a, as_int(b), line);
        if ((b->kind == JV_STRING || (b->kind == JV_LIST && b->view == JVIEW_NONE)) &&
            (a->kind == JV_INT || a->kind == JV_BOOL))
            return repeat(c, b, as_int(a), line);
        if (a->kind == JV_STRING || b->kind == JV_STRING)
            return jinja_fail(line, "can't multiply sequence by non-int of type '%s'",
                              jv_type_name(a->kind == JV_STRING ? b : a));
        return type_error(line, sym, a, b);
    case OP_DIV:
        if (!nums) return type_error(line, sym, a, b);
        if (jv_as_double(b) == 0.0) return jinja_fail(line, "division by zero");
        return jv_float(c->arena, jv_as_double(a) / jv_as_double(b));
    case OP_FLOORDIV:
    case OP_MOD:
        if (!nums) return type_error(line, sym, a, b);
        if (ints) {
            int64_t x = as_int(a), y = as_int(b);
            if (y == 0) return jinja_fail(line, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return jinja_fail(line, "integer overflow");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                q -= 1;
                r += y;
            }
            return jv_int(c->arena, op == OP_MOD ? r : q);
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            if (y == 0.0)
                return jinja_fail(line,
                                  op == OP_MOD ? "float modulo" : "float floor division by zero");
            /* CPython's float_divmod. */
            double mod = fmod(x, y), div = (x - mod) / y;
            if (mod != 0.0) {
                if ((y < 0) != (mod < 0)) {
                    mod += y;
                    div -= 1.0;
                }
            } else {
                mod = copysign(0.0, y);
            }
            double fdiv;
            if (div != 0.0) {
                fdiv = floor(div);
                if (div - fdiv > 0.5) fdiv += 1.0;
            } else {
                fdiv = copysign(0.0, x / y);
            }
            return jv_float(c->arena, op == OP_MOD ? mod : fdiv);
        }
    case OP_POW:
        if (!nums) return type_error(line, "** or pow()", a, b);
        if (ints && as_int(b) >= 0) {
            int64_t base = as_int(a), e = as_int(b), r = 1;
            while (e > 0) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r))
                    return jinja_fail(line, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base))
                    return jinja_fail(line, "integer overflow");
            }
            return jv_int(c->arena, r);
        }
        if (jv_as_double(a) == 0.0 && jv_as_double(b) < 0)
            return jinja_fail(line, "0.0 cannot be raised to a negative power");
        return jv_float(c->arena, pow(jv_as_double(a), jv_as_double(b)));
    }
    return jinja_fail(line, "unknown operator");
}

/* ---------------------------------------------------------------- comparisons */

int jinja_contains(JCtx *c, JValue *container, JValue *item, int line, bool *res) {
    *res = false;
    switch (container->kind) {
    case JV_STRING:
        if (item->kind != JV_STRING) {
            jinja_fail(line, "'in <string>' requires string as left operand, not %s",
                       jv_type_name(item));
            return -1;
        }
        if (item->u.s.n == 0) {
            *res = true;
        } else if (item->u.s.n <= container->u.s.n) {
            *res = memmem(container->u.s.s, container->u.s.n, item->u.s.s, item->u.s.n) != NULL;
        }
        return 0;
    case JV_LIST:
        for (size_t i = 0; i < container->u.list.n; i++)
            if (jv_equal(container->u.list.items[i], item)) {
                *res = true;
                break;
            }
        return 0;
    case JV_DICT:
        if (item->kind == JV_STRING)
            *res = jv_dict_get(container->u.dict, item->u.s.s, item->u.s.n) != NULL;
        if (item->kind == JV_LIST && !item->is_tuple) {
            jinja_fail(line, "unhashable type: 'list'");
            return -1;
        }
        if (item->kind == JV_DICT) {
            jinja_fail(line, "unhashable type: 'dict'");
            return -1;
        }
        return 0;
    case JV_ITER:
        if (container->iter_error) {
            jinja_fail(line, "%s", container->iter_error);
            return -1;
        }
        /* Consumes up to and including the match, as Python does. */
        while (container->u.list.n > 0) {
            JValue *x = container->u.list.items[0];
            container->u.list.items++;
            container->u.list.n--;
            if (jv_equal(x, item)) {
                *res = true;
                break;
            }
        }
        return 0;
    case JV_UNDEFINED:
        return 0;
    default:
        jinja_fail(line, "argument of type '%s' is not iterable", jv_type_name(container));
        return -1;
    }
}

static int compare(JCtx *c, int op, JValue *a, JValue *b, int line, bool *res) {
    switch (op) {
    case CMP_EQ:
        *res = jv_equal(a, b);
        return 0;
    case CMP_NE:
        *res = !jv_equal(a, b);
        return 0;
    case CMP_IN:
        return jinja_contains(c, b, a, line, res);
    case CMP_NOTIN:
        if (jinja_contains(c, b, a, line, res) != 0) return -1;
        *res = !*res;
        return 0;
    default: {
        if (a->kind == JV_UNDEFINED || b->kind == JV_UNDEFINED) {
            jinja_fail_undefined(line, a->kind == JV_UNDEFINED ? a : b);
            return -1;
        }
        static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">="};
        bool r = false;
        int rc = (op == CMP_LT || op == CMP_GE) ? jv_less(a, b, &r) : jv_less(b, a, &r);
        if (rc != 0) {
            jinja_fail(line, "'%s' not supported between instances of '%s' and '%s'", sym[op],
                       jv_type_name(a), jv_type_name(b));
            return -1;
        }
        if (op == CMP_LE || op == CMP_GE) {
            bool nan =
                (a->kind == JV_FLOAT && isnan(a->u.f)) || (b->kind == JV_FLOAT && isnan(b->u.f));
            r = !r && !nan;
        }
        *res = r;
        return 0;
    }
    }
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
    *out = as_int(v);
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

static int eval_args(JCtx *c, JFrame *f, const JNode *n, JArgs *args) {
    args->nargs = n->items.n;
    args->args = args->nargs ? ja_alloc(c->arena, args->nargs * sizeof(JValue *)) : NULL;
    for (size_t i = 0; i < n->items.n; i++)
        if (!(args->args[i] = jinja_eval(c, f, n->items.v[i]))) return -1;
    args->nkw = n->kwvals.n;
    args->kwnames = n->kwnames;
    args->kwvals = args->nkw ? ja_alloc(c->arena, args->nkw * sizeof(JValue *)) : NULL;
    for (size_t i = 0; i < n->kwvals.n; i++)
        if (!(args->kwvals[i] = jinja_eval(c, f, n->kwvals.v[i]))) return -1;
    if (charge_values(c, args->args, args->nargs, n->line) != 0) return -1;
    return charge_values(c, args->kwvals, args->nkw, n->line);
}

/* Applies a filter chain whose innermost input is NULL (a filter block) to v. */
static JValue *apply_filter_chain(JCtx *c, JFrame *f, const JNode *n, JValue *v) {
    if (!n) return v;
    if (n->a) {
        v = apply_filter_chain(c, f, n->a, v);
        if (!v) return NULL;
    }
    JArgs args;
    if (eval_args(c, f, n, &args) != 0 ||
        charge_subject(c, v, jinja_filter_walks_items(n->op), n->line) != 0)
        return NULL;
    return jinja_apply_filter(c, f, n->op, v, &args, n->line);
}

JValue *jinja_eval(JCtx *c, JFrame *f, const JNode *n) {
    if (jinja_charge(c, 1, n->line) != 0) return NULL;
    switch (n->kind) {
    case N_CONST:
        return n->value;
    case N_NAME:
        return lookup(c, f, n->name);
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
        if (obj->kind == JV_STRING && charge_values(c, &obj, 1, n->line) != 0) return NULL;
        if (n->b->kind == N_SLICE) return eval_slice(c, f, obj, n->b);
        JValue *key = jinja_eval(c, f, n->b);
        if (!key) return NULL;
        if (obj->kind == JV_UNDEFINED) return jinja_fail_undefined(n->line, obj);
        return jinja_getitem(c, obj, key, n->line);
    }
    case N_CALL: {
        JValue *fn = jinja_eval(c, f, n->a);
        if (!fn) return NULL;
        JArgs args;
        if (eval_args(c, f, n, &args) != 0) return NULL;
        if (fn->kind == JV_FUNC && fn->u.fn->kind == JF_METHOD &&
            charge_values(c, &fn->u.fn->self, 1, n->line) != 0)
            return NULL;
        return jinja_call(c, f, fn, &args, n->line);
    }
    case N_FILTER: {
        JValue *v = jinja_eval(c, f, n->a);
        if (!v) return NULL;
        JArgs args;
        if (eval_args(c, f, n, &args) != 0 ||
            charge_subject(c, v, jinja_filter_walks_items(n->op), n->line) != 0)
            return NULL;
        return jinja_apply_filter(c, f, n->op, v, &args, n->line);
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
        if (as_int(v) == INT64_MIN) return jinja_fail(n->line, "integer overflow");
        return jv_int(c->arena, -as_int(v));
    }
    case N_BINOP: {
        JValue *a = jinja_eval(c, f, n->a);
        if (!a) return NULL;
        JValue *b = jinja_eval(c, f, n->b);
        if (!b) return NULL;
        JValue *operands[2] = {a, b};
        if (charge_values(c, operands, 2, n->line) != 0) return NULL;
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
            if (!v || charge_values(c, &v, 1, n->line) != 0) return NULL;
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
            if (!right || charge_values(c, operands, 2, n->line) != 0) return NULL;
            bool res;
            if (compare(c, n->cmp_ops[i], left, right, n->line, &res) != 0) return NULL;
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

/* ---------------------------------------------------------------- assignment */

static int assign(JCtx *c, JFrame *f, const JNode *target, JValue *v, int line) {
    if (target->kind == N_NAME) {
        jv_dict_set(c->arena, &f->vars, target->name, v);
        return 0;
    }
    if (target->kind == N_NSREF) {
        JValue *ns = lookup(c, f, target->name);
        if (ns->kind != JV_NAMESPACE) {
            jinja_fail(line, "cannot assign attribute on non-namespace object");
            return -1;
        }
        if (target->attr.n && target->attr.s[0] == '_') {
            jinja_fail(line,
                       "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                       "but got '%s'. Please rename the attribute.",
                       target->attr.s);
            return -1;
        }
        jv_dict_set(c->arena, ns->u.dict, target->attr, v);
        return 0;
    }
    /* Tuple unpacking, as Python does it for any iterable. */
    JValue **items;
    size_t n;
    if (v->kind == JV_UNDEFINED) {
        jinja_fail_undefined(line, v);
        return -1;
    }
    if (jinja_iterate(c, v, &items, &n, line) != 0) return -1;
    size_t want = target->items.n;
    if (n < want) {
        jinja_fail(line, "not enough values to unpack (expected %zu, got %zu)", want, n);
        return -1;
    }
    if (n > want) {
        jinja_fail(line, "too many values to unpack (expected %zu)", want);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (assign(c, f, target->items.v[i], items[i], line) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- statements */

static int exec_capture(JCtx *c, JFrame *f, const JNodeList *body, JStr *out) {
    JBuf buf, *saved = c->out;
    bool saved_capturing = c->capturing;
    jb_init(&buf, c->arena);
    c->out = &buf;
    c->capturing = true;
    int rc = jinja_exec(c, f, body);
    c->out = saved;
    c->capturing = saved_capturing;
    if (rc == EXEC_ERROR) return -1;
    *out = jb_str(&buf);
    return 0;
}

static int exec_for(JCtx *c, JFrame *f, const JNode *n) {
    JValue *seq = jinja_eval(c, f, n->b);
    if (!seq || charge_values(c, &seq, 1, n->line) != 0) return EXEC_ERROR;
    JValue **items;
    size_t count;
    if (jinja_iterate(c, seq, &items, &count, n->line) != 0) return EXEC_ERROR;
    if (n->c) {
        /* The loop filter runs before the body, on every item (see design notes). */
        JValue **kept = ja_alloc(c->arena, (count ? count : 1) * sizeof *kept);
        size_t nkept = 0;
        for (size_t i = 0; i < count; i++) {
            JFrame *tf = new_frame(c, f);
            if (assign(c, tf, n->a, items[i], n->line) != 0) return EXEC_ERROR;
            JValue *t = jinja_eval(c, tf, n->c);
            if (!t) return EXEC_ERROR;
            if (jv_truthy(t)) kept[nkept++] = items[i];
        }
        items = kept;
        count = nkept;
    }
    if (count == 0) return jinja_exec(c, f, &n->orelse);
    JLoop *loop = ja_alloc(c->arena, sizeof *loop);
    loop->length = (int64_t)count;
    loop->items = items;
    loop->depth = 1; /* jinja2 counts depth only for recursive loops */
    JValue *loop_value = ja_alloc(c->arena, sizeof *loop_value);
    loop_value->kind = JV_LOOP;
    loop_value->u.loop = loop;
    static const JStr loop_name = {"loop", 4};
    int rc = EXEC_OK;
    for (size_t i = 0; i < count; i++) {
        if (jinja_charge(c, 1, n->line) != 0) return EXEC_ERROR;
        loop->index0 = (int64_t)i;
        JFrame *it = new_frame(c, f);
        if (assign(c, it, n->a, items[i], n->line) != 0) {
            rc = EXEC_ERROR;
            break;
        }
        jv_dict_set(c->arena, &it->vars, loop_name, loop_value);
        rc = jinja_exec(c, it, &n->body);
        if (rc == EXEC_ERROR) break;
        if (rc == EXEC_BREAK) {
            rc = EXEC_OK;
            break;
        }
        rc = EXEC_OK;
    }
    return rc;
}

static int exec_node(JCtx *c, JFrame *f, const JNode *n) {
    if (jinja_charge(c, 1, n->line) != 0) return EXEC_ERROR;
    switch (n->kind) {
    case N_DATA:
        jb_put(c->out, n->name.s, n->name.n);
        return EXEC_OK;
    case N_OUTPUT: {
        /* {{ a }}, or {% print a, b %} with the expressions in items. */
        size_t count = n->a ? 1 : n->items.n;
        for (size_t i = 0; i < count; i++) {
            JValue *v = jinja_eval(c, f, n->a ? n->a : n->items.v[i]);
            if (!v || charge_values(c, &v, 1, n->line) != 0) return EXEC_ERROR;
            if (jv_to_str(c->out, v) != 0) {
                jinja_fail(n->line, "%s", err_msg());
                return EXEC_ERROR;
            }
        }
        return EXEC_OK;
    }
    case N_IF: {
        JValue *t = jinja_eval(c, f, n->a);
        if (!t) return EXEC_ERROR;
        return jinja_exec(c, f, jv_truthy(t) ? &n->body : &n->orelse);
    }
    case N_FOR:
        return exec_for(c, f, n);
    case N_SET: {
        JValue *v = jinja_eval(c, f, n->b);
        if (!v) return EXEC_ERROR;
        return assign(c, f, n->a, v, n->line) != 0 ? EXEC_ERROR : EXEC_OK;
    }
    case N_SETBLOCK: {
        JStr s;
        if (exec_capture(c, f, &n->body, &s) != 0) return EXEC_ERROR;
        JValue *v = apply_filter_chain(c, f, n->c, jv_str_ref(c->arena, s));
        if (!v) return EXEC_ERROR;
        return assign(c, f, n->a, v, n->line) != 0 ? EXEC_ERROR : EXEC_OK;
    }
    case N_MACRO: {
        JValue *v = ja_alloc(c->arena, sizeof *v);
        v->kind = JV_FUNC;
        v->u.fn = ja_alloc(c->arena, sizeof(JFunc));
        v->u.fn->kind = JF_MACRO;
        v->u.fn->name = n->name.s;
        v->u.fn->macro = n;
        jv_dict_set(c->arena, &f->vars, n->name, v);
        return EXEC_OK;
    }
    case N_BREAK:
        return EXEC_BREAK;
    case N_CONTINUE:
        return EXEC_CONTINUE;
    case N_GENERATION: {
        size_t start = c->out->len;
        int rc = jinja_exec(c, f, &n->body);
        if (rc == EXEC_ERROR) return rc;
        if (!c->capturing) {
            if (c->nspans == c->capspans) {
                size_t cap = c->capspans ? c->capspans * 2 : 8;
                JSpan *spans = ja_alloc(c->arena, cap * sizeof *spans);
                if (c->nspans) memcpy(spans, c->spans, c->nspans * sizeof *spans);
                c->spans = spans;
                c->capspans = cap;
            }
            c->spans[c->nspans++] = (JSpan){start, c->out->len};
        }
        return rc;
    }
    default:
        jinja_fail(n->line, "internal error: unexpected node in statement list");
        return EXEC_ERROR;
    }
}

int jinja_exec(JCtx *c, JFrame *f, const JNodeList *body) {
    for (size_t i = 0; i < body->n; i++) {
        int rc = exec_node(c, f, body->v[i]);
        if (rc != EXEC_OK) return rc;
    }
    return EXEC_OK;
}

/* ---------------------------------------------------------------- macros */

JValue *jinja_call_macro(JCtx *c, const JFunc *fn, const JArgs *args, int line) {
    const JNode *m = fn->macro;
    if (c->depth >= MAX_MACRO_DEPTH)
        return jinja_fail(line, "macro '%s': calls nested deeper than %d", fn->name,
                          MAX_MACRO_DEPTH);
    JFrame *f = new_frame(c, c->root);
    size_t nparams = m->items.n, ndefaults = m->kwvals.n;
    bool *given = ja_alloc(c->arena, (nparams ? nparams : 1) * sizeof *given);
    for (size_t i = 0; i < args->nargs && i < nparams; i++) {
        jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, args->args[i]);
        given[i] = true;
    }
    size_t nextra = args->nargs > nparams ? args->nargs - nparams : 0;
    JValue *varargs = jv_list(c->arena, nextra, true);
    for (size_t i = 0; i < nextra; i++)
        varargs->u.list.items[i] = args->args[nparams + i];
    JValue *kwargs = jv_dict(c->arena);
    for (size_t k = 0; k < args->nkw; k++) {
        size_t i;
        for (i = 0; i < nparams; i++)
            if (m->items.v[i]->name.n == args->kwnames[k].n &&
                memcmp(m->items.v[i]->name.s, args->kwnames[k].s, args->kwnames[k].n) == 0)
                break;
        if (i < nparams) {
            if (given[i])
                return jinja_fail(line, "macro '%s' got multiple values for argument '%s'",
                                  fn->name, args->kwnames[k].s);
            jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, args->kwvals[k]);
            given[i] = true;
        } else {
            jv_dict_set(c->arena, kwargs->u.dict, args->kwnames[k], args->kwvals[k]);
        }
    }
    for (size_t i = 0; i < nparams; i++) {
        if (given[i]) continue;
        JValue *v;
        if (i >= nparams - ndefaults) {
            v = jinja_eval(c, f, m->kwvals.v[i - (nparams - ndefaults)]);
            if (!v) return NULL;
        } else {
            v = jv_undefined(c->arena, "parameter '%s' was not provided", m->items.v[i]->name.s);
        }
        jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, v);
    }
    static const JStr varargs_name = {"varargs", 7}, kwargs_name = {"kwargs", 6};
    jv_dict_set(c->arena, &f->vars, varargs_name, varargs);
    jv_dict_set(c->arena, &f->vars, kwargs_name, kwargs);
    c->depth++;
    JStr out;
    int rc = exec_capture(c, f, &m->body, &out);
    c->depth--;
    if (rc != 0) return NULL;
    return jv_str_ref(c->arena, out);
}
