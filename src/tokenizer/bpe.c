/* The BPE model: vocabulary, merge table, and the per-piece merge loop of `tokenizers`
 * (models/bpe: merge_word + Word::merge_all), plus a word cache.
 *
 * Invariants:
 *  1. merges maps (left id, right id) -> (rank, merged id); rank = index in the merges list
 *     (after "#version" lines), a later duplicate pair overwriting an earlier one.
 *  2. A piece's initial symbols are its characters (with continuing_subword_prefix /
 *     end_of_word_suffix), or their <0xHH> byte tokens (byte_fallback), or unk (fused with the
 *     pending unk when fuse_unk), or nothing. A pending unk is only flushed by the next
 *     character found in the vocabulary (or the end): byte-fallback symbols can come before it,
 *     exactly as in tokenizers.
 *  3. The merge loop pops the pair with the lowest (rank, position) from a min-heap; an entry is
 *     stale when its left symbol was merged away, has no right neighbour any more, or the
 *     current pair no longer merges into the same id. Each merge pushes the two new pairs. This
 *     is O(n log n) per piece.
 *  4. The cache maps a piece (< 256 bytes) to its ids; it is cleared when full. Lookups and
 *     inserts happen under a mutex taken with trylock: a busy cache is simply skipped, so the
 *     result never depends on it. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BPE_CACHE_MAX_PIECE   256
#define BPE_CACHE_MAX_ENTRIES 32768

struct Bpe {
    StrMap vocab;    /* token -> id */
    TokBuf tok_data; /* id -> string: tok_data.p + tok_off[id], tok_len[id] bytes */
    size_t *tok_off; /* SIZE_MAX: no token with this id */
    uint32_t *tok_len;
    int32_t max_id;      /* -1 when the vocabulary is empty */
    int32_t vocab_count; /* entries in "vocab" */
    PairMap merges;
    char *unk_token; /* NULL: none */
    size_t unk_len;
    char *prefix, *suffix; /* continuing_subword_prefix / end_of_word_suffix; NULL: none */
    size_t prefix_len, suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* id of "<0xHH>", or -1 */

    pthread_mutex_t cache_lock;
    StrMap cache; /* piece -> offset in cache_ids: [n, id_1 .. id_n] */
    IdBuf cache_ids;
};

struct BpeSymbol {
    int32_t id;
    int32_t prev, next; /* -1: none */
    uint32_t len;       /* bytes of the piece it covers; 0: merged away */
};

struct BpeMerge {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
};

