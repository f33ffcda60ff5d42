/* What the parser's files (parser.c: tokens and statements; parser_expr.c: operators by
 * precedence; parser_primary.c: primaries, postfix, filters and tests) share, and nothing
 * else includes. Every jp_ function that fails sets "line N: ..." and returns -1 or NULL; a
 * node made before a failure stays in the arena, freed with the template. */
#ifndef RLHF_JINJA_PARSER_H
#define RLHF_JINJA_PARSER_H

#include "jinja/jinja_internal.h"

#define MAX_EXPR_DEPTH 200

typedef struct {
    JArena *arena;
    const JToken *t;
    size_t n, pos;
    int loop_depth; /* for break/continue outside loops */
    const char *tag_stack[64];
    int ntags;
    int depth; /* expression nesting, bounded so that hostile input cannot exhaust the stack */
} JParser;

/* A growable node list built in the arena. */
typedef struct {
    JNode **v;
    size_t n, cap;
} JNodeVec;

/* Sets "line N: <message>" and returns -1. */
int jp_fail(int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const JToken *jp_cur(const JParser *p);
const JToken *jp_peek(const JParser *p, size_t k); /* k tokens ahead, at most the EOF token */
void jp_advance(JParser *p);                       /* stays on the EOF token */
bool jp_is_op(const JToken *t, JOp op);
bool jp_is_name(const JToken *t, const char *name);
/* How jinja2 names a token in errors; may write into buf. */
const char *jp_describe(const JToken *t, char *buf, size_t cap);
int jp_unexpected(JParser *p); /* "unexpected '<token>'" */
/* Consume the expected token, else fail with jinja2's "expected ..., got ..." wording. */
int jp_expect_op(JParser *p, JOp op);
int jp_expect_kind(JParser *p, JTokKind kind, const char *what);
JNode *jp_node(JParser *p, JNodeKind kind, int line); /* zeroed, in the arena */
void jp_vec_push(JParser *p, JNodeVec *v, JNode *x);
JNodeList jp_vec_list(const JNodeVec *v);

/* An expression; with_condexpr: `a if b else c` allowed at the top. */
JNode *jp_parse_expression(JParser *p, bool with_condexpr);
/* Comma-separated expressions up to the end of the tag, `)` or the name extra_end: one
 * expression as it is, several (or none, with explicit_parens) as an N_TUPLE. */
JNode *jp_parse_tuple(JParser *p, bool with_condexpr, const char *extra_end, bool explicit_parens);
/* Whether the current token ends a tuple (see jp_parse_tuple). */
bool jp_is_tuple_end(const JParser *p, const char *extra_end);
/* A unary expression; with_filter: `|` filters and `is` tests apply to it. */
JNode *jp_parse_unary(JParser *p, bool with_filter);
/* The `| name(args)` chain applied to n (NULL for a filter block's innermost input);
 * start_inline: the first filter name comes with no `|` before it, as in a filter block. */
JNode *jp_parse_filter(JParser *p, JNode *n, bool start_inline);

#endif
