/* Recursive-descent parser from tokens to the AST: the token cursor the parser's files share
 * (parser.h), and the statements. Expressions are parsed in parser_expr.c and
 * parser_primary.c.
 * Tags: if/elif/else, for (+ else, + `if` filter), set (incl. ns.attr and block set),
 * macro, call, break/continue, print, generation. Tags jinja2 has but this renderer does not
 * (include, extends, block, import, filter, with, ...) become N_UNSUPPORTED nodes that fail
 * with their name when a render reaches them. */
#include "jinja/parser.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int jp_fail(int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set("line %d: %s", line, msg);
}

const JToken *jp_cur(const JParser *p) {
    return &p->t[p->pos];
}

const JToken *jp_peek(const JParser *p, size_t k) {
    size_t i = p->pos + k;
    return &p->t[i < p->n ? i : p->n - 1];
}

void jp_advance(JParser *p) {
    if (p->pos + 1 < p->n) p->pos++;
}

bool jp_is_op(const JToken *t, JOp op) {
    return t->kind == JT_OP && t->op == op;
}

bool jp_is_name(const JToken *t, const char *name) {
    return t->kind == JT_NAME && strcmp(t->text.s, name) == 0;
}

const char *jp_describe(const JToken *t, char *buf, size_t cap) {
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

int jp_unexpected(JParser *p) {
    char buf[128];
    return jp_fail(jp_cur(p)->line, "unexpected '%s'", jp_describe(jp_cur(p), buf, sizeof buf));
}

int jp_expect_op(JParser *p, JOp op) {
    if (!jp_is_op(jp_cur(p), op)) {
        char buf[128];
        return jp_fail(jp_cur(p)->line, "expected token '%s', got '%s'", jop_text[op],
                       jp_describe(jp_cur(p), buf, sizeof buf));
    }
    jp_advance(p);
    return 0;
}

int jp_expect_kind(JParser *p, JTokKind kind, const char *what) {
    if (jp_cur(p)->kind != kind) {
        char buf[128];
        return jp_fail(jp_cur(p)->line, "expected %s, got '%s'", what,
                       jp_describe(jp_cur(p), buf, sizeof buf));
    }
    jp_advance(p);
    return 0;
}

JNode *jp_node(JParser *p, JNodeKind kind, int line) {
    JNode *n = ja_alloc(p->arena, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

void jp_vec_push(JParser *p, JNodeVec *v, JNode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        JNode **items = ja_alloc(p->arena, cap * sizeof *items);
        if (v->n) memcpy(items, v->v, v->n * sizeof *items);
        v->v = items;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

JNodeList jp_vec_list(const JNodeVec *v) {
    return (JNodeList){v->v, v->n};
}

/* ---------------------------------------------------------------- statements */

/* Assignment target: a name, `ns.attr` (when with_ns) or a tuple of names. */
static JNode *parse_assign_target(JParser *p, bool with_ns, const char *extra_end) {
    int line = jp_cur(p)->line;
    JNodeVec names = {0};
    bool is_tuple = false;
    for (;;) {
        if (names.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
        if (jp_is_tuple_end(p, extra_end) || jp_is_op(jp_cur(p), OP_ASSIGN) ||
            jp_is_op(jp_cur(p), OP_PIPE))
            break;
        const JToken *t = jp_cur(p);
        if (jp_is_op(t, OP_LPAREN)) {
            jp_advance(p);
            JNode *inner = parse_assign_target(p, false, NULL);
            if (!inner || jp_expect_op(p, OP_RPAREN) != 0) return NULL;
            jp_vec_push(p, &names, inner);
            if (jp_is_op(jp_cur(p), OP_COMMA))
                is_tuple = true;
            else
                break;
            continue;
        }
        if (t->kind != JT_NAME) {
            char buf[128];
            jp_fail(t->line, "can't assign to '%s'", jp_describe(t, buf, sizeof buf));
            return NULL;
        }
        const char *s = t->text.s;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") ||
            !strcmp(s, "False") || !strcmp(s, "none") || !strcmp(s, "None")) {
            jp_fail(t->line, "can't assign to 'const'");
            return NULL;
        }
        jp_advance(p);
        JNode *n;
        if (with_ns && jp_is_op(jp_cur(p), OP_DOT)) {
            jp_advance(p);
            if (jp_cur(p)->kind != JT_NAME) {
                jp_expect_kind(p, JT_NAME, "a name");
                return NULL;
            }
            n = jp_node(p, N_NSREF, t->line);
            n->name = t->text;
            n->attr = jp_cur(p)->text;
            jp_advance(p);
        } else {
            n = jp_node(p, N_NAME, t->line);
            n->name = t->text;
        }
        jp_vec_push(p, &names, n);
        if (jp_is_op(jp_cur(p), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple && names.n == 1) return names.v[0];
    if (names.n == 0) {
        jp_fail(line, "expected an assignment target");
        return NULL;
    }
    for (size_t i = 0; i < names.n; i++)
        if (names.v[i]->kind == N_NSREF) {
            jp_fail(line, "can't assign to a namespace attribute inside a tuple");
            return NULL;
        }
    JNode *n = jp_node(p, N_TUPLE, line);
    n->items = jp_vec_list(&names);
    return n;
}

static int push_tag(JParser *p, const char *tag) {
    if (p->ntags == (int)(sizeof p->tag_stack / sizeof *p->tag_stack))
        return jp_fail(jp_cur(p)->line, "blocks nested too deeply");
    p->tag_stack[p->ntags++] = tag;
    return 0;
}

static JNode *parse_statement(JParser *p);
static int parse_body(JParser *p, const char *const *end_tags, JNodeList *body);

static JNode *parse_for(JParser *p) {
    JNode *n = jp_node(p, N_FOR, jp_cur(p)->line);
    jp_advance(p);
    if (!(n->a = parse_assign_target(p, false, "in"))) return NULL;
    if (!jp_is_name(jp_cur(p), "in")) {
        char buf[128];
        jp_fail(jp_cur(p)->line, "expected token 'in', got '%s'",
                jp_describe(jp_cur(p), buf, sizeof buf));
        return NULL;
    }
    jp_advance(p);
    if (!(n->b = jp_parse_tuple(p, false, "recursive", false))) return NULL;
    if (jp_is_name(jp_cur(p), "if")) {
        jp_advance(p);
        if (!(n->c = jp_parse_expression(p, true))) return NULL;
    }
    if (jp_is_name(jp_cur(p), "recursive")) {
        jp_fail(jp_cur(p)->line, "recursive for loops are not supported by this renderer");
        return NULL;
    }
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loop_depth++;
    int rc = parse_body(p, ends, &n->body);
    p->loop_depth--;
    if (rc != 0) return NULL;
    bool has_else = jp_is_name(jp_cur(p), "else");
    jp_advance(p);
    if (has_else) {
        static const char *const end_for[] = {"endfor", NULL};
        if (parse_body(p, end_for, &n->orelse) != 0) return NULL;
        jp_advance(p);
    }
    return n;
}

static JNode *parse_if(JParser *p) {
    JNode *result = jp_node(p, N_IF, jp_cur(p)->line);
    jp_advance(p);
    JNode *n = result;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    for (;;) {
        if (!(n->a = jp_parse_tuple(p, false, NULL, false))) return NULL;
        if (parse_body(p, ends, &n->body) != 0) return NULL;
        const JToken *t = jp_cur(p);
        jp_advance(p);
        if (jp_is_name(t, "elif")) {
            JNode *next = jp_node(p, N_IF, t->line);
            JNode **one = ja_alloc(p->arena, sizeof *one);
            one[0] = next;
            n->orelse = (JNodeList){one, 1};
            n = next;
            continue;
        }
        if (jp_is_name(t, "else")) {
            static const char *const end_if[] = {"endif", NULL};
            if (parse_body(p, end_if, &n->orelse) != 0) return NULL;
            jp_advance(p);
        }
        return result;
    }
}

static JNode *parse_set(JParser *p) {
    int line = jp_cur(p)->line;
    jp_advance(p);
    JNode *target = parse_assign_target(p, true, NULL);
    if (!target) return NULL;
    if (jp_is_op(jp_cur(p), OP_ASSIGN)) {
        jp_advance(p);
        JNode *n = jp_node(p, N_SET, line);
        n->a = target;
        if (!(n->b = jp_parse_tuple(p, true, NULL, false))) return NULL;
        return n;
    }
    JNode *n = jp_node(p, N_SETBLOCK, line);
    n->a = target;
    if (jp_is_op(jp_cur(p), OP_PIPE) && !(n->c = jp_parse_filter(p, NULL, false))) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (parse_body(p, ends, &n->body) != 0) return NULL;
    jp_advance(p);
    return n;
}

/* `(a, b=1, ...)`: a macro's or a caller's parameters into n->items and n->kwvals. */
static int parse_params(JParser *p, JNode *n) {
    if (jp_expect_op(p, OP_LPAREN) != 0) return -1;
    JNodeVec params = {0}, defaults = {0};
    while (!jp_is_op(jp_cur(p), OP_RPAREN)) {
        if (params.n && jp_expect_op(p, OP_COMMA) != 0) return -1;
        if (jp_cur(p)->kind != JT_NAME) return jp_expect_kind(p, JT_NAME, "a parameter name");
        JNode *param = jp_node(p, N_NAME, jp_cur(p)->line);
        param->name = jp_cur(p)->text;
        jp_advance(p);
        if (jp_is_op(jp_cur(p), OP_ASSIGN)) {
            jp_advance(p);
            JNode *d = jp_parse_expression(p, true);
            if (!d) return -1;
            jp_vec_push(p, &defaults, d);
        } else if (defaults.n) {
            return jp_fail(param->line, "non-default argument follows default argument");
        }
        jp_vec_push(p, &params, param);
    }
    jp_advance(p);
    n->items = jp_vec_list(&params);
    n->kwvals = jp_vec_list(&defaults);
    return 0;
}

/* A macro's (or a caller's) body up to `end`, outside any loop of the template. */
static int parse_macro_body(JParser *p, JNode *n, const char *end) {
    const char *const ends[] = {end, NULL};
    int saved = p->loop_depth;
    p->loop_depth = 0;
    int rc = parse_body(p, ends, &n->body);
    p->loop_depth = saved;
    if (rc != 0) return -1;
    jp_advance(p);
    return 0;
}

static JNode *parse_macro(JParser *p) {
    JNode *n = jp_node(p, N_MACRO, jp_cur(p)->line);
    jp_advance(p);
    if (jp_cur(p)->kind != JT_NAME) {
        jp_expect_kind(p, JT_NAME, "a macro name");
        return NULL;
    }
    n->name = jp_cur(p)->text;
    jp_advance(p);
    if (parse_params(p, n) != 0 || parse_macro_body(p, n, "endmacro") != 0) return NULL;
    return n;
}

/* {% call [(params)] f(args) %}body{% endcall %}: the body becomes a macro named caller that
 * f receives as caller=, as jinja2 compiles it. */
static JNode *parse_call_block(JParser *p) {
    int line = jp_cur(p)->line;
    JNode *n = jp_node(p, N_CALLBLOCK, line);
    JNode *caller = jp_node(p, N_MACRO, line);
    caller->name = (JStr){"caller", 6};
    jp_advance(p);
    if (jp_is_op(jp_cur(p), OP_LPAREN) && parse_params(p, caller) != 0) return NULL;
    JNode *call = jp_parse_expression(p, true);
    if (!call) return NULL;
    if (call->kind != N_CALL) {
        jp_fail(line, "expected call");
        return NULL;
    }
    if (parse_macro_body(p, caller, "endcall") != 0) return NULL;
    n->a = call;
    n->b = caller;
    return n;
}

/* A tag jinja2 has and this renderer does not: its header skipped and its body (if it has
 * one, up to end<name>) parsed, so that it fails only when a render reaches it, as a
 * template that never executes it renders in Python. */
static JNode *parse_unsupported(JParser *p, const char *name, bool has_body) {
    JNode *n = jp_node(p, N_UNSUPPORTED, jp_cur(p)->line);
    n->name = jp_cur(p)->text;
    while (jp_cur(p)->kind != JT_BLOCK_END && jp_cur(p)->kind != JT_EOF)
        jp_advance(p);
    if (!has_body) return n;
    char end[32];
    snprintf(end, sizeof end, "end%s", name);
    const char *const ends[] = {end, NULL};
    if (parse_body(p, ends, &n->body) != 0) return NULL;
    jp_advance(p);
    return n;
}

static JNode *parse_statement(JParser *p) {
    const JToken *t = jp_cur(p);
    if (t->kind != JT_NAME) {
        jp_fail(t->line, "tag name expected");
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
            jp_fail(t->line, "'%s' outside of a loop", name);
        } else {
            n = jp_node(p, name[0] == 'b' ? N_BREAK : N_CONTINUE, t->line);
            jp_advance(p);
        }
    } else if (!strcmp(name, "print")) {
        jp_advance(p);
        JNodeVec items = {0};
        while (jp_cur(p)->kind != JT_BLOCK_END) {
            if (items.n && jp_expect_op(p, OP_COMMA) != 0) return NULL;
            JNode *x = jp_parse_expression(p, true);
            if (!x) return NULL;
            jp_vec_push(p, &items, x);
        }
        n = jp_node(p, N_OUTPUT, t->line);
        n->items = jp_vec_list(&items);
    } else if (!strcmp(name, "generation")) {
        n = jp_node(p, N_GENERATION, t->line);
        jp_advance(p);
        static const char *const ends[] = {"endgeneration", NULL};
        if (parse_body(p, ends, &n->body) != 0) return NULL;
        jp_advance(p);
    } else if (!strcmp(name, "call")) {
        n = parse_call_block(p);
    } else if (!strcmp(name, "block") || !strcmp(name, "with") || !strcmp(name, "autoescape") ||
               !strcmp(name, "filter")) {
        n = parse_unsupported(p, name, true);
    } else if (!strcmp(name, "extends") || !strcmp(name, "include") || !strcmp(name, "import") ||
               !strcmp(name, "from")) {
        n = parse_unsupported(p, name, false);
    } else {
        p->ntags--;
        jp_fail(t->line, "Encountered unknown tag '%s'.%s%s%s", name,
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
        if (jp_is_name(t, *names)) return true;
    return false;
}

/* Parses statements until `{% <one of end_tags>` (left as the current token) or EOF. */
static int parse_body(JParser *p, const char *const *end_tags, JNodeList *body) {
    if (end_tags && jp_cur(p)->kind != JT_BLOCK_END) {
        char buf[128];
        return jp_fail(jp_cur(p)->line, "expected end of statement block, got '%s'",
                       jp_describe(jp_cur(p), buf, sizeof buf));
    }
    if (end_tags) jp_advance(p);
    JNodeVec out = {0};
    for (;;) {
        const JToken *t = jp_cur(p);
        switch (t->kind) {
        case JT_DATA: {
            JNode *n = jp_node(p, N_DATA, t->line);
            n->name = t->text;
            jp_vec_push(p, &out, n);
            jp_advance(p);
            break;
        }
        case JT_VAR_BEGIN: {
            jp_advance(p);
            JNode *n = jp_node(p, N_OUTPUT, t->line);
            if (!(n->a = jp_parse_tuple(p, true, NULL, false))) return -1;
            if (jp_expect_kind(p, JT_VAR_END, "end of print statement '}}'") != 0) return -1;
            jp_vec_push(p, &out, n);
            break;
        }
        case JT_BLOCK_BEGIN: {
            jp_advance(p);
            if (in_list(jp_cur(p), end_tags)) {
                *body = jp_vec_list(&out);
                return 0;
            }
            JNode *n = parse_statement(p);
            if (!n) return -1;
            if (jp_expect_kind(p, JT_BLOCK_END, "end of statement block '%}'") != 0) return -1;
            jp_vec_push(p, &out, n);
            break;
        }
        case JT_EOF:
            if (end_tags) {
                JBuf b;
                jb_init(&b, p->arena);
                for (const char *const *e = end_tags; *e; e++)
                    jb_printf(&b, "%s'%s'", e == end_tags ? "" : " or ", *e);
                return jp_fail(
                    t->line,
                    "Unexpected end of template. Jinja was looking for the following tags: "
                    "%s. The innermost block that needs to be closed is '%s'.",
                    jb_str(&b).s, p->ntags ? p->tag_stack[p->ntags - 1] : "?");
            }
            *body = jp_vec_list(&out);
            return 0;
        default: {
            char buf[128];
            return jp_fail(t->line, "unexpected '%s'", jp_describe(t, buf, sizeof buf));
        }
        }
    }
}

int jinja_parse(JArena *a, const JToken *toks, size_t ntoks, JNodeList *out) {
    JParser p = {.arena = a, .t = toks, .n = ntoks};
    return parse_body(&p, NULL, out);
}

int jinja_compile(JArena *a, const char *src, size_t len, JNodeList *out) {
    JToken *toks;
    size_t ntoks;
    if (jinja_lex(a, src, len, &toks, &ntoks) != 0) return -1;
    return jinja_parse(a, toks, ntoks, out);
}