static char *dup_bytes(const char *s, size_t len) {
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* An optional string member: absent/null -> NULL. */
static int opt_string(const json_t *j, const char *key, char **out, size_t *len,
                      const char *where) {
    *out = NULL;
    *len = 0;
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return err_set("%s: key '%s': expected a string or null", where, key);
    *len = json_string_length(v);
    *out = dup_bytes(json_string_value(v), *len);
    return 0;
}

static int parse_vocab(Bpe *b, const json_t *vocab, const char *where) {
    if (!json_is_object(vocab)) return err_set("%s: key 'vocab': expected an object", where);
    size_t count = json_object_size(vocab);
    if (count > INT32_MAX) return err_set("%s: vocab too large", where);
    strmap_init(&b->vocab, count);
    b->vocab_count = (int32_t)count;
    b->max_id = -1;
    for (void *it = json_object_iter((json_t *)vocab); it;
         it = json_object_iter_next((json_t *)vocab, it)) {
        const char *key = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        int64_t id;
        if (json_as_int64(json_object_iter_value(it), &id) != 0 || id < 0 || id > INT32_MAX)
            return err_set("%s: vocab entry \"%.*s\": expected a non-negative integer id", where,
                           (int)(klen > 100 ? 100 : klen), key);
        strmap_put(&b->vocab, key, klen, (int32_t)id);
        if (id > b->max_id) b->max_id = (int32_t)id;
    }
    /* id -> string. Ids are normally 0..count-1; allow some holes, refuse absurd spreads. */
    if ((int64_t)b->max_id > 4 * (int64_t)count + 65536)
        return err_set("%s: vocab ids are too sparse (largest id %d for %zu entries)", where,
                       b->max_id, count);
    size_t n = (size_t)b->max_id + 1;
    b->tok_off = xmalloc((n ? n : 1) * sizeof *b->tok_off);
    b->tok_len = xcalloc(n ? n : 1, sizeof *b->tok_len);
    for (size_t i = 0; i < n; i++)
        b->tok_off[i] = SIZE_MAX;
    for (void *it = json_object_iter((json_t *)vocab); it;
         it = json_object_iter_next((json_t *)vocab, it)) {
        int64_t id;
        json_as_int64(json_object_iter_value(it), &id);
        size_t klen = json_object_iter_key_len(it);
        b->tok_off[id] = b->tok_data.len;
        b->tok_len[id] = (uint32_t)klen;
        tokbuf_append(&b->tok_data, json_object_iter_key(it), klen);
    }
    return 0;
}

static int32_t vocab_id(const Bpe *b, const char *s, size_t len) {
    int32_t id;
    return strmap_get(&b->vocab, s, len, &id) ? id : -1;
}

static int add_merge(Bpe *b, uint32_t rank, const char *l, size_t ll, const char *r, size_t rl,
                     TokBuf *tmp, const char *where) {
    int32_t a = vocab_id(b, l, ll), c = vocab_id(b, r, rl);
    if (a < 0 || c < 0) {
        const char *missing = a < 0 ? l : r;
        size_t mlen = a < 0 ? ll : rl;
        return err_set("%s: merges[%u]: token \"%.*s\" is not in the vocab", where, rank,
                       (int)(mlen > 100 ? 100 : mlen), missing);
    }
    if (b->prefix && rl < b->prefix_len)
        return err_set("%s: merges[%u]: right token shorter than continuing_subword_prefix", where,
                       rank);
    tmp->len = 0;
    tokbuf_append(tmp, l, ll);
    size_t skip = b->prefix ? b->prefix_len : 0;
    tokbuf_append(tmp, r + skip, rl - skip);
    int32_t m = vocab_id(b, tmp->p, tmp->len);
    if (m < 0)
        return err_set("%s: merges[%u]: merged token \"%.*s\" is not in the vocab", where, rank,
                       (int)(tmp->len > 100 ? 100 : tmp->len), tmp->p);
    pairmap_put(&b->merges, (uint32_t)a, (uint32_t)c, rank, m);
    return 0;
}

static int parse_merges(Bpe *b, const json_t *merges, const char *where) {
    if (!json_is_array(merges)) return err_set("%s: key 'merges': expected an array", where);
    size_t n = json_array_size(merges);
    pairmap_init(&b->merges, n);
    TokBuf tmp = {0};
    int rc = 0;
    uint32_t rank = 0;
    bool pairs = n > 0 && json_is_array(json_array_get(merges, 0));
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *m = json_array_get(merges, i);
        if (pairs) {
            if (!json_is_array(m) || json_array_size(m) != 2 ||
                !json_is_string(json_array_get(m, 0)) || !json_is_string(json_array_get(m, 1))) {
                rc =
                    err_set("%s: merges[%zu]: expected a pair of strings [\"a\", \"b\"]", where, i);
                break;
            }
            const json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
            rc = add_merge(b, rank++, json_string_value(l), json_string_length(l),
                           json_string_value(r), json_string_length(r), &tmp, where);
            continue;
        }
        if (!json_is_string(m)) {
            rc = err_set("%s: merges[%zu]: expected a string \"a b\" (like the entries before it)",
                         where, i);
            break;
        }
        const char *s = json_string_value(m);
        size_t len = json_string_length(m);
        if (len >= 8 && memcmp(s, "#version", 8) == 0) continue;
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s))) {
            rc = err_set("%s: merges[%zu]: \"%.*s\" is not two tokens separated by one space",
                         where, i, (int)(len > 100 ? 100 : len), s);
            break;
        }
        rc = add_merge(b, rank, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp + 1 - s), &tmp,
                       where);
        rank++;
    }
    tokbuf_free(&tmp);
    return rc;
}

