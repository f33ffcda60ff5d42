/* Primary expressions (literals, names, parentheses, lists, dicts) and what may follow
 * them: attribute and item access, slices, calls, `|` filters and `is` tests. Filter and
 * test names are resolved here, so an unknown one is a compile-time error as in jinja2. */
#include "jinja/parser.h"

#include <string.h>

static JNode *parse_primary(JParser *p);
static JNode *parse_postfix(JParser *p, JNode *n);

static int parse_call_args(JParser *p, JNode *n) {
    int line = jp_cur(p)->line;
    if (jp_expect_op(p, OP_LPAREN) != 0) return -1;
    JNodeVec args = {0}, kwvals = {0};
    JStr names[64];
    size_t nkw = 0;
    bool require_comma = false;
    while (!jp_is_op(jp_cur(p), OP_RPAREN)) {
        if (require_comma) {
            if (jp_expect_op(p, OP_COMMA) != 0) return -1;
            if (jp_is_op(jp_cur(p), OP_RPAREN)) break;
        }
        /* jinja2's parse_call_args: *x after the positional arguments (once, before any **),
         * **x last; anything out of that order is invalid syntax. */
        if (jp_is_op(jp_cur(p), OP_MUL) || jp_is_op(jp_cur(p), OP_POW)) {
            bool dstar = jp_is_op(jp_cur(p), OP_POW);
            if (n->dstar || (!dstar && n->star))
                return jp_fail(line, "invalid syntax for function call expression");
            jp_advance(p);
            JNode *v = jp_parse_expression(p, true);
            if (!v) return -1;
            if (dstar)
                n->dstar = v;
            else
                n->star = v;
            require_comma = true;
            continue;
        }
        if (n->dstar) return jp_fail(line, "invalid syntax for function call expression");
        if (jp_cur(p)->kind == JT_NAME && jp_is_op(jp_peek(p, 1), OP_ASSIGN)) {
            if (nkw == sizeof names / sizeof *names)
                return jp_fail(line, "too many keyword arguments");
            names[nkw++] = jp_cur(p)->text;
            jp_advance(p);
            jp_advance(p);
            JNode *v = jp_parse_expression(p, true);
            if (!v) return -1;
            jp_vec_push(p, &kwvals, v);
        } else {
            if (nkw || n->star) return jp_fail(line, "invalid syntax for function call expression");
            JNode *v = jp_parse_expression(p, true);
            if (!v) return -1;
            jp_vec_push(p, &args, v);
        }
        require_comma = true;
    }
    if (jp_expect_op(p, OP_RPAREN) != 0) return -1;
    n->items = jp_vec_list(&args);
    n->kwvals = jp_vec_list(&kwvals);
    if (nkw) {
        n->kwnames = ja_alloc(p->arena, nkw * sizeof(JStr));
        memcpy(n->kwnames, names, nkw * sizeof(JStr));
    }
    return 0;
}

static JNode *parse_call(JParser *p, JNode *fn) {
    JNode *n = jp_node(p, N_CALL, jp_cur(p)->line);
    n->a = fn;
    if (parse_call_args(p, n) != 0) return NULL;
    return n;
}

/* A dotted name after `|` or `is`. */
static int parse_dotted_name(JParser *p, JStr *out) {
    if (jp_cur(p)->kind != JT_NAME) return jp_expect_kind(p, JT_NAME, "a name");
    JBuf b;
    jb_init(&b, p->arena);
    jb_put(&b, jp_cur(p)->text.s, jp_cur(p)->text.n);
    jp_advance(p);
    while (jp_is_op(jp_cur(p), OP_DOT)) {
        jp_advance(p);
        if (jp_cur(p)->kind != JT_NAME) return jp_expect_kind(p, JT_NAME, "a name");
        jb_putc(&b, '.');
        jb_put(&b, jp_cur(p)->text.s, jp_cur(p)->text.n);
        jp_advance(p);
    }
    *out = jb_str(&b);
    return 0;
}

/* `| name(args)` chain applied to n (NULL for a filter block's innermost input). */
JNode *jp_parse_filter(JParser *p, JNode *n, bool start_inline) {
    while (jp_is_op(jp_cur(p), OP_PIPE) || start_inline) {
        if (!start_inline) jp_advance(p);
        start_inline = false;
        int line = jp_cur(p)->line;
        JNode *f = jp_node(p, N_FILTER, line);
        if (parse_dotted_name(p, &f->name) != 0) return NULL;
        /* A filter jinja2 has and this renderer does not fails where it is applied (op -2),
         * as a template that never reaches it renders in Python; an unknown name fails here,
         * as in jinja2. */
        f->op = jinja_filter_id(f->name.s);
        if (f->op == -1 && jinja_filter_resolve(f->name.s, line) < 0) return NULL;
        if (jp_is_op(jp_cur(p), OP_LPAREN) && parse_call_args(p, f) != 0) return NULL;
        f->a = n;
        n = f;
    }
    return n;
}

