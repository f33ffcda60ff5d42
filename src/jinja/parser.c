/* Recursive-descent parser from tokens to the AST, following jinja2's parser.py
 * grammar and precedence (lowest first):
 *   condexpr (a if c else b) < or < and < not < compare (== != < <= > >= in, not in;
 *   chains like Python) < + - < ~ < * / // % < ** (left-assoc, as in jinja2) <
 *   unary - + < primary with postfix . [] () and then filters | / tests `is` / calls.
 * Filters bind tighter than every binary operator: `'a' + x | trim` trims x only.
 * Tags: if/elif/else, for (+ else, + `if` filter), set (incl. ns.attr and block set),
 * macro, break/continue, print, generation. Tags jinja2 has but this renderer does not
 * (include, extends, block, import, call, filter, with, ...) fail with their name. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_EXPR_DEPTH 200

typedef struct {
    JArena *arena;
    const JToken *t;
    size_t n, pos;
    int loop_depth; /* for break/continue outside loops */
    const char *tag_stack[64];
    int ntags;
    int depth; /* expression nesting, bounded so that hostile input cannot exhaust the stack */
} Parser;

static int pfail(int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int pfail(int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set("line %d: %s", line, msg);
}

static const JToken *cur(const Parser *p) {
    return &p->t[p->pos];
}

static const JToken *peek(const Parser *p, size_t k) {
    size_t i = p->pos + k;
    return &p->t[i < p->n ? i : p->n - 1];
}

static void advance(Parser *p) {
    if (p->pos + 1 < p->n) p->pos++;
}

static bool is_op(const JToken *t, JOp op) {
    return t->kind == JT_OP && t->op == op;
}

static bool is_name(const JToken *t, const char *name) {
    return t->kind == JT_NAME && strcmp(t->text.s, name) == 0;
}

static const char *describe(const JToken *t, char *buf, size_t cap) {
    switch (t->kind) {
    case JT_DATA:
        return "template data";
    case JT_VAR_BEGIN:
        return "begin of print statement";
    case JT_VAR_END:
        return "end of print statement";
    case JT_BLOCK_BEGIN:
        return "begin of statement block";
    case JT_BLOCK_END:
        return "end of statement block";
    case JT_NAME:
        snprintf(buf, cap, "%s", t->text.s);
        return buf;
    case JT_STRING:
        return "string";
    case JT_INT:
        return "integer";
    case JT_FLOAT:
        return "float";
    case JT_OP:
        return jop_text[t->op];
    case JT_EOF:
        return "end of template";
    }
    return "token";
}

static int unexpected(Parser *p) {
    char buf[128];
    return pfail(cur(p)->line, "unexpected '%s'", describe(cur(p), buf, sizeof buf));
}

static int expect_op(Parser *p, JOp op) {
    if (!is_op(cur(p), op)) {
        char buf[128];
        return pfail(cur(p)->line, "expected token '%s', got '%s'", jop_text[op],
                     describe(cur(p), buf, sizeof buf));
    }
    advance(p);
    return 0;
}

static int expect_kind(Parser *p, JTokKind kind, const char *what) {
    if (cur(p)->kind != kind) {
        char buf[128];
        return pfail(cur(p)->line, "expected %s, got '%s'", what,
                     describe(cur(p), buf, sizeof buf));
    }
    advance(p);
    return 0;
}

static JNode *node(Parser *p, JNodeKind kind, int line) {
    JNode *n = ja_alloc(p->arena, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

/* A growable node list built in the arena. */
typedef struct {
    JNode **v;
    size_t n, cap;
} Vec;

static void vec_push(Parser *p, Vec *v, JNode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        JNode **items = ja_alloc(p->arena, cap * sizeof *items);
        if (v->n) memcpy(items, v->v, v->n * sizeof *items);
        v->v = items;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static JNodeList vec_list(const Vec *v) {
    return (JNodeList){v->v, v->n};
}

static JNode *parse_expression(Parser *p, bool with_condexpr);
static JNode *parse_tuple(Parser *p, bool with_condexpr, const char *extra_end,
                          bool explicit_parens);
static JNode *parse_unary(Parser *p, bool with_filter);
static JNode *parse_primary(Parser *p);
static JNode *parse_postfix(Parser *p, JNode *n);
static int parse_body(Parser *p, const char *const *end_tags, JNodeList *body);

/* ---------------------------------------------------------------- expressions */

static JNode *parse_condexpr(Parser *p);

static JNode *parse_or(Parser *p);

static JNode *parse_expression(Parser *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static JNode *parse_condexpr_inner(Parser *p);

static JNode *parse_condexpr(Parser *p) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        pfail(cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_condexpr_inner(p);
    p->depth--;
    return n;
}

static JNode *parse_condexpr_inner(Parser *p) {
    JNode *e1 = parse_or(p);
    if (!e1) return NULL;
    while (is_name(cur(p), "if")) {
        int line = cur(p)->line;
        advance(p);
        JNode *test = parse_or(p);
        if (!test) return NULL;
        JNode *e3 = NULL;
        if (is_name(cur(p), "else")) {
            advance(p);
            if (!(e3 = parse_condexpr(p))) return NULL;
        }
        JNode *n = node(p, N_CONDEXPR, line);
        n->a = test;
        n->b = e1;
        n->c = e3;
        e1 = n;
    }
    return e1;
}

static JNode *parse_and(Parser *p);
static JNode *parse_not(Parser *p);
static JNode *parse_compare(Parser *p);

static JNode *parse_or(Parser *p) {
    JNode *left = parse_and(p);
    while (left && is_name(cur(p), "or")) {
        int line = cur(p)->line;
        advance(p);
        JNode *right = parse_and(p);
        if (!right) return NULL;
        JNode *n = node(p, N_OR, line);
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static JNode *parse_and(Parser *p) {
    JNode *left = parse_not(p);
    while (left && is_name(cur(p), "and")) {
        int line = cur(p)->line;
        advance(p);
        JNode *right = parse_not(p);
        if (!right) return NULL;
        JNode *n = node(p, N_AND, line);
        n->a = left;
        n->b = right;
        left = n;
    }
    return left;
}

static JNode *parse_not_inner(Parser *p);

static JNode *parse_not(Parser *p) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        pfail(cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_not_inner(p);
    p->depth--;
    return n;
}

static JNode *parse_not_inner(Parser *p) {
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        advance(p);
        JNode *x = parse_not(p);
        if (!x) return NULL;
        JNode *n = node(p, N_NOT, line);
        n->a = x;
        return n;
    }
    return parse_compare(p);
}

static JNode *parse_math1(Parser *p);

static JNode *parse_compare(Parser *p) {
    int line = cur(p)->line;
    JNode *expr = parse_math1(p);
    if (!expr) return NULL;
    Vec operands = {0};
    int ops[64];
    size_t nops = 0;
    for (;;) {
        const JToken *t = cur(p);
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
            if (op >= 0) advance(p);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            advance(p);
        } else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
            op = CMP_NOTIN;
            advance(p);
            advance(p);
        }
        if (op < 0) break;
        if (nops == sizeof ops / sizeof *ops) {
            pfail(t->line, "comparison chain too long");
            return NULL;
        }
        JNode *rhs = parse_math1(p);
        if (!rhs) return NULL;
        ops[nops++] = op;
        vec_push(p, &operands, rhs);
    }
    if (nops == 0) return expr;
    JNode *n = node(p, N_COMPARE, line);
    n->a = expr;
    n->items = vec_list(&operands);
    n->cmp_ops = ja_alloc(p->arena, nops * sizeof(int));
    memcpy(n->cmp_ops, ops, nops * sizeof(int));
    return n;
}

static JNode *binop(Parser *p, int op, JNode *a, JNode *b, int line) {
    JNode *n = node(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static JNode *parse_concat(Parser *p);
static JNode *parse_math2(Parser *p);
static JNode *parse_pow(Parser *p);

static JNode *parse_math1(Parser *p) {
    JNode *left = parse_concat(p);
    while (left && (is_op(cur(p), OP_ADD) || is_op(cur(p), OP_SUB))) {
        const JToken *t = cur(p);
        advance(p);
        JNode *right = parse_concat(p);
        if (!right) return NULL;
        left = binop(p, t->op, left, right, t->line);
    }
    return left;
}

static JNode *parse_concat(Parser *p) {
    int line = cur(p)->line;
    JNode *first = parse_math2(p);
    if (!first || !is_op(cur(p), OP_TILDE)) return first;
    Vec args = {0};
    vec_push(p, &args, first);
    while (is_op(cur(p), OP_TILDE)) {
        advance(p);
        JNode *x = parse_math2(p);
        if (!x) return NULL;
        vec_push(p, &args, x);
    }
    JNode *n = node(p, N_CONCAT, line);
    n->items = vec_list(&args);
    return n;
}

static JNode *parse_math2(Parser *p) {
    JNode *left = parse_pow(p);
    while (left && (is_op(cur(p), OP_MUL) || is_op(cur(p), OP_DIV) || is_op(cur(p), OP_FLOORDIV) ||
                    is_op(cur(p), OP_MOD))) {
        const JToken *t = cur(p);
        advance(p);
        JNode *right = parse_pow(p);
        if (!right) return NULL;
        left = binop(p, t->op, left, right, t->line);
    }
    return left;
}

static JNode *parse_pow(Parser *p) {
    JNode *left = parse_unary(p, true);
    while (left && is_op(cur(p), OP_POW)) {
        const JToken *t = cur(p);
        advance(p);
        JNode *right = parse_unary(p, true);
        if (!right) return NULL;
        left = binop(p, OP_POW, left, right, t->line);
    }
    return left;
}

/* Call arguments "( a, b, k=v )" into items / kwnames / kwvals of n. */
static int parse_call_args(Parser *p, JNode *n) {
    int line = cur(p)->line;
    if (expect_op(p, OP_LPAREN) != 0) return -1;
    Vec args = {0}, kwvals = {0};
    JStr names[64];
    size_t nkw = 0;
    bool require_comma = false;
    while (!is_op(cur(p), OP_RPAREN)) {
        if (require_comma) {
            if (expect_op(p, OP_COMMA) != 0) return -1;
            if (is_op(cur(p), OP_RPAREN)) break;
        }
        if (is_op(cur(p), OP_MUL) || is_op(cur(p), OP_POW))
            return pfail(cur(p)->line, "*args / **kwargs in calls are not supported");
        if (cur(p)->kind == JT_NAME && is_op(peek(p, 1), OP_ASSIGN)) {
            if (nkw == sizeof names / sizeof *names)
                return pfail(line, "too many keyword arguments");
            names[nkw++] = cur(p)->text;
            advance(p);
            advance(p);
            JNode *v = parse_expression(p, true);
            if (!v) return -1;
            vec_push(p, &kwvals, v);
        } else {
            if (nkw) return pfail(line, "invalid syntax for function call expression");
            JNode *v = parse_expression(p, true);
            if (!v) return -1;
            vec_push(p, &args, v);
        }
        require_comma = true;
    }
    if (expect_op(p, OP_RPAREN) != 0) return -1;
    n->items = vec_list(&args);
    n->kwvals = vec_list(&kwvals);
    if (nkw) {
        n->kwnames = ja_alloc(p->arena, nkw * sizeof(JStr));
        memcpy(n->kwnames, names, nkw * sizeof(JStr));
    }
    return 0;
}

static JNode *parse_call(Parser *p, JNode *fn) {
    JNode *n = node(p, N_CALL, cur(p)->line);
    n->a = fn;
    if (parse_call_args(p, n) != 0) return NULL;
    return n;
}

/* A dotted name after `|` or `is`. */
static int parse_dotted_name(Parser *p, JStr *out) {
    if (cur(p)->kind != JT_NAME) return expect_kind(p, JT_NAME, "a name");
    JBuf b;
    jb_init(&b, p->arena);
    jb_put(&b, cur(p)->text.s, cur(p)->text.n);
    advance(p);
    while (is_op(cur(p), OP_DOT)) {
        advance(p);
        if (cur(p)->kind != JT_NAME) return expect_kind(p, JT_NAME, "a name");
        jb_putc(&b, '.');
        jb_put(&b, cur(p)->text.s, cur(p)->text.n);
        advance(p);
    }
    *out = jb_str(&b);
    return 0;
}

/* `| name(args)` chain applied to n (NULL for a filter block's innermost input). */
static JNode *parse_filter(Parser *p, JNode *n, bool start_inline) {
    while (is_op(cur(p), OP_PIPE) || start_inline) {
        if (!start_inline) advance(p);
        start_inline = false;
        int line = cur(p)->line;
        JNode *f = node(p, N_FILTER, line);
        if (parse_dotted_name(p, &f->name) != 0) return NULL;
        f->op = jinja_filter_id(f->name.s);
        if (f->op == -1) {
            pfail(line, "No filter named '%s'.", f->name.s);
            return NULL;
        }
        if (f->op == -2) {
            pfail(line, "filter '%s' is not supported by this renderer", f->name.s);
            return NULL;
        }
        if (is_op(cur(p), OP_LPAREN) && parse_call_args(p, f) != 0) return NULL;
        f->a = n;
        n = f;
    }
    return n;
}

static JNode *parse_test(Parser *p, JNode *subject) {
    int line = cur(p)->line;
    advance(p); /* is */
    bool negated = false;
    if (is_name(cur(p), "not")) {
        negated = true;
        advance(p);
    }
    JNode *t = node(p, N_TEST, line);
    if (parse_dotted_name(p, &t->name) != 0) return NULL;
    t->op = jinja_test_id(t->name.s);
    if (t->op == -1) {
        pfail(line, "No test named '%s'.", t->name.s);
        return NULL;
    }
    if (t->op == -2) {
        pfail(line, "test '%s' is not supported by this renderer", t->name.s);
        return NULL;
    }
    const JToken *c = cur(p);
    if (is_op(c, OP_LPAREN)) {
        if (parse_call_args(p, t) != 0) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || is_op(c, OP_LPAREN) || is_op(c, OP_LBRACKET) ||
                is_op(c, OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            pfail(c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        JNode *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        Vec args = {0};
        vec_push(p, &args, arg);
        t->items = vec_list(&args);
    }
    t->a = subject;
    if (!negated) return t;
    JNode *n = node(p, N_NOT, line);
    n->a = t;
    return n;
}

static JNode *parse_filter_expr(Parser *p, JNode *n) {
    for (;;) {
        if (is_op(cur(p), OP_PIPE))
            n = parse_filter(p, n, false);
        else if (is_name(cur(p), "is"))
            n = parse_test(p, n);
        else if (is_op(cur(p), OP_LPAREN))
            n = parse_call(p, n);
        else
            return n;
        if (!n) return NULL;
    }
}

static JNode *parse_subscribed(Parser *p) {
    int line = cur(p)->line;
    JNode *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), OP_COLON)) {
        advance(p);
    } else {
        JNode *e = parse_expression(p, true);
        if (!e) return NULL;
        if (!is_op(cur(p), OP_COLON)) return e;
        advance(p);
        parts[0] = e;
    }
    if (!is_op(cur(p), OP_COLON) && !is_op(cur(p), OP_RBRACKET) && !is_op(cur(p), OP_COMMA)) {
        if (!(parts[1] = parse_expression(p, true))) return NULL;
    }
    if (is_op(cur(p), OP_COLON)) {
        advance(p);
        if (!is_op(cur(p), OP_RBRACKET) && !is_op(cur(p), OP_COMMA)) {
            if (!(parts[2] = parse_expression(p, true))) return NULL;
        }
    }
    JNode *s = node(p, N_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static JNode *parse_postfix(Parser *p, JNode *n) {
    for (;;) {
        const JToken *t = cur(p);
        if (is_op(t, OP_DOT)) {
            advance(p);
            const JToken *a = cur(p);
            if (a->kind == JT_NAME) {
                JNode *g = node(p, N_GETATTR, t->line);
                g->a = n;
                g->name = a->text;
                advance(p);
                n = g;
            } else if (a->kind == JT_INT) {
                JNode *g = node(p, N_GETITEM, t->line);
                g->a = n;
                g->b = node(p, N_CONST, a->line);
                g->b->value = jv_int(p->arena, a->i);
                advance(p);
                n = g;
            } else {
                pfail(a->line, "expected name or number");
                return NULL;
            }
        } else if (is_op(t, OP_LBRACKET)) {
            advance(p);
            Vec args = {0};
            while (!is_op(cur(p), OP_RBRACKET)) {
                if (args.n && expect_op(p, OP_COMMA) != 0) return NULL;
                JNode *x = parse_subscribed(p);
                if (!x) return NULL;
                vec_push(p, &args, x);
            }
            if (expect_op(p, OP_RBRACKET) != 0) return NULL;
            if (args.n != 1) {
                pfail(t->line, "tuple subscripts are not supported");
                return NULL;
            }
            JNode *g = node(p, N_GETITEM, t->line);
            g->a = n;
            g->b = args.v[0];
            n = g;
        } else if (is_op(t, OP_LPAREN)) {
            if (!(n = parse_call(p, n))) return NULL;
        } else {
            return n;
        }
    }
}

static JNode *parse_unary_inner(Parser *p, bool with_filter);

static JNode *parse_unary(Parser *p, bool with_filter) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        pfail(cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_unary_inner(p, with_filter);
    p->depth--;
    return n;
}

static JNode *parse_unary_inner(Parser *p, bool with_filter) {
    const JToken *t = cur(p);
    JNode *n;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        advance(p);
        JNode *x = parse_unary(p, false);
        if (!x) return NULL;
        n = node(p, is_op(t, OP_SUB) ? N_NEG : N_POS, t->line);
        n->a = x;
    } else {
        n = parse_primary(p);
    }
    if (!n || !(n = parse_postfix(p, n))) return NULL;
    if (with_filter) n = parse_filter_expr(p, n);
    return n;
}

static JNode *parse_primary(Parser *p) {
    const JToken *t = cur(p);
    JNode *n;
    switch (t->kind) {
    case JT_NAME: {
        const char *s = t->text.s;
        advance(p);
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") ||
            !strcmp(s, "False")) {
            n = node(p, N_CONST, t->line);
            n->value = jv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            n = node(p, N_CONST, t->line);
            n->value = &jv_none_value;
        } else {
            n = node(p, N_NAME, t->line);
            n->name = t->text;
        }
        return n;
    }
    case JT_STRING: {
        JBuf b;
        jb_init(&b, p->arena);
        int line = t->line;
        while (cur(p)->kind == JT_STRING) {
            jb_put(&b, cur(p)->text.s, cur(p)->text.n);
            advance(p);
        }
        n = node(p, N_CONST, line);
        n->value = jv_str_ref(p->arena, jb_str(&b));
        return n;
    }
    case JT_INT:
        n = node(p, N_CONST, t->line);
        n->value = jv_int(p->arena, t->i);
        advance(p);
        return n;
    case JT_FLOAT:
        n = node(p, N_CONST, t->line);
        n->value = jv_float(p->arena, t->f);
        advance(p);
        return n;
    case JT_OP:
        if (t->op == OP_LPAREN) {
            advance(p);
            n = parse_tuple(p, true, NULL, true);
            if (!n || expect_op(p, OP_RPAREN) != 0) return NULL;
            return n;
        }
        if (t->op == OP_LBRACKET) {
            advance(p);
            Vec items = {0};
            while (!is_op(cur(p), OP_RBRACKET)) {
                if (items.n && expect_op(p, OP_COMMA) != 0) return NULL;
                if (is_op(cur(p), OP_RBRACKET)) break;
                JNode *x = parse_expression(p, true);
                if (!x) return NULL;
                vec_push(p, &items, x);
            }
            if (expect_op(p, OP_RBRACKET) != 0) return NULL;
            n = node(p, N_LIST, t->line);
            n->items = vec_list(&items);
            return n;
        }
        if (t->op == OP_LBRACE) {
            advance(p);
            Vec items = {0};
            while (!is_op(cur(p), OP_RBRACE)) {
                if (items.n && expect_op(p, OP_COMMA) != 0) return NULL;
                if (is_op(cur(p), OP_RBRACE)) break;
                JNode *k = parse_expression(p, true);
                if (!k || expect_op(p, OP_COLON) != 0) return NULL;
                JNode *v = parse_expression(p, true);
                if (!v) return NULL;
                vec_push(p, &items, k);
                vec_push(p, &items, v);
            }
            if (expect_op(p, OP_RBRACE) != 0) return NULL;
            n = node(p, N_DICT, t->line);
            n->items = vec_list(&items);
            return n;
        }
        break;
    default:
        break;
    }
    unexpected(p);
    return NULL;
}

static bool is_tuple_end(const Parser *p, const char *extra_end) {
    const JToken *t = cur(p);
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(t, OP_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

static JNode *parse_tuple(Parser *p, bool with_condexpr, const char *extra_end,
                          bool explicit_parens) {
    int line = cur(p)->line;
    Vec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && expect_op(p, OP_COMMA) != 0) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        JNode *x = parse_expression(p, with_condexpr);
        if (!x) return NULL;
        vec_push(p, &args, x);
        if (is_op(cur(p), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char buf[128];
            pfail(cur(p)->line, "Expected an expression, got '%s'",
                  describe(cur(p), buf, sizeof buf));
            return NULL;
        }
    }
    JNode *n = node(p, N_TUPLE, line);
    n->items = vec_list(&args);
    return n;
}

/* ---------------------------------------------------------------- statements */

/* Assignment target: a name, `ns.attr` (when with_ns) or a tuple of names. */
static JNode *parse_assign_target(Parser *p, bool with_ns, const char *extra_end) {
    int line = cur(p)->line;
    Vec names = {0};
    bool is_tuple = false;
    for (;;) {
        if (names.n && expect_op(p, OP_COMMA) != 0) return NULL;
        if (is_tuple_end(p, extra_end) || is_op(cur(p), OP_ASSIGN) || is_op(cur(p), OP_PIPE)) break;
        const JToken *t = cur(p);
        if (is_op(t, OP_LPAREN)) {
            advance(p);
            JNode *inner = parse_assign_target(p, false, NULL);
            if (!inner || expect_op(p, OP_RPAREN) != 0) return NULL;
            vec_push(p, &names, inner);
            if (is_op(cur(p), OP_COMMA))
                is_tuple = true;
            else
                break;
            continue;
        }
        if (t->kind != JT_NAME) {
            char buf[128];
            pfail(t->line, "can't assign to '%s'", describe(t, buf, sizeof buf));
            return NULL;
        }
        const char *s = t->text.s;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") ||
            !strcmp(s, "False") || !strcmp(s, "none") || !strcmp(s, "None")) {
            pfail(t->line, "can't assign to 'const'");
            return NULL;
        }
        advance(p);
        JNode *n;
        if (with_ns && is_op(cur(p), OP_DOT)) {
            advance(p);
            if (cur(p)->kind != JT_NAME) {
                expect_kind(p, JT_NAME, "a name");
                return NULL;
            }
            n = node(p, N_NSREF, t->line);
            n->name = t->text;
            n->attr = cur(p)->text;
            advance(p);
        } else {
            n = node(p, N_NAME, t->line);
            n->name = t->text;
        }
        vec_push(p, &names, n);
        if (is_op(cur(p), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple && names.n == 1) return names.v[0];
    if (names.n == 0) {
        pfail(line, "expected an assignment target");
        return NULL;
    }
    for (size_t i = 0; i < names.n; i++)
        if (names.v[i]->kind == N_NSREF) {
            pfail(line, "can't assign to a namespace attribute inside a tuple");
            return NULL;
        }
    JNode *n = node(p, N_TUPLE, line);
    n->items = vec_list(&names);
    return n;
}

static int push_tag(Parser *p, const char *tag) {
    if (p->ntags == (int)(sizeof p->tag_stack / sizeof *p->tag_stack))
        return pfail(cur(p)->line, "blocks nested too deeply");
    p->tag_stack[p->ntags++] = tag;
    return 0;
}

static JNode *parse_statement(Parser *p);

static JNode *parse_for(Parser *p) {
    JNode *n = node(p, N_FOR, cur(p)->line);
    advance(p);
    if (!(n->a = parse_assign_target(p, false, "in"))) return NULL;
    if (!is_name(cur(p), "in")) {
        char buf[128];
        pfail(cur(p)->line, "expected token 'in', got '%s'", describe(cur(p), buf, sizeof buf));
        return NULL;
    }
    advance(p);
    if (!(n->b = parse_tuple(p, false, "recursive", false))) return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        if (!(n->c = parse_expression(p, true))) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        pfail(cur(p)->line, "recursive for loops are not supported by this renderer");
        return NULL;
    }
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loop_depth++;
    int rc = parse_body(p, ends, &n->body);
    p->loop_depth--;
    if (rc != 0) return NULL;
    bool has_else = is_name(cur(p), "else");
    advance(p);
    if (has_else) {
        static const char *const end_for[] = {"endfor", NULL};
        if (parse_body(p, end_for, &n->orelse) != 0) return NULL;
        advance(p);
    }
    return n;
}

static JNode *parse_if(Parser *p) {
    JNode *result = node(p, N_IF, cur(p)->line);
    advance(p);
    JNode *n = result;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    for (;;) {
        if (!(n->a = parse_tuple(p, false, NULL, false))) return NULL;
        if (parse_body(p, ends, &n->body) != 0) return NULL;
        const JToken *t = cur(p);
        advance(p);
        if (is_name(t, "elif")) {
            JNode *next = node(p, N_IF, t->line);
            JNode **one = ja_alloc(p->arena, sizeof *one);
            one[0] = next;
            n->orelse = (JNodeList){one, 1};
            n = next;
            continue;
        }
        if (is_name(t, "else")) {
            static const char *const end_if[] = {"endif", NULL};
            if (parse_body(p, end_if, &n->orelse) != 0) return NULL;
            advance(p);
        }
        return result;
    }
}

static JNode *parse_set(Parser *p) {
    int line = cur(p)->line;
    advance(p);
    JNode *target = parse_assign_target(p, true, NULL);
    if (!target) return NULL;
    if (is_op(cur(p), OP_ASSIGN)) {
        advance(p);
        JNode *n = node(p, N_SET, line);
        n->a = target;
        if (!(n->b = parse_tuple(p, true, NULL, false))) return NULL;
        return n;
    }
    JNode *n = node(p, N_SETBLOCK, line);
    n->a = target;
    if (is_op(cur(p), OP_PIPE) && !(n->c = parse_filter(p, NULL, false))) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (parse_body(p, ends, &n->body) != 0) return NULL;
    advance(p);
    return n;
}

static JNode *parse_macro(Parser *p) {
    JNode *n = node(p, N_MACRO, cur(p)->line);
    advance(p);
    if (cur(p)->kind != JT_NAME) {
        expect_kind(p, JT_NAME, "a macro name");
        return NULL;
    }
    n->name = cur(p)->text;
    advance(p);
    if (expect_op(p, OP_LPAREN) != 0) return NULL;
    Vec params = {0}, defaults = {0};
    while (!is_op(cur(p), OP_RPAREN)) {
        if (params.n && expect_op(p, OP_COMMA) != 0) return NULL;
        if (cur(p)->kind != JT_NAME) {
            expect_kind(p, JT_NAME, "a parameter name");
            return NULL;
        }
        JNode *param = node(p, N_NAME, cur(p)->line);
        param->name = cur(p)->text;
        advance(p);
        if (is_op(cur(p), OP_ASSIGN)) {
            advance(p);
            JNode *d = parse_expression(p, true);
            if (!d) return NULL;
            vec_push(p, &defaults, d);
        } else if (defaults.n) {
            pfail(param->line, "non-default argument follows default argument");
            return NULL;
        }
        vec_push(p, &params, param);
    }
    advance(p);
    n->items = vec_list(&params);
    n->kwvals = vec_list(&defaults);
    static const char *const ends[] = {"endmacro", NULL};
    int saved = p->loop_depth;
    p->loop_depth = 0;
    int rc = parse_body(p, ends, &n->body);
    p->loop_depth = saved;
    if (rc != 0) return NULL;
    advance(p);
    return n;
}

static JNode *parse_statement(Parser *p) {
    const JToken *t = cur(p);
    if (t->kind != JT_NAME) {
        pfail(t->line, "tag name expected");
        return NULL;
    }
    const char *name = t->text.s;
    if (push_tag(p, name) != 0) return NULL;
    JNode *n = NULL;
    if (!strcmp(name, "for")) {
        n = parse_for(p);
    } else if (!strcmp(name, "if")) {
        n = parse_if(p);
    } else if (!strcmp(name, "set")) {
        n = parse_set(p);
    } else if (!strcmp(name, "macro")) {
        n = parse_macro(p);
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (p->loop_depth == 0) {
            pfail(t->line, "'%s' outside of a loop", name);
        } else {
            n = node(p, name[0] == 'b' ? N_BREAK : N_CONTINUE, t->line);
            advance(p);
        }
    } else if (!strcmp(name, "print")) {
        advance(p);
        Vec items = {0};
        while (cur(p)->kind != JT_BLOCK_END) {
            if (items.n && expect_op(p, OP_COMMA) != 0) return NULL;
            JNode *x = parse_expression(p, true);
            if (!x) return NULL;
            vec_push(p, &items, x);
        }
        n = node(p, N_OUTPUT, t->line);
        n->items = vec_list(&items);
    } else if (!strcmp(name, "generation")) {
        n = node(p, N_GENERATION, t->line);
        advance(p);
        static const char *const ends[] = {"endgeneration", NULL};
        if (parse_body(p, ends, &n->body) != 0) return NULL;
        advance(p);
    } else if (!strcmp(name, "block") || !strcmp(name, "extends") || !strcmp(name, "include") ||
               !strcmp(name, "import") || !strcmp(name, "from") || !strcmp(name, "with") ||
               !strcmp(name, "autoescape") || !strcmp(name, "call") || !strcmp(name, "filter")) {
        pfail(t->line, "the '{%% %s %%}' tag is not supported by this renderer", name);
    } else {
        p->ntags--;
        pfail(t->line, "Encountered unknown tag '%s'.%s%s%s", name,
              p->ntags ? " The innermost block that needs to be closed is '" : "",
              p->ntags ? p->tag_stack[p->ntags - 1] : "", p->ntags ? "'." : "");
        return NULL;
    }
    p->ntags--;
    return n;
}

static bool in_list(const JToken *t, const char *const *names) {
    if (!names || t->kind != JT_NAME) return false;
    for (; *names; names++)
        if (is_name(t, *names)) return true;
    return false;
}

/* Parses statements until `{% <one of end_tags>` (left as the current token) or EOF. */
static int parse_body(Parser *p, const char *const *end_tags, JNodeList *body) {
    if (end_tags && cur(p)->kind != JT_BLOCK_END) {
        char buf[128];
        return pfail(cur(p)->line, "expected end of statement block, got '%s'",
                     describe(cur(p), buf, sizeof buf));
    }
    if (end_tags) advance(p);
    Vec out = {0};
    for (;;) {
        const JToken *t = cur(p);
        switch (t->kind) {
        case JT_DATA: {
            JNode *n = node(p, N_DATA, t->line);
            n->name = t->text;
            vec_push(p, &out, n);
            advance(p);
            break;
        }
        case JT_VAR_BEGIN: {
            advance(p);
            JNode *n = node(p, N_OUTPUT, t->line);
            if (!(n->a = parse_tuple(p, true, NULL, false))) return -1;
            if (expect_kind(p, JT_VAR_END, "end of print statement '}}'") != 0) return -1;
            vec_push(p, &out, n);
            break;
        }
        case JT_BLOCK_BEGIN: {
            advance(p);
            if (in_list(cur(p), end_tags)) {
                *body = vec_list(&out);
                return 0;
            }
            JNode *n = parse_statement(p);
            if (!n) return -1;
            if (expect_kind(p, JT_BLOCK_END, "end of statement block '%}'") != 0) return -1;
            vec_push(p, &out, n);
            break;
        }
        case JT_EOF:
            if (end_tags) {
                JBuf b;
                jb_init(&b, p->arena);
                for (const char *const *e = end_tags; *e; e++)
                    jb_printf(&b, "%s'%s'", e == end_tags ? "" : " or ", *e);
                return pfail(
                    t->line,
                    "Unexpected end of template. Jinja was looking for the following tags: "
                    "%s. The innermost block that needs to be closed is '%s'.",
                    jb_str(&b).s, p->ntags ? p->tag_stack[p->ntags - 1] : "?");
            }
            *body = vec_list(&out);
            return 0;
        default: {
            char buf[128];
            return pfail(t->line, "unexpected '%s'", describe(t, buf, sizeof buf));
        }
        }
    }
}

int jinja_parse(JArena *a, const JToken *toks, size_t ntoks, JNodeList *out) {
    Parser p = {.arena = a, .t = toks, .n = ntoks};
    return parse_body(&p, NULL, out);
}

int jinja_compile(JArena *a, const char *src, size_t len, JNodeList *out) {
    JToken *toks;
    size_t ntoks;
    if (jinja_lex(a, src, len, &toks, &ntoks) != 0) return -1;
    return jinja_parse(a, toks, ntoks, out);
}