int bpe_parse(Bpe **out, const json_t *j, const char *where) {
    *out = NULL;
    if (!json_is_object(j)) return err_set("%s: expected an object", where);
    Bpe *b = xcalloc(1, sizeof *b);
    pthread_mutex_init(&b->cache_lock, NULL);
    strmap_init(&b->cache, 1024);
    *out = b;
    const json_t *d = json_object_get(j, "dropout");
    if (d && !json_is_null(d)) {
        if (!json_is_number(d))
            return err_set("%s: key 'dropout': expected a number or null", where);
        if (json_number_value(d) != 0.0)
            return err_set("%s: BPE dropout %g is not supported (it makes encoding random); "
                           "set \"dropout\" to null",
                           where, json_number_value(d));
    }
    if (opt_string(j, "unk_token", &b->unk_token, &b->unk_len, where) != 0 ||
        opt_string(j, "continuing_subword_prefix", &b->prefix, &b->prefix_len, where) != 0 ||
        opt_string(j, "end_of_word_suffix", &b->suffix, &b->suffix_len, where) != 0 ||
        tokjson_bool(j, "fuse_unk", false, &b->fuse_unk, where) != 0 ||
        tokjson_bool(j, "byte_fallback", false, &b->byte_fallback, where) != 0 ||
        tokjson_bool(j, "ignore_merges", false, &b->ignore_merges, where) != 0)
        return -1;
    /* An empty prefix/suffix changes nothing (Qwen2 writes ""). */
    if (b->prefix && b->prefix_len == 0) {
        free(b->prefix);
        b->prefix = NULL;
    }
    if (b->suffix && b->suffix_len == 0) {
        free(b->suffix);
        b->suffix = NULL;
    }
    const json_t *vocab = json_object_get(j, "vocab"), *merges = json_object_get(j, "merges");
    if (!vocab || !merges)
        return err_set("%s: missing key '%s'", where, vocab ? "merges" : "vocab");
    if (parse_vocab(b, vocab, where) != 0 || parse_merges(b, merges, where) != 0) return -1;
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->byte_ids[i] = vocab_id(b, name, 6);
    }
    return 0;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    strmap_free(&b->vocab);
    tokbuf_free(&b->tok_data);
    free(b->tok_off);
    free(b->tok_len);
    pairmap_free(&b->merges);
    free(b->unk_token);
    free(b->prefix);
    free(b->suffix);
    pthread_mutex_destroy(&b->cache_lock);
    strmap_free(&b->cache);
    idbuf_free(&b->cache_ids);
    free(b);
}

int32_t bpe_vocab_count(const Bpe *b) {
    return b->vocab_count;
}

int32_t bpe_token_to_id(const Bpe *b, const char *s, size_t len) {
    return vocab_id(b, s, len);
}

const char *bpe_id_to_token(const Bpe *b, int32_t id, size_t *len) {
    if (id < 0 || id > b->max_id || b->tok_off[id] == SIZE_MAX) return NULL;
    if (len) *len = b->tok_len[id];
    return b->tok_data.p + b->tok_off[id];
}

void bpe_scratch_free(BpeScratch *s) {
    free(s->syms);
    free(s->heap);
    idbuf_free(&s->ids);
    memset(s, 0, sizeof *s);
}

/* ---- the merge loop ---- */