static JNode *parse_test(JParser *p, JNode *subject) {
    int line = jp_cur(p)->line;
    jp_advance(p); /* is */
    bool negated = false;
    if (jp_is_name(jp_cur(p), "not")) {
        negated = true;
        jp_advance(p);
    }
    JNode *t = jp_node(p, N_TEST, line);
    if (parse_dotted_name(p, &t->name) != 0) return NULL;
    t->op = jinja_test_id(t->name.s);
    if (t->op == -1) {
        jp_fail(line, "No test named '%s'.", t->name.s);
        return NULL;
    }
    if (t->op == -2) {
        jp_fail(line, "test '%s' is not supported by this renderer", t->name.s);
        return NULL;
    }
    const JToken *c = jp_cur(p);
    if (jp_is_op(c, OP_LPAREN)) {
        if (parse_call_args(p, t) != 0) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || jp_is_op(c, OP_LPAREN) || jp_is_op(c, OP_LBRACKET) ||
                jp_is_op(c, OP_LBRACE)) &&
               !jp_is_name(c, "else") && !jp_is_name(c, "or") && !jp_is_name(c, "and")) {
        if (jp_is_name(c, "is")) {
            jp_fail(c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        JNode *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        JNodeVec args = {0};
        jp_vec_push(p, &args, arg);
        t->items = jp_vec_list(&args);
    }
    t->a = subject;
    if (!negated) return t;
    JNode *n = jp_node(p, N_NOT, line);
    n->a = t;
    return n;
}

static JNode *parse_filter_expr(JParser *p, JNode *n) {
    for (;;) {
        if (jp_is_op(jp_cur(p), OP_PIPE))
            n = jp_parse_filter(p, n, false);
        else if (jp_is_name(jp_cur(p), "is"))
            n = parse_test(p, n);
        else if (jp_is_op(jp_cur(p), OP_LPAREN))
            n = parse_call(p, n);
        else
            return n;
        if (!n) return NULL;
    }
}

static JNode *parse_subscribed(JParser *p) {
    int line = jp_cur(p)->line;
    JNode *parts[3] = {NULL, NULL, NULL};
    if (jp_is_op(jp_cur(p), OP_COLON)) {
        jp_advance(p);
    } else {
        JNode *e = jp_parse_expression(p, true);
        if (!e) return NULL;
        if (!jp_is_op(jp_cur(p), OP_COLON)) return e;
        jp_advance(p);
        parts[0] = e;
    }
    if (!jp_is_op(jp_cur(p), OP_COLON) && !jp_is_op(jp_cur(p), OP_RBRACKET) &&
        !jp_is_op(jp_cur(p), OP_COMMA)) {
        if (!(parts[1] = jp_parse_expression(p, true))) return NULL;
    }
    if (jp_is_op(jp_cur(p), OP_COLON)) {
        jp_advance(p);
        if (!jp_is_op(jp_cur(p), OP_RBRACKET) && !jp_is_op(jp_cur(p), OP_COMMA)) {
            if (!(parts[2] = jp_parse_expression(p, true))) return NULL;
        }
    }
    JNode *s = jp_node(p, N_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static JNode *parse_postfix(JParser *p, JNode *n) {
    for (;;) {
        const JToken *t = jp_cur(p);
        if (jp_is_op(t, OP_DOT)) {
            jp_advance(p);
            const JToken *a = jp_cur(p);
            if (a->kind == JT_NAME) {
                JNode *g = jp_node(p, N_GETATTR, t->line);
                g->a = n;
                g->name = a->text;
                jp_advance(p);
                n = g;
            } else if (a->kind == JT_INT) {
                JNode *g = jp_node(p, N_GETITEM, t->line);
                g->a = n;
                g->b = jp_node(p, N_CONST, a->line);
                g->b->value = jv_int(p->arena, a->i);
                jp_advance(p);
                n = g;
            } else {
                jp_fail(a->line, "expected name or number");
                return NULL;
            }
        } else if (jp_is_op(t, OP_LBRACKET)) {
            jp_advance(p);
            JNodeVec args = {0};
            while (!jp_is_op(jp_cur(p), OP_RBRACKET)) {
                if (args.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
                JNode *x = parse_subscribed(p);
                if (!x) return NULL;
                jp_vec_push(p, &args, x);
            }
            if (jp_expect_op(p, OP_RBRACKET) != 0) return NULL;
            if (args.n != 1) {
                jp_fail(t->line, "tuple subscripts are not supported");
                return NULL;
            }
            JNode *g = jp_node(p, N_GETITEM, t->line);
            g->a = n;
            g->b = args.v[0];
            n = g;
        } else if (jp_is_op(t, OP_LPAREN)) {
            if (!(n = parse_call(p, n))) return NULL;
        } else {
            return n;
        }
    }
}

static JNode *parse_unary_inner(JParser *p, bool with_filter);

JNode *jp_parse_unary(JParser *p, bool with_filter) {
    if (++p->depth > MAX_EXPR_DEPTH) {
        jp_fail(jp_cur(p)->line, "expression nested too deeply");
        return NULL;
    }
    JNode *n = parse_unary_inner(p, with_filter);
    p->depth--;
    return n;
}

static JNode *parse_unary_inner(JParser *p, bool with_filter) {
    const JToken *t = jp_cur(p);
    JNode *n;
    if (jp_is_op(t, OP_SUB) || jp_is_op(t, OP_ADD)) {
        jp_advance(p);
        JNode *x = jp_parse_unary(p, false);
        if (!x) return NULL;
        n = jp_node(p, jp_is_op(t, OP_SUB) ? N_NEG : N_POS, t->line);
        n->a = x;
    } else {
        n = parse_primary(p);
    }
    if (!n || !(n = parse_postfix(p, n))) return NULL;
    if (with_filter) n = parse_filter_expr(p, n);
    return n;
}

static JNode *parse_primary(JParser *p) {
    const JToken *t = jp_cur(p);
    JNode *n;
    switch (t->kind) {
    case JT_NAME: {
        const char *s = t->text.s;
        jp_advance(p);
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") ||
            !strcmp(s, "False")) {
            n = jp_node(p, N_CONST, t->line);
            n->value = jv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            n = jp_node(p, N_CONST, t->line);
            n->value = &jv_none_value;
        } else {
            n = jp_node(p, N_NAME, t->line);
            n->name = t->text;
        }
        return n;
    }
    case JT_STRING: {
        JBuf b;
        jb_init(&b, p->arena);
        int line = t->line;
        while (jp_cur(p)->kind == JT_STRING) {
            jb_put(&b, jp_cur(p)->text.s, jp_cur(p)->text.n);
            jp_advance(p);
        }
        n = jp_node(p, N_CONST, line);
        n->value = jv_str_ref(p->arena, jb_str(&b));
        return n;
    }
    case JT_INT:
        n = jp_node(p, N_CONST, t->line);
        n->value = jv_int(p->arena, t->i);
        jp_advance(p);
        return n;
    case JT_FLOAT:
        n = jp_node(p, N_CONST, t->line);
        n->value = jv_float(p->arena, t->f);
        jp_advance(p);
        return n;
    case JT_OP:
        if (t->op == OP_LPAREN) {
            jp_advance(p);
            n = jp_parse_tuple(p, true, NULL, true);
            if (!n || jp_expect_op(p, OP_RPAREN) != 0) return NULL;
            return n;
        }
        if (t->op == OP_LBRACKET) {
            jp_advance(p);
            JNodeVec items = {0};
            while (!jp_is_op(jp_cur(p), OP_RBRACKET)) {
                if (items.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
                if (jp_is_op(jp_cur(p), OP_RBRACKET)) break;
                JNode *x = jp_parse_expression(p, true);
                if (!x) return NULL;
                jp_vec_push(p, &items, x);
            }
            if (jp_expect_op(p, OP_RBRACKET) != 0) return NULL;
            n = jp_node(p, N_LIST, t->line);
            n->items = jp_vec_list(&items);
            return n;
        }
        if (t->op == OP_LBRACE) {
            jp_advance(p);
            JNodeVec items = {0};
            while (!jp_is_op(jp_cur(p), OP_RBRACE)) {
                if (items.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
                if (jp_is_op(jp_cur(p), OP_RBRACE)) break;
                JNode *k = jp_parse_expression(p, true);
                if (!k || jp_expect_op(p, OP_COLON) != 0) return NULL;
                JNode *v = jp_parse_expression(p, true);
                if (!v) return NULL;
                jp_vec_push(p, &items, k);
                jp_vec_push(p, &items, v);
            }
            if (jp_expect_op(p, OP_RBRACE) != 0) return NULL;
            n = jp_node(p, N_DICT, t->line);
            n->items = jp_vec_list(&items);
            return n;
        }
        break;
    default:
        break;
    }
    jp_unexpected(p);
    return NULL;
}
