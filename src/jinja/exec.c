/* Statements: output, if, for, set, macros and {% generation %} spans.
 *
 * Scoping, as jinja2 compiles it (checked against jinja2 3.1):
 *  1. `set` at the top level writes the template frame; it shadows render variables.
 *  2. Every iteration of a for loop runs in a fresh frame whose parent is the frame
 *     around the loop, so a `set` in the body lasts until the end of that iteration only
 *     (hence namespace() in real templates). The loop target and `loop` live there too.
 *  3. `if` opens no frame.
 *  4. A macro body runs in a fresh frame whose parent is the template frame, not the
 *     caller's frame: a macro sees its arguments and top-level variables as they are at
 *     call time.
 * Output goes to ctx->out; macros and block sets swap in their own buffer. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <string.h>

enum { EXEC_OK = 0, EXEC_ERROR = -1, EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

#define MAX_MACRO_DEPTH 64

static JFrame *new_frame(JCtx *c, JFrame *parent) {
    JFrame *f = ja_alloc(c->arena, sizeof *f);
    f->parent = parent;
    return f;
}

/* ---------------------------------------------------------------- assignment */

static int assign(JCtx *c, JFrame *f, const JNode *target, JValue *v, int line) {
    if (target->kind == N_NAME) {
        jv_dict_set(c->arena, &f->vars, target->name, v);
        return 0;
    }
    if (target->kind == N_NSREF) {
        JValue *ns = jinja_lookup(c, f, target->name);
        if (ns->kind != JV_NAMESPACE) {
            jinja_fail(line, "cannot assign attribute on non-namespace object");
            return -1;
        }
        if (target->attr.n && target->attr.s[0] == '_') {
            jinja_fail(line,
                       "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                       "but got '%s'. Please rename the attribute.",
                       target->attr.s);
            return -1;
        }
        jv_dict_set(c->arena, ns->u.dict, target->attr, v);
        return 0;
    }
    /* Tuple unpacking, as Python does it for any iterable. */
    JValue **items;
    size_t n;
    if (v->kind == JV_UNDEFINED) {
        jinja_fail_undefined(line, v);
        return -1;
    }
    if (jinja_iterate(c, v, &items, &n, line) != 0) return -1;
    size_t want = target->items.n;
    if (n < want) {
        jinja_fail(line, "not enough values to unpack (expected %zu, got %zu)", want, n);
        return -1;
    }
    if (n > want) {
        jinja_fail(line, "too many values to unpack (expected %zu)", want);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (assign(c, f, target->items.v[i], items[i], line) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- statements */

static int exec_capture(JCtx *c, JFrame *f, const JNodeList *body, JStr *out) {
    JBuf buf, *saved = c->out;
    bool saved_capturing = c->capturing;
    jb_init(&buf, c->arena);
    c->out = &buf;
    c->capturing = true;
    int rc = jinja_exec(c, f, body);
    c->out = saved;
    c->capturing = saved_capturing;
    if (rc == EXEC_ERROR) return -1;
    *out = jb_str(&buf);
    return 0;
}

static int exec_for(JCtx *c, JFrame *f, const JNode *n) {
    JValue *seq = jinja_eval(c, f, n->b);
    if (!seq || jinja_charge_values(c, &seq, 1, n->line) != 0) return EXEC_ERROR;
    JValue **items;
    size_t count;
    if (jinja_iterate(c, seq, &items, &count, n->line) != 0) return EXEC_ERROR;
    if (n->c) {
        /* The loop filter runs before the body, on every item (see design notes). */
        JValue **kept = ja_alloc(c->arena, (count ? count : 1) * sizeof *kept);
        size_t nkept = 0;
        for (size_t i = 0; i < count; i++) {
            JFrame *tf = new_frame(c, f);
            if (assign(c, tf, n->a, items[i], n->line) != 0) return EXEC_ERROR;
            JValue *t = jinja_eval(c, tf, n->c);
            if (!t) return EXEC_ERROR;
            if (jv_truthy(t)) kept[nkept++] = items[i];
        }
        items = kept;
        count = nkept;
    }
    if (count == 0) return jinja_exec(c, f, &n->orelse);
    JLoop *loop = ja_alloc(c->arena, sizeof *loop);
    loop->length = (int64_t)count;
    loop->items = items;
    loop->depth = 1; /* jinja2 counts depth only for recursive loops */
    JValue *loop_value = ja_alloc(c->arena, sizeof *loop_value);
    loop_value->kind = JV_LOOP;
    loop_value->u.loop = loop;
    static const JStr loop_name = {"loop", 4};
    int rc = EXEC_OK;
    for (size_t i = 0; i < count; i++) {
        if (jinja_charge(c, 1, n->line) != 0) return EXEC_ERROR;
        loop->index0 = (int64_t)i;
        JFrame *it = new_frame(c, f);
        if (assign(c, it, n->a, items[i], n->line) != 0) {
            rc = EXEC_ERROR;
            break;
        }
        jv_dict_set(c->arena, &it->vars, loop_name, loop_value);
        rc = jinja_exec(c, it, &n->body);
        if (rc == EXEC_ERROR) break;
        if (rc == EXEC_BREAK) {
            rc = EXEC_OK;
            break;
        }
        rc = EXEC_OK;
    }
    return rc;
}

static int exec_node(JCtx *c, JFrame *f, const JNode *n) {
    if (jinja_charge(c, 1, n->line) != 0) return EXEC_ERROR;
    switch (n->kind) {
    case N_DATA:
        jb_put(c->out, n->name.s, n->name.n);
        return EXEC_OK;
    case N_OUTPUT: {
        /* {{ a }}, or {% print a, b %} with the expressions in items. */
        size_t count = n->a ? 1 : n->items.n;
        for (size_t i = 0; i < count; i++) {
            JValue *v = jinja_eval(c, f, n->a ? n->a : n->items.v[i]);
            if (!v || jinja_charge_values(c, &v, 1, n->line) != 0) return EXEC_ERROR;
            if (jv_to_str(c->out, v) != 0) {
                jinja_fail(n->line, "%s", err_msg());
                return EXEC_ERROR;
            }
        }
        return EXEC_OK;
    }
    case N_IF: {
        JValue *t = jinja_eval(c, f, n->a);
        if (!t) return EXEC_ERROR;
        return jinja_exec(c, f, jv_truthy(t) ? &n->body : &n->orelse);
    }
    case N_FOR:
        return exec_for(c, f, n);
    case N_SET: {
        JValue *v = jinja_eval(c, f, n->b);
        if (!v) return EXEC_ERROR;
        return assign(c, f, n->a, v, n->line) != 0 ? EXEC_ERROR : EXEC_OK;
    }
    case N_SETBLOCK: {
        JStr s;
        if (exec_capture(c, f, &n->body, &s) != 0) return EXEC_ERROR;
        JValue *v = jinja_apply_filter_chain(c, f, n->c, jv_str_ref(c->arena, s));
        if (!v) return EXEC_ERROR;
        return assign(c, f, n->a, v, n->line) != 0 ? EXEC_ERROR : EXEC_OK;
    }
    case N_MACRO: {
        JValue *v = ja_alloc(c->arena, sizeof *v);
        v->kind = JV_FUNC;
        v->u.fn = ja_alloc(c->arena, sizeof(JFunc));
        v->u.fn->kind = JF_MACRO;
        v->u.fn->name = n->name.s;
        v->u.fn->macro = n;
        jv_dict_set(c->arena, &f->vars, n->name, v);
        return EXEC_OK;
    }
    case N_CALLBLOCK: {
        JValue *caller = ja_alloc(c->arena, sizeof *caller);
        caller->kind = JV_FUNC;
        caller->u.fn = ja_alloc(c->arena, sizeof(JFunc));
        caller->u.fn->kind = JF_MACRO;
        caller->u.fn->name = "caller";
        caller->u.fn->macro = n->b;
        caller->u.fn->scope = f; /* the body sees the variables where the block is */
        JValue *v = jinja_eval_call(c, f, n->a, caller);
        if (!v || jv_to_str(c->out, v) != 0) return EXEC_ERROR;
        return EXEC_OK;
    }
    case N_UNSUPPORTED:
        jinja_fail(n->line, "the '{%% %s %%}' tag is not supported by this renderer", n->name.s);
        return EXEC_ERROR;
    case N_BREAK:
        return EXEC_BREAK;
    case N_CONTINUE:
        return EXEC_CONTINUE;
    case N_GENERATION: {
        size_t start = c->out->len;
        int rc = jinja_exec(c, f, &n->body);
        if (rc == EXEC_ERROR) return rc;
        if (!c->capturing) {
            if (c->nspans == c->capspans) {
                size_t cap = c->capspans ? c->capspans * 2 : 8;
                JSpan *spans = ja_alloc(c->arena, cap * sizeof *spans);
                if (c->nspans) memcpy(spans, c->spans, c->nspans * sizeof *spans);
                c->spans = spans;
                c->capspans = cap;
            }
            c->spans[c->nspans++] = (JSpan){start, c->out->len};
        }
        return rc;
    }
    default:
        jinja_fail(n->line, "internal error: unexpected node in statement list");
        return EXEC_ERROR;
    }
}

int jinja_exec(JCtx *c, JFrame *f, const JNodeList *body) {
    for (size_t i = 0; i < body->n; i++) {
        int rc = exec_node(c, f, body->v[i]);
        if (rc != EXEC_OK) return rc;
    }
    return EXEC_OK;
}

/* ---------------------------------------------------------------- macros */

JValue *jinja_call_macro(JCtx *c, const JFunc *fn, const JArgs *args, int line) {
    const JNode *m = fn->macro;
    if (c->depth >= MAX_MACRO_DEPTH)
        return jinja_fail(line, "macro '%s': calls nested deeper than %d", fn->name,
                          MAX_MACRO_DEPTH);
    JFrame *f = new_frame(c, fn->scope ? fn->scope : c->root);
    size_t nparams = m->items.n, ndefaults = m->kwvals.n;
    bool *given = ja_alloc(c->arena, (nparams ? nparams : 1) * sizeof *given);
    for (size_t i = 0; i < args->nargs && i < nparams; i++) {
        jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, args->args[i]);
        given[i] = true;
    }
    size_t nextra = args->nargs > nparams ? args->nargs - nparams : 0;
    JValue *varargs = jv_list(c->arena, nextra, true);
    for (size_t i = 0; i < nextra; i++)
        varargs->u.list.items[i] = args->args[nparams + i];
    JValue *kwargs = jv_dict(c->arena);
    for (size_t k = 0; k < args->nkw; k++) {
        size_t i;
        for (i = 0; i < nparams; i++)
            if (m->items.v[i]->name.n == args->kwnames[k].n &&
                memcmp(m->items.v[i]->name.s, args->kwnames[k].s, args->kwnames[k].n) == 0)
                break;
        static const JStr caller_name = {"caller", 6};
        if (i == nparams && args->kwnames[k].n == 6 && !memcmp(args->kwnames[k].s, "caller", 6)) {
            /* a call block's body: the macro sees it as `caller` (jinja2: an implicit
             * parameter of every macro that uses caller()) */
            jv_dict_set(c->arena, &f->vars, caller_name, args->kwvals[k]);
        } else if (i < nparams) {
            if (given[i])
                return jinja_fail(line, "macro '%s' got multiple values for argument '%s'",
                                  fn->name, args->kwnames[k].s);
            jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, args->kwvals[k]);
            given[i] = true;
        } else {
            jv_dict_set(c->arena, kwargs->u.dict, args->kwnames[k], args->kwvals[k]);
        }
    }
    for (size_t i = 0; i < nparams; i++) {
        if (given[i]) continue;
        JValue *v;
        if (i >= nparams - ndefaults) {
            v = jinja_eval(c, f, m->kwvals.v[i - (nparams - ndefaults)]);
            if (!v) return NULL;
        } else {
            v = jv_undefined(c->arena, "parameter '%s' was not provided", m->items.v[i]->name.s);
        }
        jv_dict_set(c->arena, &f->vars, m->items.v[i]->name, v);
    }
    static const JStr varargs_name = {"varargs", 7}, kwargs_name = {"kwargs", 6};
    jv_dict_set(c->arena, &f->vars, varargs_name, varargs);
    jv_dict_set(c->arena, &f->vars, kwargs_name, kwargs);
    c->depth++;
    JStr out;
    int rc = exec_capture(c, f, &m->body, &out);
    c->depth--;
    if (rc != 0) return NULL;
    return jv_str_ref(c->arena, out);
}