static bool merge_less(const struct BpeMerge *a, const struct BpeMerge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(BpeScratch *s, size_t *n, struct BpeMerge m) {
    if (*n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 64;
        s->heap = xrealloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_less(&m, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = m;
}

static struct BpeMerge heap_pop(BpeScratch *s, size_t *n) {
    struct BpeMerge top = s->heap[0], last = s->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!merge_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n > 0) s->heap[i] = last;
    return top;
}

static void add_symbol(BpeScratch *s, size_t *n, int32_t id, uint32_t len) {
    if (*n == s->syms_cap) {
        s->syms_cap = s->syms_cap ? s->syms_cap * 2 : 64;
        s->syms = xrealloc(s->syms, s->syms_cap * sizeof *s->syms);
    }
    struct BpeSymbol *sym = &s->syms[*n];
    sym->id = id;
    sym->len = len;
    sym->prev = (int32_t)*n - 1;
    sym->next = -1;
    if (*n > 0) s->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
}

static void push_pair(const Bpe *b, BpeScratch *s, size_t *heap_n, int32_t pos) {
    const struct BpeSymbol *l = &s->syms[pos];
    if (l->next < 0) return;
    uint32_t rank;
    int32_t merged;
    if (pairmap_get(&b->merges, (uint32_t)l->id, (uint32_t)s->syms[l->next].id, &rank, &merged))
        heap_push(s, heap_n, (struct BpeMerge){rank, (uint32_t)pos, merged});
}

/* Splits the piece into initial symbols (invariant 2). */
static int initial_symbols(const Bpe *b, const char *w, size_t len, BpeScratch *s, size_t *n,
                           TokBuf *cand) {
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    bool unk_pending = false;
    for (size_t i = 0; i < len;) {
        size_t cl = utf8_char_len((unsigned char)w[i]);
        if (cl > len - i) cl = len - i;
        const char *c = w + i;
        size_t clen = cl;
        if ((b->prefix && i > 0) || (b->suffix && i + cl == len)) {
            cand->len = 0;
            if (b->prefix && i > 0) tokbuf_append(cand, b->prefix, b->prefix_len);
            tokbuf_append(cand, w + i, cl);
            if (b->suffix && i + cl == len) tokbuf_append(cand, b->suffix, b->suffix_len);
            c = cand->p;
            clen = cand->len;
        }
        int32_t id = vocab_id(b, c, clen);
        if (id >= 0) {
            if (unk_pending) {
                add_symbol(s, n, unk_id, unk_len);
                unk_pending = false;
            }
            add_symbol(s, n, id, (uint32_t)cl);
            i += cl;
            continue;
        }
        if (b->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < clen && all; k++)
                all = b->byte_ids[(unsigned char)c[k]] >= 0;
            if (all) {
                for (size_t k = 0; k < clen; k++)
                    add_symbol(s, n, b->byte_ids[(unsigned char)c[k]], 1);
                i += cl;
                continue;
            }
        }
        if (b->unk_token) {
            int32_t uid = vocab_id(b, b->unk_token, b->unk_len);
            if (uid < 0) return err_set("BPE unk_token \"%s\" is not in the vocab", b->unk_token);
            if (unk_pending && b->fuse_unk) {
                unk_len += (uint32_t)cl;
            } else {
                if (unk_pending) add_symbol(s, n, unk_id, unk_len);
                unk_id = uid;
                unk_len = (uint32_t)cl;
                unk_pending = true;
            }
        }
        i += cl;
    }
    if (unk_pending) add_symbol(s, n, unk_id, unk_len);
    return 0;
}

static int merge_word(const Bpe *b, const char *w, size_t len, IdBuf *out, BpeScratch *s) {
    size_t n = 0;
    TokBuf cand = {0};
    int rc = initial_symbols(b, w, len, s, &n, &cand);
    tokbuf_free(&cand);
    if (rc != 0) return -1;
    size_t heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(b, s, &heap_n, (int32_t)i);
    while (heap_n > 0) {
        struct BpeMerge top = heap_pop(s, &heap_n);
        struct BpeSymbol *l = &s->syms[top.pos];
        if (l->len == 0 || l->next < 0) continue;
        struct BpeSymbol *r = &s->syms[l->next];
        uint32_t rank;
        int32_t merged;
        if (!pairmap_get(&b->merges, (uint32_t)l->id, (uint32_t)r->id, &rank, &merged) ||
            merged != top.merged)
            continue;
        l->id = top.merged;
        l->len += r->len;
        l->next = r->next;
        r->len = 0;
        if (l->next >= 0) s->syms[l->next].prev = (int32_t)top.pos;
        if (l->prev >= 0) push_pair(b, s, &heap_n, l->prev);
        push_pair(b, s, &heap_n, (int32_t)top.pos);
    }
    for (size_t i = 0; i < n; i++)
        if (s->syms[i].len != 0) idbuf_push(out, s->syms[i].id);
    return 0;
}

int bpe_encode_piece(const Bpe *b, const char *s, size_t len, IdBuf *out, BpeScratch *scratch) {
    if (len == 0) return 0;
    if (b->ignore_merges) {
        int32_t id = vocab_id(b, s, len);
        if (id >= 0) {
            idbuf_push(out, id);
            return 0;
        }
    }
    Bpe *mb = (Bpe *)b; /* the cache is the only mutable state, guarded by its lock */
    bool cacheable = len < BPE_CACHE_MAX_PIECE;
    if (cacheable && pthread_mutex_trylock(&mb->cache_lock) == 0) {
        int32_t off;
        bool hit = strmap_get(&mb->cache, s, len, &off);
        if (hit) idbuf_append(out, mb->cache_ids.v + off + 1, (size_t)mb->cache_ids.v[off]);
        pthread_mutex_unlock(&mb->cache_lock);
        if (hit) return 0;
    }
    size_t start = out->n;
    if (merge_word(b, s, len, out, scratch) != 0) return -1;
    if (cacheable && pthread_mutex_trylock(&mb->cache_lock) == 0) {
        if (mb->cache.n >= BPE_CACHE_MAX_ENTRIES || mb->cache_ids.n > (size_t)INT32_MAX / 2) {
            strmap_clear(&mb->cache);
            mb->cache_ids.n = 0;
        }
        int32_t off = (int32_t)mb->cache_ids.n;
        idbuf_push(&mb->cache_ids, (int32_t)(out->n - start));
        idbuf_append(&mb->cache_ids, out->v + start, out->n - start);
        strmap_put(&mb->cache, s, len, off);
        pthread_mutex_unlock(&mb->cache_lock);
    }
    return 0;
}
