/* Attribute and item lookup the way jinja2's sandbox does it: a loop's attributes, then
 * methods, then a namespace's or dict's items; item lookup with Python's negative indices,
 * falling back to the attribute for string keys. What is missing is undefined, with jinja2's
 * wording, not an error. */
#include "jinja/jinja_internal.h"

#include <string.h>

static JValue *loop_attr(JCtx *c, JLoop *l, const char *name) {
    int64_t i = l->index0, n = l->length;
    if (!strcmp(name, "index")) return jv_int(c->arena, i + 1);
    if (!strcmp(name, "index0")) return jv_int(c->arena, i);
    if (!strcmp(name, "revindex")) return jv_int(c->arena, n - i);
    if (!strcmp(name, "revindex0")) return jv_int(c->arena, n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(c->arena, n);
    if (!strcmp(name, "depth")) return jv_int(c->arena, l->depth);
    if (!strcmp(name, "depth0")) return jv_int(c->arena, l->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items[i - 1] : jv_undefined(c->arena, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items[i + 1] : jv_undefined(c->arena, "there is no next item");
    return NULL;
}

JValue *jinja_attribute(JCtx *c, JValue *obj, const char *name, size_t n) {
    if (obj->kind == JV_LOOP) {
        JValue *v = loop_attr(c, obj->u.loop, name);
        if (v) return v;
    }
    JMethodKind mk = jinja_method_kind(obj, name);
    if (mk != JM_NONE) return jinja_method_value(c, obj, name, mk);
    if (obj->kind == JV_NAMESPACE) return jv_dict_get(obj->u.dict, name, n);
    return NULL;
}

JValue *jinja_getattr(JCtx *c, JValue *obj, const char *name, size_t n) {
    JValue *v = jinja_attribute(c, obj, name, n);
    if (!v && obj->kind == JV_DICT) v = jv_dict_get(obj->u.dict, name, n);
    return v ? v : jv_undefined_attr(c->arena, obj, name);
}

/* Python sequence index with negative wrap-around; false when out of range. */
static bool seq_index(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

JValue *jinja_getitem(JCtx *c, JValue *obj, JValue *key, int line) {
    (void)line;
    bool int_key = key->kind == JV_INT || key->kind == JV_BOOL;
    int64_t ik = key->kind == JV_INT ? key->u.i : key->kind == JV_BOOL ? key->u.b : 0;
    size_t idx;
    switch (obj->kind) {
    case JV_DICT:
        if (key->kind == JV_STRING) {
            JValue *v = jv_dict_get(obj->u.dict, key->u.s.s, key->u.s.n);
            if (v) return v;
        }
        break;
    case JV_LIST:
        if ((obj->view == JVIEW_NONE || obj->view == JVIEW_RANGE) && int_key &&
            seq_index(ik, obj->u.list.n, &idx))
            return obj->u.list.items[idx];
        break;
    case JV_STRING:
        if (int_key) {
            size_t len = ju_length(obj->u.s.s, obj->u.s.n);
            if (seq_index(ik, len, &idx)) {
                size_t i = 0;
                for (size_t k = 0; k < idx; k++)
                    ju_decode(obj->u.s.s, obj->u.s.n, &i);
                size_t start = i;
                ju_decode(obj->u.s.s, obj->u.s.n, &i);
                return jv_str(c->arena, obj->u.s.s + start, i - start);
            }
        }
        break;
    default:
        break;
    }
    /* jinja2 falls back to the attribute for string keys. */
    if (key->kind == JV_STRING) {
        JValue *v = jinja_attribute(c, obj, key->u.s.s, key->u.s.n);
        if (v) return v;
    }
    return jv_undefined_item(c->arena, obj, key);
}
