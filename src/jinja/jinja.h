/* Internal interface of the Jinja2 subset behind chat_template.h.
 *
 * The pipeline is lexer (jinja_lexer.c) -> parser to an AST (jinja_parser.c) ->
 * tree-walking evaluator (jinja_eval.c) over a small Python-like value type
 * (jinja_value.c), with filters, tests, methods and globals in jinja_builtins.c.
 *
 * Memory: every AST node belongs to the template's arena and every value made while
 * rendering belongs to the render's arena; both are freed in one go. Nothing inside is
 * freed piecemeal, which is what lets the evaluator bail out of any error path by
 * returning NULL/-1 without leaking.
 *
 * Semantics follow Python jinja2 3.1 as configured by transformers (trim_blocks,
 * lstrip_blocks, loopcontrols, ImmutableSandboxedEnvironment, default Undefined); where
 * a value behaves like a Python object (str(), repr(), ==, <, in, truthiness) it behaves
 * like the Python object jinja2 would hold. */
#ifndef RLHF_CHAT_JINJA_H
#define RLHF_CHAT_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---------------------------------------------------------------- arena + buffers */

typedef struct JArenaBlock JArenaBlock;
typedef struct {
    JArenaBlock *head;
    /* Bytes handed out so far, and an optional cap (0: none). A render sets one so that a
     * template growing its output without end fails instead of taking all memory: past the
     * cap, buffers stop growing (their writes are dropped) and `over_limit` is set, which the
     * renderer checks at its next step (jinja_charge). */
    size_t used, limit;
    bool over_limit;
} JArena;

void *ja_alloc(JArena *a, size_t n);                 /* zeroed; aborts when memory runs out */
char *ja_memdup(JArena *a, const char *s, size_t n); /* NUL-terminated copy */
void ja_free(JArena *a);

/* A byte string; `s` is NUL-terminated but may contain NULs (JSON "\u0000"). */
typedef struct {
    const char *s;
    size_t n;
} JStr;

/* Growable byte buffer living in an arena. */
typedef struct {
    JArena *arena;
    char *data;
    size_t len, cap;
} JBuf;

