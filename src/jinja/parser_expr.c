/* Expressions by precedence, following jinja2's parser.py (lowest first):
 *   condexpr (a if c else b) < or < and < not < compare (== != < <= > >= in, not in;
 *   chains like Python) < + - < ~ < * / // % < ** (left-assoc, as in jinja2) <
 *   unary - + < primary with postfix . [] () and then filters | / tests `is` / calls
 *   (parser_primary.c).
 * Filters bind tighter than every binary operator: `'a' + x | trim` trims x only. */
#include "jinja/parser.h"

#include <string.h>

/* ---------------------------------------------------------------- expressions */

static JNode *parse_condexpr(JParser *p);

static JNode *parse_or(JParser *p);

JNode *jp_parse_expression(JParser *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static JNode *parse_condexpr_inner(JParser *p);

static JNode *parse_condexpr(JParser *p) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        jp_fail(jp_cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_condexpr_inner(p);
    p->depth--;
    return n;
}

static JNode *parse_condexpr_inner(JParser *p) {
    JNode *e1 = parse_or(p);
    if (!e1) return NULL;
    while (jp_is_name(jp_cur(p), "if")) {
        int line = jp_cur(p)->line;
        jp_advance(p);
        JNode *test = parse_or(p);
        if (!test) return NULL;
        JNode *e3 = NULL;
        if (jp_is_name(jp_cur(p), "else")) {
            jp_advance(p);
            if (!(e3 = parse_condexpr(p))) return NULL;
        }
        JNode *n = jp_node(p, N_CONDEXPR, line);
        n->a = test;
        n->b = e1;
        n->c = e3;
        e1 = n;
    }
    return e1;
}

static JNode *parse_and(JParser *p);
static JNode *parse_not(JParser *p);
static JNode *parse_compare(JParser *p);

static JNode *parse_or(JParser *p) {
    JNode *left = parse_and(p);
    while (left && jp_is_name(jp_cur(p), "or")) {
        int line = jp_cur(p)->line;
        jp_advance(p);
        JNode *right = parse_and(p);
        if (!right) return NULL;
        JNode *n = jp_node(p, N_OR, line);
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static JNode *parse_and(JParser *p) {
    JNode *left = parse_not(p);
    while (left && jp_is_name(jp_cur(p), "and")) {
        int line = jp_cur(p)->line;
        jp_advance(p);
        JNode *right = parse_not(p);
        if (!right) return NULL;
        JNode *n = jp_node(p, N_AND, line);
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static JNode *parse_not_inner(JParser *p);

static JNode *parse_not(JParser *p) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        jp_fail(jp_cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_not_inner(p);
    p->depth--;
    return n;
}

static JNode *parse_not_inner(JParser *p) {
    if (jp_is_name(jp_cur(p), "not")) {
        int line = jp_cur(p)->line;
        jp_advance(p);
        JNode *x = parse_not(p);
        if (!x) return NULL;
        JNode *n = jp_node(p, N_NOT, line);
        n->a = x;
        return n;
    }
    return parse_compare(p);
}

static JNode *parse_math1(JParser *p);

static JNode *parse_compare(JParser *p) {
    int line = jp_cur(p)->line;
    JNode *expr = parse_math1(p);
    if (!expr) return NULL;
    JNodeVec operands = {0};
    int ops[64];
    size_t nops = 0;
    for (;;) {
        const JToken *t = jp_cur(p);
        int op = -1;
        if (t->kind == JT_OP) {
            switch (t->op) {
            case OP_EQ:
                op = CMP_EQ;
                break;
            case OP_NE:
                op = CMP_NE;
                break;
            case OP_LT:
                op = CMP_LT;
                break;
            case OP_LE:
                op = CMP_LE;
                break;
            case OP_GT:
                op = CMP_GT;
                break;
            case OP_GE:
                op = CMP_GE;
                break;
            default:
                break;
            }
            if (op >= 0) jp_advance(p);
        } else if (jp_is_name(t, "in")) {
            op = CMP_IN;
            jp_advance(p);
        } else if (jp_is_name(t, "not") && jp_is_name(jp_peek(p, 1), "in")) {
            op = CMP_NOTIN;
            jp_advance(p);
            jp_advance(p);
        }
        if (op < 0) break;
        if (nops == sizeof ops / sizeof *ops) {
            jp_fail(t->line, "comparison chain too long");
            return NULL;
        }
        JNode *rhs = parse_math1(p);
        if (!rhs) return NULL;
        ops[nops++] = op;
        jp_vec_push(p, &operands, rhs);
    }
    if (nops == 0) return expr;
    JNode *n = jp_node(p, N_COMPARE, line);
    n->a = expr;
    n->items = jp_vec_list(&operands);
    n->cmp_ops = ja_alloc(p->arena, nops * sizeof(int));
    memcpy(n->cmp_ops, ops, nops * sizeof(int));
    return n;
}

static JNode *binop(JParser *p, int op, JNode *a, JNode *b, int line) {
    JNode *n = jp_node(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static JNode *parse_concat(JParser *p);
static JNode *parse_math2(JParser *p);
static JNode *parse_pow(JParser *p);

static JNode *parse_math1(JParser *p) {
    JNode *left = parse_concat(p);
    while (left && (jp_is_op(jp_cur(p), OP_ADD) || jp_is_op(jp_cur(p), OP_SUB))) {
        const JToken *t = jp_cur(p);
        jp_advance(p);
        JNode *right = parse_concat(p);
        if (!right) return NULL;
        left = binop(p, t->op, left, right, t->line);
    }
    return left;
}

static JNode *parse_concat(JParser *p) {
    int line = jp_cur(p)->line;
    JNode *first = parse_math2(p);
    if (!first || !jp_is_op(jp_cur(p), OP_TILDE)) return first;
    JNodeVec args = {0};
    jp_vec_push(p, &args, first);
    while (jp_is_op(jp_cur(p), OP_TILDE)) {
        jp_advance(p);
        JNode *x = parse_math2(p);
        if (!x) return NULL;
        jp_vec_push(p, &args, x);
    }
    JNode *n = jp_node(p, N_CONCAT, line);
    n->items = jp_vec_list(&args);
    return n;
}

static JNode *parse_math2(JParser *p) {
    JNode *left = parse_pow(p);
    while (left && (jp_is_op(jp_cur(p), OP_MUL) || jp_is_op(jp_cur(p), OP_DIV) ||
                    jp_is_op(jp_cur(p), OP_FLOORDIV) || jp_is_op(jp_cur(p), OP_MOD))) {
        const JToken *t = jp_cur(p);
        jp_advance(p);
        JNode *right = parse_pow(p);
        if (!right) return NULL;
        left = binop(p, t->op, left, right, t->line);
    }
    return left;
}

static JNode *parse_pow(JParser *p) {
    JNode *left = jp_parse_unary(p, true);
    while (left && jp_is_op(jp_cur(p), OP_POW)) {
        const JToken *t = jp_cur(p);
        jp_advance(p);
        JNode *right = jp_parse_unary(p, true);
        if (!right) return NULL;
        left = binop(p, OP_POW, left, right, t->line);
    }
    return left;
}

/* Call arguments "( a, b, k=v )" into items / kwnames / kwvals of n. */

bool jp_is_tuple_end(const JParser *p, const char *extra_end) {
    const JToken *t = jp_cur(p);
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || jp_is_op(t, OP_RPAREN)) return true;
    return extra_end && jp_is_name(t, extra_end);
}

JNode *jp_parse_tuple(JParser *p, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    int line = jp_cur(p)->line;
    JNodeVec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
        if (jp_is_tuple_end(p, extra_end)) break;
        JNode *x = jp_parse_expression(p, with_condexpr);
        if (!x) return NULL;
        jp_vec_push(p, &args, x);
        if (jp_is_op(jp_cur(p), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char buf[128];
            jp_fail(jp_cur(p)->line, "Expected an expression, got '%s'",
                    jp_describe(jp_cur(p), buf, sizeof buf));
            return NULL;
        }
    }
    JNode *n = jp_node(p, N_TUPLE, line);
    n->items = jp_vec_list(&args);
    return n;
}
