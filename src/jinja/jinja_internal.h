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
    JFrame *scope;      /* JF_MACRO: the frame its body sees (a call block's caller: where the
                           block is); NULL: the template's top level */
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
    N_GENERATION,  /* body */
    N_CALLBLOCK,   /* {% call(params) f(args) %}body{% endcall %}: a the N_CALL, b the caller
                      (an N_MACRO named "caller": params, defaults, body) */
    N_UNSUPPORTED, /* a tag jinja2 has and this renderer does not: name; fails when executed */
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
    JNode *star, *dstar; /* calls, filters, tests: f(*star, **dstar), or NULL */
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
/* Evaluates N_CALL node n, with `caller` (NULL: none) passed as caller= (a call block). */
JValue *jinja_eval_call(JCtx *ctx, JFrame *frame, const JNode *n, JValue *caller);
/* Applies a filter chain whose innermost input is NULL (a filter block: N_SETBLOCK's c) to v.
 * Returns the result, or NULL with "line N: ..." set. */
JValue *jinja_apply_filter_chain(JCtx *ctx, JFrame *frame, const JNode *chain, JValue *v);
/* A variable by name: the innermost frame that has it, then the render variables, then the
 * globals jinja2 defines; an undefined value (never NULL) when none has it. */
JValue *jinja_lookup(JCtx *ctx, JFrame *frame, JStr name);
/* One comparison of an N_COMPARE chain (op: a JCmp), Python's rules: sets *res and returns 0,
 * or returns -1 with "line N: ..." set (unorderable types, an undefined operand). */
int jinja_compare(JCtx *ctx, int op, JValue *a, JValue *b, int line, bool *res);

