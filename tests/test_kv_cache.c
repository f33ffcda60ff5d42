/* The KV cache's lent prompts (model/kv_cache.h invariant 7) against the same operations on a
 * cache that copies (its backend without attention_cached_prefixed): every slot's rows, read
 * through the lending (positions below prefix_len from prefix_slot), equal the copying cache's,
 * after lending one level and through a borrower (the owner's rows, one level), a partial prefix
 * of a borrower (copied: its lent rows from their owner), rows appended past the prefix, and the
 * owner reset and refilled (its lent rows become the borrowers' own first). */
#include "harness.h"
#include "kernels/backend.h"
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

enum { LAYERS = 3, SLOTS = 6, MAX_LEN = 12, KVH = 2, HD = 4 };

/* Positions [t0, t1) of slot s written with values made from (seed, layer, slot, position). */
static void write_rows(KvCache *kv, int s, int t0, int t1, int seed) {
    for (int l = 0; l < LAYERS; l++)
        for (int t = t0; t < t1; t++)
            for (int d = 0; d < kv->kv_dim; d++) {
                kv_cache_row(kv, kv->k, l, s, t)[d] =
                    (float)(seed * 1000 + l * 100 + t) + d * 0.01f;
                kv_cache_row(kv, kv->v, l, s, t)[d] =
                    -(float)(seed * 1000 + l * 100 + t) - d * 0.01f;
            }
}

/* Whether slot s of a (read through its lending) equals slot s of b (which copies). */
static bool same_slot(const KvCache *a, const KvCache *b, int s) {
    if (a->len[s] != b->len[s]) return false;
    for (int l = 0; l < LAYERS; l++)
        for (int t = 0; t < a->len[s]; t++) {
            int from = t < a->prefix_len[s] ? a->prefix_slot[s] : s;
            size_t bytes = (size_t)a->kv_dim * sizeof(float);
            if (memcmp(kv_cache_row(a, a->k, l, from, t), kv_cache_row(b, b->k, l, s, t), bytes) ||
                memcmp(kv_cache_row(a, a->v, l, from, t), kv_cache_row(b, b->v, l, s, t), bytes))
                return false;
        }
    return true;
}

/* Every slot of a against b's. */
static void check_all(const KvCache *a, const KvCache *b, const char *after) {
    for (int s = 0; s < SLOTS; s++)
        CHECK(same_slot(a, b, s), "after %s: slot %d reads other rows than the copying cache's",
              after, s);
}

static void append(KvCache *kv, int s, int n, int seed) {
    write_rows(kv, s, kv->len[s], kv->len[s] + n, seed);
    kv->len[s] += n;
}

int main(void) {
    ModelConfig cfg = {0};
    cfg.n_layers = LAYERS, cfg.n_kv_heads = KVH, cfg.head_dim = HD;
    Backend copying = *backend_cpu();
    copying.attention_cached_prefixed = NULL;
    KvCache lend, copy;
    CHECK(kv_cache_init(&lend, backend_cpu(), &cfg, SLOTS, MAX_LEN) == 0, "init");
    CHECK(kv_cache_init(&copy, &copying, &cfg, SLOTS, MAX_LEN) == 0, "init");
    CHECK(lend.share_prefixes && !copy.share_prefixes, "the CPU backend lends, the other copies");
    KvCache *both[2] = {&lend, &copy};
    for (int i = 0; i < 2; i++) {
        append(both[i], 0, 7, 1);               /* slot 0: a prompt of 7 */
        kv_cache_copy_prefix(both[i], 0, 1, 7); /* lent by 0 */
        kv_cache_copy_prefix(both[i], 1, 2, 7); /* through a borrower: lent by 0 */
        kv_cache_copy_prefix(both[i], 0, 3, 5); /* a part of it */
        kv_cache_copy_prefix(both[i], 1, 4, 6); /* a part of a borrower's */
    }
    CHECK(lend.prefix_len[1] == 7 && lend.prefix_slot[2] == 0 && lend.prefix_len[2] == 7 &&
              lend.prefix_len[3] == 5 && lend.prefix_slot[4] == 0,
          "the prompts are lent by their owner, not copied");
    check_all(&lend, &copy, "lending");
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < 5; s++)
            append(both[i], s, 2, 10 + s); /* each slot's own rows past its prompt */
    check_all(&lend, &copy, "appending");
    for (int i = 0; i < 2; i++) /* past a borrower's lent rows: copied, those from the owner */
        kv_cache_copy_prefix(both[i], 1, 5, 9);
    CHECK(lend.prefix_len[5] == 0, "a prefix in two slots is lent");
    check_all(&lend, &copy, "copying a borrower's rows");
    for (int i = 0; i < 2; i++) {
        kv_cache_reset_slot(both[i], 0); /* the owner's job ends while the others go on */
        append(both[i], 0, 9, 20);       /* and its slot takes another sequence */
    }
    CHECK(!kv_cache_lends(&lend), "a reset owner still lends");
    check_all(&lend, &copy, "resetting the owner and refilling it");
    for (int i = 0; i < 2; i++) {
        kv_cache_reset_slot(both[i], 0);
        kv_cache_copy_prefix(both[i], 2, 0, 3); /* a slot that owns its rows again lends them */
        append(both[i], 0, 1, 30);
    }
    CHECK(lend.prefix_slot[0] == 2 && lend.prefix_len[0] == 3, "slot 2's rows are not lent");
    check_all(&lend, &copy, "lending again");
    for (int i = 0; i < 2; i++)
        kv_cache_reset_slot(both[i], 0); /* a borrower's reset takes nothing from the others */
    check_all(&lend, &copy, "a borrower's reset");
    kv_cache_free(&lend);
    kv_cache_free(&copy);
    return harness_finish("test_kv_cache");
}
