/* What the files of the Jinja engine share and nothing outside src/jinja uses: tokens, the
 * AST, the render's work allowance, and the builtins' entry points. The public side is
 * jinja.h, included here. */
#ifndef RLHF_JINJA_JINJA_INTERNAL_H
#define RLHF_JINJA_JINJA_INTERNAL_H

#include "jinja/jinja.h"

/* ---------------------------------------------------------------- function and loop values */

typedef enum {
    JF_GLOBAL, /* range, namespace, dict, raise_exception, strftime_now, ... */
    JF_MACRO,
    JF_METHOD, /* a method bound to `self` */
} JFuncKind;

struct JFunc {
    JFuncKind kind;
    const char *name;
    JValue *self;       /* JF_METHOD */
    const JNode *macro; /* JF_MACRO */
};

struct JLoop {
    int64_t index0, length;
    JValue **items; /* the (filtered) sequence, for previtem/nextitem */
    int depth;
};

/* ---------------------------------------------------------------- lexer */

typedef enum {
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
    JT_EOF,
} JTokKind;

/* Operators; the two-character ones first. */
typedef enum {
    OP_FLOORDIV, /* // */
    OP_POW,      /* ** */
    OP_EQ,       /* == */
    OP_NE,       /* != */
    OP_GE,       /* >= */
    OP_LE,       /* <= */
    OP_ADD,
    OP_SUB,
    OP_DIV,
    OP_MUL,
    OP_MOD,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_GT,
    OP_LT,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
    OP_COUNT_
} JOp;

extern const char *const jop_text[OP_COUNT_];

typedef struct {
    JTokKind kind;
    int line;
    JOp op;    /* JT_OP */
    JStr text; /* JT_DATA, JT_NAME, JT_STRING (unescaped) */
    int64_t i; /* JT_INT */
    double f;  /* JT_FLOAT */
} JToken;

/* Tokenizes the whole template. Returns 0, or -1 with "line N: ..." set. */
int jinja_lex(JArena *a, const char *src, size_t len, JToken **toks, size_t *ntoks);

/* ---------------------------------------------------------------- AST */

typedef enum {
    /* expressions */
    N_CONST,   /* value */
    N_NAME,    /* name */
    N_GETATTR, /* a.name */
    N_GETITEM, /* a[b] */
    N_SLICE,   /* a, b, c: start, stop, step (each may be NULL); only inside N_GETITEM */
    N_CALL,    /* a(args, kw) */
    N_FILTER,  /* a | name(args, kw); a NULL in a filter block */
    N_TEST,    /* a is name(args, kw) */
    N_NOT,
    N_NEG,
    N_POS,
    N_BINOP, /* op: OP_ADD ... plus N_AND/N_OR below */
    N_AND,
    N_OR,
    N_CONCAT,   /* items */
    N_COMPARE,  /* a, then items[i] compared with cmp_ops[i] */
    N_CONDEXPR, /* b if a else c (c may be NULL) */
    N_LIST,
    N_TUPLE,
    N_DICT,  /* items = k0, v0, k1, v1, ... */
    N_NSREF, /* name.attr as an assignment target */
    /* statements */
    N_DATA,     /* name = the text */
    N_OUTPUT,   /* {{ a }} */
    N_IF,       /* a: test, body, orelse */
    N_FOR,      /* a: target, b: iterable, c: filter (or NULL), body, orelse */
    N_SET,      /* a: target, b: value */
    N_SETBLOCK, /* a: target, c: filter chain (N_FILTER with a NULL innermost) or NULL, body */
    N_MACRO,    /* name, params (items: N_NAME), defaults (kwvals, aligned to the last params) */
    N_BREAK,
    N_CONTINUE,
    N_GENERATION, /* body */
} JNodeKind;

/* Comparison operators in N_COMPARE. */
typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } JCmp;

struct JNode {
    JNodeKind kind;
    int line;
    int op;        /* N_BINOP: JOp; filters/tests: builtin id */
    JStr name;     /* N_NAME, N_GETATTR, N_FILTER, N_TEST, N_DATA, N_NSREF (ns name), N_MACRO */
    JStr attr;     /* N_NSREF */
    JValue *value; /* N_CONST */
    JNode *a, *b, *c;
    JNodeList items; /* args, list elements, compare operands */
    int *cmp_ops;
    JStr *kwnames;
    JNodeList kwvals;
    JNodeList body, orelse;
};

/* Parses tokens into the statement list of a template. Returns 0, or -1 with
 * "line N: ..." set. */
int jinja_parse(JArena *a, const JToken *toks, size_t ntoks, JNodeList *out);

/* ---------------------------------------------------------------- render limits */

