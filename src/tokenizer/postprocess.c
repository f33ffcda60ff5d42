/* Post-processors: TemplateProcessing (its "single" template), ByteLevel (offsets only: no
 * effect on ids), and Sequence of those. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const supported = "Sequence, TemplateProcessing, ByteLevel";

/* Looks up a special token name in "special_tokens" and copies its ids. */
static int special_ids(const json_t *specials, const char *name, TemplateItem *it,
                       const char *where) {
    const json_t *s = json_is_object(specials) ? json_object_get(specials, name) : NULL;
    if (!s)
        return err_set("%s: template uses special token \"%s\" missing from 'special_tokens'",
                       where, name);
    const json_t *ids = json_object_get(s, "ids");
    if (!json_is_array(ids))
        return err_set("%s: special_tokens \"%s\": key 'ids': expected an array", where, name);
    it->n_ids = json_array_size(ids);
    it->ids = xmalloc((it->n_ids ? it->n_ids : 1) * sizeof *it->ids);
    for (size_t k = 0; k < it->n_ids; k++) {
        int64_t id;
        if (json_as_int64(json_array_get(ids, k), &id) != 0 || id < 0 || id > INT32_MAX)
            return err_set("%s: special_tokens \"%s\": ids[%zu]: expected a token id", where, name,
                           k);
        it->ids[k] = (int32_t)id;
    }
    return 0;
}

static int parse_template(PostProcessor *p, const json_t *j, const char *where) {
    const json_t *single = json_object_get(j, "single");
    const json_t *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single))
        return err_set("%s: key 'single': expected an array of template pieces", where);
    p->n_single = json_array_size(single);
    p->single = xcalloc(p->n_single ? p->n_single : 1, sizeof *p->single);
    for (size_t i = 0; i < p->n_single; i++) {
        const json_t *piece = json_array_get(single, i);
        const json_t *sp = json_object_get(piece, "SpecialToken");
        const json_t *sq = json_object_get(piece, "Sequence");
        TemplateItem *it = &p->single[i];
        if (sp) {
            const json_t *id = json_object_get(sp, "id");
            if (!json_is_string(id))
                return err_set("%s: single[%zu]: SpecialToken: key 'id': expected a string", where,
                               i);
            if (special_ids(specials, json_string_value(id), it, where) != 0) return -1;
        } else if (sq) {
            const json_t *id = json_object_get(sq, "id");
            const char *s = json_is_string(id) ? json_string_value(id) : "";
            if (strcmp(s, "A") != 0 && strcmp(s, "B") != 0)
                return err_set("%s: single[%zu]: Sequence: key 'id': expected \"A\" or \"B\"",
                               where, i);
            it->is_sequence = true;
            it->seq_id = s[0];
        } else {
            return err_set("%s: single[%zu]: expected {\"SpecialToken\": ...} or "
                           "{\"Sequence\": ...}",
                           where, i);
        }
    }
    return 0;
}

int postproc_parse(PostProcessor *p, const json_t *j, const char *where) {
    memset(p, 0, sizeof *p);
    const char *type = tokjson_type(j, where);
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) {
        p->kind = POST_SEQUENCE;
        const json_t *arr = json_object_get(j, "processors");
        if (!json_is_array(arr)) return err_set("%s: key 'processors': expected an array", where);
        p->n_children = json_array_size(arr);
        p->children = xcalloc(p->n_children ? p->n_children : 1, sizeof *p->children);
        for (size_t i = 0; i < p->n_children; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", where, i);
            if (postproc_parse(&p->children[i], json_array_get(arr, i), sub) != 0) {
                p->n_children = i + 1;
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = POST_BYTELEVEL;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") == 0) {
        p->kind = POST_TEMPLATE;
        return parse_template(p, j, where);
    }
    return err_set("%s: unsupported post-processor type \"%s\" (supported: %s)", where, type,
                   supported);
}

void postproc_free(PostProcessor *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_children; i++)
        postproc_free(&p->children[i]);
    free(p->children);
    for (size_t i = 0; i < p->n_single; i++)
        free(p->single[i].ids);
    free(p->single);
    memset(p, 0, sizeof *p);
}

void postproc_apply(const PostProcessor *p, bool add_special_tokens, IdBuf *ids, IdBuf *tmp) {
    switch (p->kind) {
    case POST_SEQUENCE:
        for (size_t i = 0; i < p->n_children; i++)
            postproc_apply(&p->children[i], add_special_tokens, ids, tmp);
        return;
    case POST_BYTELEVEL:
        return;
    case POST_TEMPLATE:
        tmp->n = 0;
        for (size_t i = 0; i < p->n_single; i++) {
            const TemplateItem *it = &p->single[i];
            if (it->is_sequence) {
                if (it->seq_id == 'A') idbuf_append(tmp, ids->v, ids->n);
            } else if (add_special_tokens) {
                idbuf_append(tmp, it->ids, it->n_ids);
            }
        }
        ids->n = 0;
        idbuf_append(ids, tmp->v, tmp->n);
        return;
    }
}
