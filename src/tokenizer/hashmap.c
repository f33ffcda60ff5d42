/* Open-addressing hash maps: strings -> int32 (vocabularies, added tokens) and id pairs ->
 * (rank, merged id) (BPE merges). Linear probing, load factor <= 1/2, no deletion. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

uint64_t tok_hash_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xFF51AFD7ED558CCDull);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ k) * 0x100000001B3ull * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    uint64_t k = 0;
    memcpy(&k, p, len);
    h = (h ^ k) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 32;
    h *= 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return h;
}

/* ---- string map ---- */
struct StrMapSlot {
    uint64_t hash;
    size_t key_off;
    uint32_t key_len; /* UINT32_MAX: empty slot */
    int32_t value;
};

static size_t table_size(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2)
        cap *= 2;
    return cap;
}

static void strmap_alloc(StrMap *m, size_t cap) {
    m->cap = cap;
    m->slots = xmalloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++)
        m->slots[i].key_len = UINT32_MAX;
}

void strmap_init(StrMap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    strmap_alloc(m, table_size(expected));
}

void strmap_free(StrMap *m) {
    free(m->slots);
    tokbuf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

void strmap_clear(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i].key_len = UINT32_MAX;
    m->n = 0;
    m->keys.len = 0;
}

static struct StrMapSlot *strmap_find(const StrMap *m, const char *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct StrMapSlot *s = &m->slots[i];
        if (s->key_len == UINT32_MAX) return s;
        if (s->hash == h && s->key_len == len && memcmp(m->keys.p + s->key_off, key, len) == 0)
            return s;
    }
}

bool strmap_get(const StrMap *m, const char *key, size_t len, int32_t *value) {
    if (!m->slots) return false;
    struct StrMapSlot *s = strmap_find(m, key, len, tok_hash_bytes(key, len));
    if (s->key_len == UINT32_MAX) return false;
    *value = s->value;
    return true;
}

void strmap_put(StrMap *m, const char *key, size_t len, int32_t value) {
    if (!m->slots) strmap_init(m, 8);
    if ((m->n + 1) * 2 > m->cap) {
        struct StrMapSlot *old = m->slots;
        size_t old_cap = m->cap;
        strmap_alloc(m, old_cap * 2);
        for (size_t i = 0; i < old_cap; i++) {
            if (old[i].key_len == UINT32_MAX) continue;
            size_t mask = m->cap - 1;
            size_t j = old[i].hash & mask;
            while (m->slots[j].key_len != UINT32_MAX)
                j = (j + 1) & mask;
            m->slots[j] = old[i];
        }
        free(old);
    }
    uint64_t h = tok_hash_bytes(key, len);
    struct StrMapSlot *s = strmap_find(m, key, len, h);
    if (s->key_len != UINT32_MAX) {
        s->value = value;
        return;
    }
    s->hash = h;
    s->key_len = (uint32_t)len;
    s->key_off = m->keys.len;
    s->value = value;
    tokbuf_append(&m->keys, key, len);
    m->n++;
}

/* ---- pair map ---- */
struct PairMapSlot {
    uint64_t key; /* UINT64_MAX: empty */
    uint32_t rank;
    int32_t merged;
};

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ull;
    k ^= k >> 33;
    return k;
}

static void pairmap_alloc(PairMap *m, size_t cap) {
    m->cap = cap;
    m->slots = xmalloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
}

void pairmap_init(PairMap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    pairmap_alloc(m, table_size(expected));
}

void pairmap_free(PairMap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

bool pairmap_get(const PairMap *m, uint32_t a, uint32_t b, uint32_t *rank, int32_t *merged) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = m->cap - 1;
    for (size_t i = pair_hash(key) & mask;; i = (i + 1) & mask) {
        const struct PairMapSlot *s = &m->slots[i];
        if (s->key == UINT64_MAX) return false;
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return true;
        }
    }
}

void pairmap_put(PairMap *m, uint32_t a, uint32_t b, uint32_t rank, int32_t merged) {
    if ((m->n + 1) * 2 > m->cap) {
        struct PairMapSlot *old = m->slots;
        size_t old_cap = m->cap;
        pairmap_alloc(m, old_cap * 2);
        size_t mask = m->cap - 1;
        for (size_t i = 0; i < old_cap; i++) {
            if (old[i].key == UINT64_MAX) continue;
            size_t j = pair_hash(old[i].key) & mask;
            while (m->slots[j].key != UINT64_MAX)
                j = (j + 1) & mask;
            m->slots[j] = old[i];
        }
        free(old);
    }
    uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = m->cap - 1;
    size_t i = pair_hash(key) & mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key)
        i = (i + 1) & mask;
    if (m->slots[i].key == UINT64_MAX) m->n++;
    m->slots[i] = (struct PairMapSlot){key, rank, merged};
}
