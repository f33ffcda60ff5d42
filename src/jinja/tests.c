/* The test table (`x is defined`, `x is divisibleby 3`, ...): every test jinja2 3.1's tests.py
 * defines, by name, resolved at parse time like filters so that an unknown test is a
 * compile-time error. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <math.h>
#include <string.h>

/* Sets *res for subject v and the test's argument (NULL when the test takes none). Returns 0,
 * or -1 with "line N: ..." set. */
typedef int JTestFn(JCtx *c, JValue *v, JValue *arg, int line, bool *res);

/* Python's v % d for the numeric tests (d NULL: 2): *r gets the remainder with the divisor's
 * sign. */
static int py_modulo(JCtx *c, JValue *v, JValue *d, int line, double *r) {
    if (v->kind == JV_UNDEFINED) {
        jinja_fail_undefined(line, v);
        return -1;
    }
    if (!d) d = jv_int(c->arena, 2);
    if (!jv_is_number(v) || !jv_is_number(d)) {
        jinja_fail(line, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(v),
                   jv_type_name(d));
        return -1;
    }
    if (v->kind != JV_FLOAT && d->kind != JV_FLOAT) {
        int64_t x = jv_as_int(v), y = jv_as_int(d);
        if (y == 0) {
            jinja_fail(line, "integer division or modulo by zero");
            return -1;
        }
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        *r = (double)m;
    } else {
        double x = jv_as_double(v), y = jv_as_double(d);
        if (y == 0.0) {
            jinja_fail(line, "float modulo");
            return -1;
        }
        *r = fmod(x, y);
        if (*r != 0.0 && ((*r < 0) != (y < 0))) *r += y;
    }
    return 0;
}

/* odd, even, divisibleby: whether v % d (d NULL: 2) is `want`. */
static int remainder_is(JCtx *c, JValue *v, JValue *d, double want, int line, bool *res) {
    double r;
    if (py_modulo(c, v, d, line, &r) != 0) return -1;
    *res = r == want;
    return 0;
}

static int test_odd(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    return remainder_is(c, v, NULL, 1.0, line, res);
}

static int test_even(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    return remainder_is(c, v, NULL, 0.0, line, res);
}

static int test_divisibleby(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    return remainder_is(c, v, arg, 0.0, line, res);
}

/* The tests that only look at the subject's kind and value: none fails. */
#define KIND_TEST(name, expr)                                                                      \
    static int test_##name(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {                 \
        *res = (expr);                                                                             \
        return 0;                                                                                  \
    }

KIND_TEST(defined, v->kind != JV_UNDEFINED)
KIND_TEST(undefined, v->kind == JV_UNDEFINED)
KIND_TEST(filter, v->kind == JV_STRING && jinja_filter_id(v->u.s.s) >= 0)
KIND_TEST(test, v->kind == JV_STRING && jinja_test_id(v->u.s.s) >= 0)
KIND_TEST(none, v->kind == JV_NONE)
KIND_TEST(boolean, v->kind == JV_BOOL)
KIND_TEST(false, v->kind == JV_BOOL && !v->u.b)
KIND_TEST(true, v->kind == JV_BOOL && v->u.b)
KIND_TEST(integer, v->kind == JV_INT || v->kind == JV_BIGINT)
KIND_TEST(float, v->kind == JV_FLOAT)
KIND_TEST(string, v->kind == JV_STRING)
KIND_TEST(mapping, v->kind == JV_DICT)
KIND_TEST(number, jv_is_number(v) || v->kind == JV_BIGINT)
KIND_TEST(sequence, v->kind == JV_STRING ||
                        (v->kind == JV_LIST && (v->view == JVIEW_NONE || v->view == JVIEW_RANGE)) ||
                        v->kind == JV_DICT || v->kind == JV_UNDEFINED)
KIND_TEST(iterable, v->kind == JV_STRING || v->kind == JV_LIST || v->kind == JV_DICT ||
                        v->kind == JV_UNDEFINED || v->kind == JV_LOOP || v->kind == JV_ITER)
KIND_TEST(callable, v->kind == JV_FUNC || v->kind == JV_UNDEFINED || v->kind == JV_LOOP)
KIND_TEST(escaped, false)
KIND_TEST(eq, jv_equal(v, arg))
KIND_TEST(ne, !jv_equal(v, arg))

