/* The Jinja2 interpreter: what the chat-template layer (src/chat) and the rest of the tree use.
 *
 * A template is compiled once (jinja_compile: lexer.c, then the parser*.c files build
 * an AST) and rendered any number of times (jinja_exec: exec.c runs statements, eval.c
 * evaluates expressions) over a small Python-like value type (value.c, value_text.c). The
 * builtins (filters*.c, tests.c, methods.c, globals.c, attr.c) and Python str semantics
 * (pystr*.c) are private to the engine: see jinja_internal.h.
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
#ifndef RLHF_JINJA_JINJA_H
#define RLHF_JINJA_JINJA_H

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
/* Frees every block at once: everything allocated in the arena, values and strings
 * included, is gone, and nothing may point into it any more. */
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

/* Appends never fail: growth comes from the arena, and past its cap a write is dropped
 * (the render then fails at its next step, see JArena). */
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
    JV_ITER,   /* a one-pass Python iterator (generator, reversed()): u.list holds what is left */
    JV_BIGINT, /* a Python int outside int64: u.s is its decimal text (bigint.c) */
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

/* A function value (global, macro or bound method) and a for loop's `loop`: defined in
 * jinja_internal.h, as only the engine looks inside them. */
typedef struct JFunc JFunc;
typedef struct JLoop JLoop;

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
JValue *jv_str(JArena *a, const char *s, size_t n);            /* copies */
JValue *jv_str_ref(JArena *a, JStr s);                         /* does not copy */
JValue *jv_cstr(JArena *a, const char *s);                     /* copies */
JValue *jv_list(JArena *a, size_t n, bool is_tuple);           /* n NULL slots to fill */
JValue *jv_list_of(JArena *a, JValue *const *items, size_t n); /* a list of the items */
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

/* A JSON value as the Python json module reads it; a bignum (json_util.h) becomes a big int or
 * a float (inf past the double range). */
JValue *jv_from_json(JArena *a, const json_t *j);

/* Python ints beyond int64 (bigint.c). int(s) for a decimal string (surrounding whitespace and
 * a sign allowed): a JV_INT when it fits, else a JV_BIGINT; NULL when s is not one. */
JValue *jv_int_from_text(JArena *a, const char *s, size_t n);
/* int(f): the exact integer, JV_INT or JV_BIGINT; NULL for inf and nan. */
JValue *jv_int_from_double(JArena *a, double f);
/* For JV_INT, JV_BOOL or JV_BIGINT values: -1, 0 or 1 as x <, ==, > y. */
int jv_int_compare(const JValue *x, const JValue *y);
double jv_bigint_double(const JValue *v); /* the nearest double (+-inf past the range) */

bool jv_truthy(const JValue *v);
bool jv_is_number(const JValue *v); /* int, float or bool (Python bool is an int) */
int64_t jv_as_int(const JValue *v); /* an int or a bool (Python bool is an int) */
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

/* ---------------------------------------------------------------- templates */

/* A template's statements: AST nodes (JNode, jinja_internal.h) in the template's arena. */
typedef struct {
    JNode **v;
    size_t n;
} JNodeList;

/* Compiles template source into its statement list; every node is allocated in `a`, which
 * the caller frees (ja_free) when done with the template. Returns 0, or -1 with "line N: ..."
 * set (a syntax error, or an unknown filter, test or tag, as jinja2 reports at compile time);
 * on error what was allocated in `a` is still the caller's to free. */
int jinja_compile(JArena *a, const char *src, size_t len, JNodeList *out);

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

/* Sets the memory cap's error ("line N: " first when line > 0) and returns -1. */
int jinja_fail_memory(int line);

/* Renders a compiled statement list into ctx->out, spending ctx->work_left (a whole render
 * starts from JINJA_WORK_LIMIT) under the memory cap of ctx->arena->limit; every value made
 * belongs to ctx->arena. Returns 0, or -1 with "line N: ..." set; what was written before the
 * error stays in ctx->out. */
int jinja_exec(JCtx *ctx, JFrame *frame, const JNodeList *body);

#endif