/* Spends `units` of the render's work (1 per node and per loop turn, plus the size of every
 * value a builtin or operator works through, see jinja_value_work) and checks the memory cap.
 * Returns 0, or -1 with "line N: ..." set once either limit is passed. */
int jinja_charge(JCtx *ctx, uint64_t units, int line);
/* What working through all of `v` costs: 1, plus a string's bytes / 32, plus for a list or
 * dict its length and the work of every item, so that a list holding the same big list a
 * million times costs what printing or comparing it would. Values nested deeper than
 * JINJA_MAX_NESTING cost more than any allowance. Lists and dicts, which do not change once
 * built, remember theirs. */
uint64_t jinja_value_work(JValue *v);
/* jinja_charge of the work of n values (jinja_value_work of each) an operator or builtin is
 * about to go through. Returns 0, or -1 with "line N: ..." set. */
int jinja_charge_values(JCtx *ctx, JValue *const *values, size_t n, int line);
#define JINJA_MAX_NESTING 1000

/* ---------------------------------------------------------------- evaluation */

/* Evaluates an expression node. Returns the value (in ctx->arena), or NULL with
 * "line N: ..." set. */
JValue *jinja_eval(JCtx *ctx, JFrame *frame, const JNode *n);
/* Applies a filter chain whose innermost input is NULL (a filter block: N_SETBLOCK's c) to v.
 * Returns the result, or NULL with "line N: ..." set. */
JValue *jinja_apply_filter_chain(JCtx *ctx, JFrame *frame, const JNode *chain, JValue *v);
/* A variable by name: the innermost frame that has it, then the render variables, then the
 * globals jinja2 defines; an undefined value (never NULL) when none has it. */
JValue *jinja_lookup(JCtx *ctx, JFrame *frame, JStr name);
/* One comparison of an N_COMPARE chain (op: a JCmp), Python's rules: sets *res and returns 0,
 * or returns -1 with "line N: ..." set (unorderable types, an undefined operand). */
int jinja_compare(JCtx *ctx, int op, JValue *a, JValue *b, int line, bool *res);

/* Builtins (jinja_builtins.c). Ids are resolved at parse time so that an unknown name is
 * a compile-time error, as in jinja2. */
int jinja_filter_id(const char *name); /* -1 unknown; -2 a jinja2 filter not supported */
int jinja_test_id(const char *name);   /* same convention */
/* Whether a filter or test goes through the items of a list or dict it is applied to (not
 * so for length, first, defined, ...): what its subject costs in work (jinja_charge). */
bool jinja_filter_walks_items(int id);
bool jinja_test_walks_items(int id);
const char *jinja_filter_name(int id);
const char *jinja_test_name(int id);

typedef struct {
    JValue **args;
    size_t nargs;
    JStr *kwnames;
    JValue **kwvals;
    size_t nkw;
} JArgs;

JValue *jinja_apply_filter(JCtx *ctx, JFrame *frame, int id, JValue *v, const JArgs *args,
                           int line);
int jinja_apply_test(JCtx *ctx, int id, JValue *v, const JArgs *args, int line, bool *res);
/* Attribute lookup the way the sandbox does it: methods first, then items. */
JValue *jinja_getattr(JCtx *ctx, JValue *obj, const char *name, size_t n);
JValue *jinja_getitem(JCtx *ctx, JValue *obj, JValue *key, int line);
JValue *jinja_call(JCtx *ctx, JFrame *frame, JValue *fn, const JArgs *args, int line);
/* Looks a name up among the globals jinja2 and transformers define; NULL if none. */
JValue *jinja_global(JCtx *ctx, const char *name);
/* Iterates a value the way Python's iter() does (list items, dict keys, string
 * characters, undefined -> nothing). Returns -1 (error set) for non-iterables. */
int jinja_iterate(JCtx *ctx, JValue *v, JValue ***items, size_t *n, int line);
/* Python arithmetic: op is OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD or OP_POW. */
JValue *jinja_binop(JCtx *ctx, int op, JValue *a, JValue *b, int line);
/* Python's printf-style `fmt % args`. */
JValue *jinja_printf(JCtx *ctx, JStr fmt, JValue *args, int line);
/* Python `item in container`. Returns 0, or -1 (error set). */
int jinja_contains(JCtx *ctx, JValue *container, JValue *item, int line, bool *res);
/* Calls a macro (jinja_eval.c). */
JValue *jinja_call_macro(JCtx *ctx, const JFunc *fn, const JArgs *args, int line);

/* Errors with the template line; return NULL / -1 for `return` convenience. */
JValue *jinja_fail(int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* An operation on an undefined value: the message jinja2 gives, with the line. */
JValue *jinja_fail_undefined(int line, const JValue *undef);

#endif
