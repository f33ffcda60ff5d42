/* Python's operators on values: arithmetic (+ - * / // % **, with Python's int overflow
 * refused rather than wrapped), `in`, and the comparisons of an N_COMPARE chain. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- arithmetic */

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
    if (op == OP_MOD && a->kind == JV_STRING) return pystr_printf(c, a->u.s, b, line);
    if (a->kind == JV_UNDEFINED) return jinja_fail_undefined(line, a);
    if (b->kind == JV_UNDEFINED) return jinja_fail_undefined(line, b);
    const char *sym = jop_text[op];
    if ((a->kind == JV_BIGINT && (jv_is_number(b) || b->kind == JV_BIGINT)) ||
        (b->kind == JV_BIGINT && jv_is_number(a)))
        return jinja_fail(line,
                          "arithmetic on integers beyond 64 bits (%s %s %s) is not "
                          "supported",
                          a->kind == JV_BIGINT ? a->u.s.s : jv_type_name(a), sym,
                          b->kind == JV_BIGINT ? b->u.s.s : jv_type_name(b));
    bool nums = jv_is_number(a) && jv_is_number(b);
    bool ints = nums && a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    switch (op) {
    case OP_ADD:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(jv_as_int(a), jv_as_int(b), &r))
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
            if (__builtin_sub_overflow(jv_as_int(a), jv_as_int(b), &r))
                return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, r);
        }
        if (nums) return jv_float(c->arena, jv_as_double(a) - jv_as_double(b));
        return type_error(line, sym, a, b);
    case OP_MUL:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(jv_as_int(a), jv_as_int(b), &r))
                return jinja_fail(line, "integer overflow");
            return jv_int(c->arena, r);
        }
        if (nums) return jv_float(c->arena, jv_as_double(a) * jv_as_double(b));
        if ((a->kind == JV_STRING || (a->kind == JV_LIST && a->view == JVIEW_NONE)) &&
            (b->kind == JV_INT || b->kind == JV_BOOL))
            return repeat(c, a, jv_as_int(b), line);
        if ((b->kind == JV_STRING || (b->kind == JV_LIST && b->view == JVIEW_NONE)) &&
            (a->kind == JV_INT || a->kind == JV_BOOL))
            return repeat(c, b, jv_as_int(a), line);
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
            int64_t x = jv_as_int(a), y = jv_as_int(b);
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
        if (ints && jv_as_int(b) >= 0) {
            int64_t base = jv_as_int(a), e = jv_as_int(b), r = 1;
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

int jinja_compare(JCtx *c, int op, JValue *a, JValue *b, int line, bool *res) {
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

JValue *jinja_len(JCtx *c, JValue *v, int line) {
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
