/* The render's allowance of work and memory (JINJA_WORK_LIMIT, JINJA_MEMORY_LIMIT): what
 * stops a template that loops, recurses or grows without end with an error instead of
 * hanging a training run.
 *
 * Invariants of the work count:
 *  1. Every node evaluated and every loop turn costs 1; a builtin or operator also pays for
 *     the values it goes through (jinja_value_work).
 *  2. ctx->work_left only goes down; once a charge does not fit it is 0 and every later
 *     charge of any work fails, so an error cannot be swallowed and the render carried on.
 *  3. Sums are capped at WORK_UNBOUNDED, so adding two of them never wraps. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <inttypes.h>

#define WORK_UNBOUNDED (UINT64_MAX / 4) /* more than any allowance; sums of two can't wrap */

static uint64_t value_work(JValue *v, int depth) {
    JValue **items = NULL;
    size_t n = 0;
    const JDict *d = NULL;
    switch (v->kind) {
    case JV_STRING:
        return 1 + v->u.s.n / 32;
    case JV_LIST:
    case JV_ITER:
        items = v->u.list.items;
        n = v->u.list.n;
        break;
    case JV_DICT:
    case JV_NAMESPACE:
        d = v->u.dict;
        n = d->n;
        break;
    default:
        return 1;
    }
    /* Iterators are used up and namespaces assigned to: only lists and dicts keep a sum. */
    bool fixed = v->kind == JV_LIST || v->kind == JV_DICT;
    if (fixed && v->work) return v->work;
    if (depth >= JINJA_MAX_NESTING) return WORK_UNBOUNDED;
    uint64_t work = 1 + n;
    for (size_t i = 0; i < n && work < WORK_UNBOUNDED; i++)
        work += value_work(d ? d->items[i].val : items[i], depth + 1);
    if (work > WORK_UNBOUNDED) work = WORK_UNBOUNDED;
    /* An unbounded sum found below the top may only be the cut above: don't remember it. */
    if (fixed && (work < WORK_UNBOUNDED || depth == 0)) v->work = work;
    return work;
}

uint64_t jinja_value_work(JValue *v) {
    return value_work(v, 0);
}

int jinja_fail_memory(int line) {
    static const char what[] = "template rendering stopped: it needed more than %zu MiB, the "
                               "limit for one render: the template loops or grows its output "
                               "without end";
    if (line > 0)
        jinja_fail(line, what, (size_t)(JINJA_MEMORY_LIMIT >> 20));
    else
        err_set(what, (size_t)(JINJA_MEMORY_LIMIT >> 20));
    return -1;
}

int jinja_charge(JCtx *c, uint64_t units, int line) {
    if (c->arena->over_limit) return jinja_fail_memory(line);
    if (units > c->work_left) {
        c->work_left = 0;
        jinja_fail(line,
                   "template rendering stopped after %" PRIu64
                   " steps, the limit for one render: the template loops or recurses without "
                   "end, or the conversation is far longer than any context",
                   JINJA_WORK_LIMIT);
        return -1;
    }
    c->work_left -= units;
    return 0;
}

/* Charges the work of the values an operator or builtin is about to go through. */
int jinja_charge_values(JCtx *c, JValue *const *values, size_t n, int line) {
    uint64_t units = 0;
    for (size_t i = 0; i < n && units < WORK_UNBOUNDED; i++)
        units += jinja_value_work(values[i]); /* at most 2 x WORK_UNBOUNDED: no wrap */
    return jinja_charge(c, units, line);
}