void jb_init(JBuf *b, JArena *a);
void jb_put(JBuf *b, const char *s, size_t n);
void jb_puts(JBuf *b, const char *s);
void jb_putc(JBuf *b, char c);
void jb_printf(JBuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
JStr jb_str(JBuf *b); /* NUL-terminates; the buffer may go on growing afterwards */

/* ---------------------------------------------------------------- UTF-8 helpers */

/* Decodes one code point at s[*i] (advancing *i); invalid bytes decode as themselves. */
int32_t ju_decode(const char *s, size_t n, size_t *i);
void ju_encode(JBuf *b, int32_t cp);
size_t ju_length(const char *s, size_t n);     /* number of code points */
bool ju_isspace(int32_t cp);                   /* Python str.isspace() */
size_t ju_rstrip_len(const char *s, size_t n); /* length after Python str.rstrip() */
bool ju_isprintable(int32_t cp);               /* Python str.isprintable() for one char */

/* ---------------------------------------------------------------- values */

typedef enum {
    JV_UNDEFINED,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STRING,
    JV_LIST, /* also tuples (is_tuple) */
    JV_DICT,
    JV_NAMESPACE,
    JV_FUNC,
    JV_LOOP,
    JV_ITER, /* a one-pass Python iterator (generator, reversed()): u.list holds what is left */
} JKind;

/* How a JV_LIST prints and what Python type it stands for. */
typedef enum {
    JVIEW_NONE,   /* list or tuple */
    JVIEW_ITEMS,  /* dict.items() */
    JVIEW_KEYS,   /* dict.keys() */
    JVIEW_VALUES, /* dict.values() */
    JVIEW_RANGE,  /* range(start, stop, step): range[] below */
} JView;

typedef struct JValue JValue;
typedef struct JNode JNode;

typedef struct {
    JStr key;
    JValue *val;
} JPair;

typedef struct {
    JPair *items;
    size_t n, cap;
} JDict;

typedef enum {
    JF_GLOBAL, /* range, namespace, dict, raise_exception, strftime_now, ... */
    JF_MACRO,
    JF_METHOD, /* a method bound to `self` */
} JFuncKind;

typedef struct {
    JFuncKind kind;
    const char *name;
    JValue *self;       /* JF_METHOD */
    const JNode *macro; /* JF_MACRO */
} JFunc;

typedef struct {
    int64_t index0, length;
    JValue **items; /* the (filtered) sequence, for previtem/nextitem */
    int depth;
} JLoop;

struct JValue {
    JKind kind;
    bool is_tuple;          /* JV_LIST */
    uint8_t view;           /* JV_LIST: a JView */
    const char *iter_name;  /* JV_ITER: the Python type ("generator", "list_reverseiterator") */
    const char *iter_error; /* JV_ITER: fails with this when consumed (a lazy jinja2 error) */
    int64_t range[3];       /* JVIEW_RANGE: start, stop, step */
    uint64_t work;          /* JV_LIST, JV_DICT: jinja_value_work once known, else 0 */
    union {
        bool b;
        int64_t i;
        double f;
        JStr s;
        struct {
            JValue **items;
            size_t n;
        } list;
        JDict *dict; /* JV_DICT and JV_NAMESPACE */
        JFunc *fn;
        JLoop *loop;
        const char *undef_msg; /* JV_UNDEFINED: what using it will say */
    } u;
};

extern JValue jv_none_value, jv_true_value, jv_false_value, jv_undefined_value;

JValue *jv_int(JArena *a, int64_t i);
JValue *jv_float(JArena *a, double f);
JValue *jv_bool(bool b);
JValue *jv_str(JArena *a, const char *s, size_t n);  /* copies */
JValue *jv_str_ref(JArena *a, JStr s);               /* does not copy */
JValue *jv_cstr(JArena *a, const char *s);           /* copies */
JValue *jv_list(JArena *a, size_t n, bool is_tuple); /* n NULL slots to fill */
/* A one-pass iterator over items (not copied); iter_name is the Python type name. */
JValue *jv_iter(JArena *a, JValue **items, size_t n, const char *iter_name);
JValue *jv_dict(JArena *a);
JValue *jv_undefined(JArena *a, const char *msg_fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Undefined for a missing attribute/item of obj, with jinja2's wording. */
JValue *jv_undefined_attr(JArena *a, const JValue *obj, const char *attr);
JValue *jv_undefined_item(JArena *a, const JValue *obj, const JValue *key);

JValue *jv_dict_get(const JDict *d, const char *key, size_t n);
void jv_dict_set(JArena *a, JDict *d, JStr key, JValue *val); /* replaces or appends */

JValue *jv_from_json(JArena *a, const json_t *j);

bool jv_truthy(const JValue *v);
bool jv_is_number(const JValue *v); /* int, float or bool (Python bool is an int) */
double jv_as_double(const JValue *v);
const char *jv_type_name(const JValue *v); /* Python type name: "str", "dict", "NoneType" */

/* Python str(v) and repr(v) appended to b. Fail (-1, error set) only on values that
 * have no text form here (functions are printed as placeholders, never fail). */
int jv_to_str(JBuf *b, const JValue *v);
int jv_repr(JBuf *b, const JValue *v);
/* str(v) as a string value (strings are returned as they are). */
JValue *jv_str_of(JArena *a, const JValue *v);
void jv_format_float(JBuf *b, double f); /* Python repr(float) */

/* Python ==. */
bool jv_equal(const JValue *a, const JValue *b);
/* Python <, for ordering: sets *lt. Returns -1 (error set) for unorderable types. */
int jv_less(const JValue *a, const JValue *b, bool *lt);

/* Python json.dumps as transformers' tojson filter calls it. indent: NULL for none,
 * else the string put per level (already expanded from an int). */
typedef struct {
    bool ensure_ascii;
    const char *indent; /* NULL: single line */
    JStr item_sep, key_sep;
    bool sort_keys;
} JJsonOpts;
int jv_to_json(JBuf *b, const JValue *v, const JJsonOpts *o);

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

typedef struct {
    JNode **v;
    size_t n;
} JNodeList;

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

/* ---------------------------------------------------------------- evaluation */

typedef struct JFrame JFrame;
struct JFrame {
    JFrame *parent;
    JDict vars;
};

typedef struct {
    size_t start, end; /* byte offsets in the output */
} JSpan;

typedef struct JCtx {
    JArena *arena;
    JDict *globals;       /* the render variables */
    JFrame *root;         /* template-level `set`s */
    JBuf *out;            /* where output goes now (macros and block sets swap it) */
    const struct tm *now; /* NULL: local time at the call */
    int depth;            /* macro call depth, to refuse runaway recursion */
    JSpan *spans;
    size_t nspans, capspans;
    bool capturing;     /* inside a macro or a block set: no generation spans */
    uint64_t work_left; /* what the render may still spend (jinja_charge) */
} JCtx;

/* Every render gets a fixed allowance of work and memory. Real chat templates spend a few
 * thousand steps per message; these limits stop a template that loops or recurses without
 * end, or that scans or grows huge strings in a long loop, with an error in well under a
 * second instead of hanging a training run. */
#define JINJA_WORK_LIMIT   ((uint64_t)1 << 22)
#define JINJA_MEMORY_LIMIT ((size_t)64 << 20)

/* Spends `units` of the render's work (1 per node and per loop turn, plus the size of every
 * value a builtin or operator works through, see jinja_value_work) and checks the memory cap.
 * Returns 0, or -1 with "line N: ..." set once either limit is passed. */
int jinja_charge(JCtx *ctx, uint64_t units, int line);
/* Sets the memory cap's error ("line N: " first when line > 0) and returns -1. */
int jinja_fail_memory(int line);
/* What working through all of `v` costs: 1, plus a string's bytes / 32, plus for a list or
 * dict its length and the work of every item, so that a list holding the same big list a
 * million times costs what printing or comparing it would. Values nested deeper than
 * JINJA_MAX_NESTING cost more than any allowance. Lists and dicts, which do not change once
 * built, remember theirs. */
uint64_t jinja_value_work(JValue *v);
#define JINJA_MAX_NESTING 1000

/* Renders a statement list into ctx->out. Returns 0, or -1 with "line N: ..." set. */
int jinja_exec(JCtx *ctx, JFrame *frame, const JNodeList *body);
JValue *jinja_eval(JCtx *ctx, JFrame *frame, const JNode *n);

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