static int test_lower(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    *res = pystr_is_case(jv_str_of(c->arena, v)->u.s, false);
    return 0;
}

static int test_upper(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    *res = pystr_is_case(jv_str_of(c->arena, v)->u.s, true);
    return 0;
}

/* `is sameas`: Python's `is`. None, booleans and the undefined value are singletons there. */
static int test_sameas(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    if (v->kind == JV_NONE || v->kind == JV_BOOL || v->kind == JV_UNDEFINED)
        *res = v->kind == arg->kind && (v->kind != JV_BOOL || v->u.b == arg->u.b) &&
               (v->kind != JV_UNDEFINED || v == arg);
    else
        *res = v == arg;
    return 0;
}

static int test_in(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {
    return jinja_contains(c, arg, v, line, res);
}

/* The orderings: v > arg when greater, v < arg otherwise; or_equal adds equality. */
static int order(JValue *v, JValue *arg, bool greater, bool or_equal, int line, bool *res) {
    bool lt;
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

#define ORDER_TEST(name, greater, or_equal)                                                        \
    static int test_##name(JCtx *c, JValue *v, JValue *arg, int line, bool *res) {                 \
        return order(v, arg, greater, or_equal, line, res);                                        \
    }

ORDER_TEST(gt, true, false)
ORDER_TEST(ge, true, true)
ORDER_TEST(lt, false, false)
ORDER_TEST(le, false, true)

typedef struct {
    const char *name;
    JTestFn *fn;
    bool needs_arg;
    /* Whether it goes through the items of its subject (the comparisons compare item by item):
     * the subject is charged accordingly (jinja_charge). */
    bool walks_items;
} JTest;

/* Aliases (==, eq, equalto, ...) are rows of their own: errors name the test as written. */
static const JTest tests[] = {
    {"odd", test_odd, false, false},
    {"even", test_even, false, false},
    {"divisibleby", test_divisibleby, true, false},
    {"defined", test_defined, false, false},
    {"undefined", test_undefined, false, false},
    {"filter", test_filter, false, false},
    {"test", test_test, false, false},
    {"none", test_none, false, false},
    {"boolean", test_boolean, false, false},
    {"false", test_false, false, false},
    {"true", test_true, false, false},
    {"integer", test_integer, false, false},
    {"float", test_float, false, false},
    {"lower", test_lower, false, false},
    {"upper", test_upper, false, false},
    {"string", test_string, false, false},
    {"mapping", test_mapping, false, false},
    {"number", test_number, false, false},
    {"sequence", test_sequence, false, false},
    {"iterable", test_iterable, false, false},
    {"callable", test_callable, false, false},
    {"sameas", test_sameas, true, false},
    {"escaped", test_escaped, false, false},
    {"in", test_in, true, true},
    {"==", test_eq, true, true},
    {"eq", test_eq, true, true},
    {"equalto", test_eq, true, true},
    {"!=", test_ne, true, true},
    {"ne", test_ne, true, true},
    {">", test_gt, true, true},
    {"gt", test_gt, true, true},
    {"greaterthan", test_gt, true, true},
    {"ge", test_ge, true, true},
    {">=", test_ge, true, true},
    {"<", test_lt, true, true},
    {"lt", test_lt, true, true},
    {"lessthan", test_lt, true, true},
    {"<=", test_le, true, true},
    {"le", test_le, true, true},
};

#define NTESTS ((int)(sizeof tests / sizeof *tests))

int jinja_test_id(const char *name) {
    for (int i = 0; i < NTESTS; i++)
        if (strcmp(tests[i].name, name) == 0) return i;
    return -1;
}

bool jinja_test_walks_items(int id) {
    return tests[id].walks_items;
}

int jinja_apply_test(JCtx *c, int id, JValue *v, const JArgs *a, int line, bool *res) {
    if (id < 0 || id >= NTESTS) {
        jinja_fail(line, "internal error: unknown test id %d", id);
        return -1;
    }
    JValue *arg = a->nargs ? a->args[0] : a->nkw ? a->kwvals[0] : NULL;
    if (tests[id].needs_arg && !arg) {
        jinja_fail(line, "test '%s' needs an argument", tests[id].name);
        return -1;
    }
    return tests[id].fn(c, v, arg, line, res);
}

int jinja_test_by_name(JCtx *c, JValue *name, JValue *v, JValue **args, size_t nargs, int line,
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
