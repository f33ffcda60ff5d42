/* Added tokens: ids, flags, and splitting them out of text (tokenizers' AddedVocabulary).
 *
 * Invariants:
 *  1. Ids are assigned the way `tokenizers` assigns them when it loads the file (it ignores the
 *     "id" written in tokenizer.json except for a warning): in file order, a content already
 *     added keeps its id, a content in the model vocab takes that id, any other takes the next
 *     id from the model vocab size on. For files written by `tokenizers` these are the ids in
 *     the file.
 *  2. Tokens with normalized=false are matched on the raw text; those with normalized=true on
 *     each normalized segment, against their own normalized content.
 *  3. Matching is leftmost-longest over non-overlapping matches; a match rejected by
 *     single_word is still consumed (the search goes on after it), as with the Aho-Corasick
 *     iterator `tokenizers` uses. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_bytes(const char *s, size_t len) {
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static int flag(const json_t *j, const char *key, bool dflt, bool *out, const char *where) {
    return tokjson_bool(j, key, dflt, out, where);
}

static bool same_token(const AddedToken *a, const AddedToken *b) {
    return a->len == b->len && memcmp(a->content, b->content, a->len) == 0 &&
           a->special == b->special && a->lstrip == b->lstrip && a->rstrip == b->rstrip &&
           a->single_word == b->single_word && a->normalized == b->normalized;
}

static void token_free(AddedToken *t) {
    free(t->content);
    if (t->pattern != t->content) free(t->pattern);
}

/* Groups the matcher's tokens by first byte, longest first. */
static int matcher_build(AddedVocab *av, bool normalized, AddedMatcher *m) {
    size_t count[256] = {0}, total = 0;
    for (size_t i = 0; i < av->n; i++) {
        const AddedToken *t = &av->tokens[i];
        if (t->normalized != normalized || t->pattern_len == 0) continue;
        count[(unsigned char)t->pattern[0]]++;
        total++;
    }
    m->order = xmalloc((total ? total : 1) * sizeof *m->order);
    m->first[0] = 0;
    for (int b = 0; b < 256; b++)
        m->first[b + 1] = m->first[b] + (uint32_t)count[b];
    uint32_t fill[256];
    memcpy(fill, m->first, sizeof fill);
    for (size_t i = 0; i < av->n; i++) {
        const AddedToken *t = &av->tokens[i];
        if (t->normalized != normalized || t->pattern_len == 0) continue;
        unsigned char b = (unsigned char)t->pattern[0];
        /* insertion into the bucket, longest first */
        uint32_t k = fill[b]++;
        while (k > m->first[b] && av->tokens[m->order[k - 1]].pattern_len < t->pattern_len) {
            m->order[k] = m->order[k - 1];
            k--;
        }
        m->order[k] = (int32_t)i;
    }
    /* `tokenizers` cannot build its matcher from two equal patterns and refuses the file. */
    for (int b = 0; b < 256; b++) {
        for (uint32_t k = m->first[b]; k + 1 < m->first[b + 1]; k++) {
            for (uint32_t q = k + 1; q < m->first[b + 1]; q++) {
                const AddedToken *x = &av->tokens[m->order[k]], *y = &av->tokens[m->order[q]];
                if (x->pattern_len != y->pattern_len) break;
                if (memcmp(x->pattern, y->pattern, x->pattern_len) == 0)
                    return err_set("added tokens \"%s\" and \"%s\" match the same text \"%.*s\"",
                                   x->content, y->content, (int)x->pattern_len, x->pattern);
            }
        }
    }
    return total > 0;
}