/* Errors with the template line; return NULL / -1 for `return` convenience. */
JValue *jinja_fail(int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* An operation on an undefined value: the message jinja2 gives, with the line. */
JValue *jinja_fail_undefined(int line, const JValue *undef);

/* A call's arguments, evaluated: positional, then keyword. */
typedef struct {
    JValue **args;
    size_t nargs;
    JStr *kwnames;
    JValue **kwvals;
    size_t nkw;
} JArgs;

/* ---------------------------------------------------------------- operators (operators.c) */

/* Python arithmetic: op is OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD or OP_POW.
 * Returns the result, or NULL with "line N: ..." set (type errors, division by zero, int
 * overflow, which Python would not have but a C int64 does). */
JValue *jinja_binop(JCtx *ctx, int op, JValue *a, JValue *b, int line);
/* Python `item in container`. Returns 0, or -1 (error set). */
int jinja_contains(JCtx *ctx, JValue *container, JValue *item, int line, bool *res);
/* Python len(v) as an int value (an undefined value has length 0, as in jinja2), or NULL
 * with "line N: ..." set for a value without a length. */
JValue *jinja_len(JCtx *ctx, JValue *v, int line);

/* ---------------------------------------------------------------- calls (args.c, globals.c) */

/* Binds args to the n parameter names (positional order) of `what` (the callee, as errors
 * name it); out[i] is NULL when parameter i was not given (out may be NULL when n is 0). Returns 0,
 * or -1 with "line N: ..." set for too many, unknown or repeated arguments, Python's wording. */
int jinja_bind_args(const JArgs *a, const char *what, const char *const *names, size_t n,
                    JValue **out, int line);
bool jinja_arg_bool(const JValue *v, bool def); /* truthiness; def when not given */
/* An int (or bool) argument; def when not given or None. Returns 0, or -1 with "line N: ..."
 * set for another type. */
int jinja_arg_int(const JValue *v, int64_t def, int64_t *out, const char *what, int line);
/* v itself when a string, else NULL with "line N: ..." set. */
JValue *jinja_str_arg(const JValue *v, const char *what, int line);
/* Whether name is in the NULL-terminated list. */
bool jinja_name_in(const char *const *names, const char *name);
/* Iterates a value the way Python's iter() does (list items, dict keys, string characters,
 * undefined -> nothing; an iterator is used up). *items may point into v or be new in the
 * arena; the caller must not change it. Returns -1 (error set) for non-iterables. */
int jinja_iterate(JCtx *ctx, JValue *v, JValue ***items, size_t *n, int line);
/* Calls fn (a global, a macro or a bound method). Returns the result, or NULL with
 * "line N: ..." set (fn not callable, or the call failed). */
JValue *jinja_call(JCtx *ctx, JFrame *frame, JValue *fn, const JArgs *args, int line);
/* Looks a name up among the globals jinja2 and transformers define; NULL if none. */
JValue *jinja_global(JCtx *ctx, const char *name);
/* Calls a macro (exec.c): its body rendered in a frame of its own, as a string value. */
JValue *jinja_call_macro(JCtx *ctx, const JFunc *fn, const JArgs *args, int line);

/* ---------------------------------------------------------------- lookup (attr.c, methods.c) */

/* Attribute lookup the way the sandbox does it (obj.name): a loop's attributes, then methods,
 * then a namespace's or dict's items; undefined (never NULL) when missing. */
JValue *jinja_getattr(JCtx *ctx, JValue *obj, const char *name, size_t n);
/* obj[key]: items first, then for a string key the attribute; undefined when missing. */
JValue *jinja_getitem(JCtx *ctx, JValue *obj, JValue *key, int line);
/* What obj.name is other than a dict item (a loop attribute, a method, a namespace
 * attribute), or NULL: the part of lookup that getattr, getitem and the attr filter share. */
JValue *jinja_attribute(JCtx *ctx, JValue *obj, const char *name, size_t n);

/* Whether obj has a method of that name, and whether a sandboxed template may call it. */
typedef enum { JM_NONE, JM_OK, JM_UNSUPPORTED, JM_UNSAFE } JMethodKind;
JMethodKind jinja_method_kind(const JValue *obj, const char *name);
/* The method as a value bound to obj (kind != JM_NONE): unsupported ones resolve, so that
 * calling them can say so; an unsafe one is undefined with the sandbox's message. */
JValue *jinja_method_value(JCtx *ctx, JValue *obj, const char *name, JMethodKind kind);
/* Calls a bound method (JF_METHOD). Returns the result, or NULL with "line N: ..." set. */
JValue *jinja_call_method(JCtx *ctx, JFunc *fn, const JArgs *args, int line);

/* ---------------------------------------------------------------- filters and tests */

/* Filter and test ids are rows of their tables (filters.c, tests.c), resolved at parse time so
 * that an unknown name is a compile-time error, as in jinja2. */
int jinja_filter_id(const char *name); /* -1 unknown; -2 a jinja2 filter not supported */
/* The filter's id, or -1 with "line N: ..." set: "No filter named 'x'." or that it is not
 * supported, jinja2's wording. */
int jinja_filter_resolve(const char *name, int line);
int jinja_test_id(const char *name); /* -1 unknown */
/* Whether a filter or test goes through the items of a list or dict it is applied to (not
 * so for length, first, defined, ...): what its subject costs in work (jinja_charge). */
bool jinja_filter_walks_items(int id);
bool jinja_test_walks_items(int id);
/* Applies filter `id` to v. Returns the result, or NULL with "line N: ..." set. */
JValue *jinja_apply_filter(JCtx *ctx, int id, JValue *v, const JArgs *args, int line);
/* Applies test `id` to v, setting *res. Returns 0, or -1 with "line N: ..." set. */
int jinja_apply_test(JCtx *ctx, int id, JValue *v, const JArgs *args, int line, bool *res);
/* The test named by a value (select/reject's argument), applied to v with positional args;
 * an unknown name fails here, at render time, as in jinja2. */
int jinja_test_by_name(JCtx *ctx, JValue *name, JValue *v, JValue **args, size_t nargs, int line,
                       bool *res);

/* ---------------------------------------------------------------- Python str (pystr*.c) */

/* Every pystr_ function returns a new value in ctx->arena (the input may be returned as it
 * is) and never modifies its input; those that take a line fail with "line N: ..." set. */
typedef enum { PYSTR_LOWER, PYSTR_UPPER, PYSTR_TITLE } PyStrCase;
/* Appends cp mapped to the case (ß upper-cases to SS, title-cases to Ss, as in Python). */
void pystr_put_case(JBuf *b, int32_t cp, PyStrCase op);
JValue *pystr_case(JCtx *ctx, JStr s, PyStrCase op); /* str.lower() / str.upper() */
JValue *pystr_capitalize(JCtx *ctx, JStr s);         /* str.capitalize() */
bool pystr_is_alnum(int32_t cp);                     /* str.isalnum() for one character */
bool pystr_is_case(JStr s, bool upper);              /* str.isupper() / str.islower() */
/* The str methods of no argument that map case or test character classes (upper, lower,
 * casefold, title, capitalize, swapcase, isdigit, ..., istitle); NULL for another name. */
JValue *pystr_case_method(JCtx *ctx, JStr s, const char *name);
/* str.strip/lstrip/rstrip with optional chars (NULL: whitespace). */
JValue *pystr_strip(JCtx *ctx, JStr s, const JStr *chars, bool left, bool right);
/* pystr_strip with its argument as a call passes it: `chars` (a string; absent or None:
 * whitespace), bound in the name of `what` (str.strip(), filter 'trim'). */
JValue *pystr_strip_call(JCtx *ctx, JStr s, const JArgs *args, const char *what, bool left,
                         bool right, int line);
/* str.replace(old, new, count); count < 0: all. */
JValue *pystr_replace(JCtx *ctx, JStr s, JStr old, JStr new_, int64_t count);
/* str.splitlines(): *out (in the arena) gets *count slices of s. Returns 0, or -1 once the
 * render's work allowance is spent. */
int pystr_splitlines(JCtx *ctx, JStr s, JStr **out, size_t *count, int line);
/* Calls the str method `name` (one jinja_method_kind lets through) on self. */
JValue *pystr_call_method(JCtx *ctx, JValue *self, const char *name, const JArgs *args, int line);
/* Python int(s, base) and float(s) for a string; false where Python would raise. */
bool pystr_to_int(JStr s, int64_t base, int64_t *out);
bool pystr_to_float(JStr s, double *out);
/* Python's printf-style `fmt % args`: args is a tuple of positional values, a dict for
 * %(name)s, or any single value. */
JValue *pystr_printf(JCtx *ctx, JStr fmt, JValue *args, int line);

#endif