int added_vocab_build(AddedVocab *av, const json_t *arr, const Bpe *model,
                      const Normalizer *normalizer) {
    memset(av, 0, sizeof *av);
    strmap_init(&av->by_content, 16);
    strmap_init(&av->special, 16);
    if (arr && !json_is_null(arr) && !json_is_array(arr))
        return err_set("added_tokens: expected an array");
    size_t n = arr ? json_array_size(arr) : 0;
    av->tokens = xcalloc(n ? n : 1, sizeof *av->tokens);
    int32_t next_id = bpe_vocab_count(model);
    TokBuf s = {0}, tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        const json_t *j = json_array_get(arr, i);
        if (!json_is_object(j)) {
            rc = err_set("%s: expected an object", where);
            break;
        }
        const json_t *c = json_object_get(j, "content");
        if (!json_is_string(c)) {
            rc = err_set("%s: key 'content': expected a string", where);
            break;
        }
        AddedToken t = {0};
        t.len = json_string_length(c);
        if (flag(j, "special", false, &t.special, where) != 0 ||
            flag(j, "lstrip", false, &t.lstrip, where) != 0 ||
            flag(j, "rstrip", false, &t.rstrip, where) != 0 ||
            flag(j, "single_word", false, &t.single_word, where) != 0 ||
            flag(j, "normalized", !t.special, &t.normalized, where) != 0) {
            rc = -1;
            break;
        }
        if (t.len == 0) continue; /* tokenizers ignores empty tokens */
        t.content = dup_bytes(json_string_value(c), t.len);
        int32_t existing;
        bool have = strmap_get(&av->by_content, t.content, t.len, &existing);
        if (have && same_token(&av->tokens[existing], &t)) {
            free(t.content);
            continue;
        }
        if (have)
            t.id = av->tokens[existing].id;
        else if ((t.id = bpe_token_to_id(model, t.content, t.len)) < 0)
            t.id = next_id++;
        t.pattern = t.content;
        t.pattern_len = t.len;
        if (t.normalized && normalizer) {
            s.len = 0;
            tokbuf_append(&s, t.content, t.len);
            bool at_origin = true;
            if (normalizer_apply(normalizer, &s, &tmp, &at_origin) != 0) {
                free(t.content);
                rc = err_prefix("%s", where);
                break;
            }
            if (s.len != t.len || memcmp(s.p, t.content, t.len) != 0) {
                t.pattern = dup_bytes(s.p ? s.p : "", s.len);
                t.pattern_len = s.len;
            }
        }
        if (t.special) strmap_put(&av->special, t.content, t.len, 1);
        /* one token per id: a later entry with the same id replaces the earlier one */
        size_t slot = av->n;
        for (size_t k = 0; k < av->n; k++)
            if (av->tokens[k].id == t.id) slot = k;
        if (slot < av->n)
            token_free(&av->tokens[slot]);
        else
            av->n++;
        av->tokens[slot] = t;
        strmap_put(&av->by_content, t.content, t.len, (int32_t)slot);
    }
    tokbuf_free(&s);
    tokbuf_free(&tmp);
    if (rc != 0) return -1;
    av->min_id = INT32_MAX;
    av->max_id = -1;
    for (size_t i = 0; i < av->n; i++) {
        if (av->tokens[i].id < av->min_id) av->min_id = av->tokens[i].id;
        if (av->tokens[i].id > av->max_id) av->max_id = av->tokens[i].id;
    }
    if (av->n) {
        size_t span = (size_t)(av->max_id - av->min_id) + 1;
        av->index_of_id = xmalloc(span * sizeof *av->index_of_id);
        for (size_t k = 0; k < span; k++)
            av->index_of_id[k] = -1;
        for (size_t i = 0; i < av->n; i++)
            av->index_of_id[av->tokens[i].id - av->min_id] = (int32_t)i;
    }
    int r1 = matcher_build(av, false, &av->raw);
    if (r1 < 0) return -1;
    int r2 = matcher_build(av, true, &av->normalized);
    if (r2 < 0) return -1;
    av->any_raw = r1 > 0;
    av->any_normalized = r2 > 0;
    return 0;
}

void added_vocab_free(AddedVocab *av) {
    for (size_t i = 0; i < av->n; i++)
        token_free(&av->tokens[i]);
    free(av->tokens);
    strmap_free(&av->by_content);
    strmap_free(&av->special);
    free(av->index_of_id);
    free(av->raw.order);
    free(av->normalized.order);
    memset(av, 0, sizeof *av);
}

const AddedToken *added_vocab_by_id(const AddedVocab *av, int32_t id) {
    if (av->n == 0 || id < av->min_id || id > av->max_id) return NULL;
    int32_t k = av->index_of_id[id - av->min_id];
    return k < 0 ? NULL : &av->tokens[k];
}

static void segment_push(SegmentList *l, size_t start, size_t end, int32_t id) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (Segment){start, end, id};
}

/* The character before `end` / at `start` (valid UTF-8). */
static uint32_t char_before(const char *s, size_t end) {
    size_t k = end - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    uint32_t cp;
    utf8_decode(s + k, end - k, &cp);
    return cp;
}

static uint32_t char_at(const char *s, size_t len, size_t start) {
    uint32_t cp;
    utf8_decode(s + start, len - start, &cp);
    return cp;
}

void added_vocab_split(const AddedVocab *av, bool normalized, bool encode_special_tokens,
                       const char *s, size_t len, SegmentList *out) {
    out->n = 0;
    const AddedMatcher *m = normalized ? &av->normalized : &av->raw;
    bool any = normalized ? av->any_normalized : av->any_raw;
    size_t start_offset = 0;
    for (size_t pos = 0; any && pos < len;) {
        unsigned char b = (unsigned char)s[pos];
        const AddedToken *t = NULL;
        for (uint32_t k = m->first[b]; k < m->first[b + 1]; k++) {
            const AddedToken *c = &av->tokens[m->order[k]];
            if (c->pattern_len <= len - pos && memcmp(s + pos, c->pattern, c->pattern_len) == 0) {
                t = c;
                break;
            }
        }
        if (!t) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + t->pattern_len;
        pos = stop;
        int32_t one;
        if (encode_special_tokens && strmap_get(&av->special, t->content, t->len, &one)) continue;
        if (t->single_word) {
            bool start_space = start == 0 || !unicode_is_word(char_before(s, start));
            bool stop_space = stop == len || !unicode_is_word(char_at(s, len, stop));
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t k = start;
            while (k > 0) {
                size_t q = k - 1;
                while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80)
                    q--;
                uint32_t cp;
                utf8_decode(s + q, k - q, &cp);
                if (!unicode_is_whitespace(cp)) break;
                k = q;
            }
            start = k > start_offset ? k : start_offset;
        }
        if (t->rstrip) {
            while (stop < len) {
                uint32_t cp;
                size_t n = utf8_decode(s + stop, len - stop, &cp);
                if (!unicode_is_whitespace(cp)) break;
                stop += n;
            }
        }
        if (start_offset < start) segment_push(out, start_offset, start, -1);
        segment_push(out, start, stop, t->id);
        start_offset = stop;
    }
    if (start_offset < len) segment_push(out, start_offset, len, -1);
}
