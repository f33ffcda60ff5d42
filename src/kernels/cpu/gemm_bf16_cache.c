/* Weights packed for gemm_bf16 once and kept (gemm_bf16.h, bf16_weight_packed): under autocast
 * every linear's W was rounded into a fresh copy in every forward and again in every backward,
 * per micro-batch; one packing per optimizer step does (trainable fp32 weights only: a W stored
 * in bf16 or NF4 is packed per call, matmul_autocast.c says why).
 *
 * Invariants:
 *  1. An entry is the packing of the weights at [src, src + bytes) as they were when packed,
 *     in one layout (W^T for the forward, W for dX).
 *  2. Whoever writes weights a product may have read calls gemm_bf16_weights_changed over the
 *     bytes written, which drops every entry overlapping them: adamw_step after each update,
 *     train_reference_sync, lora_merge, model_free (freed memory may come back as other
 *     weights).
 *  3. A guard for a writer that does not (a checkpoint read over the weights, memory freed
 *     elsewhere and reused): each lookup compares a fingerprint of the weights, all values of a
 *     small W and 512 spread over a large one, and repacks on a mismatch. A change of the
 *     whole matrix is always seen; a change of a few values the samples miss is not, which is
 *     why invariant 2 is the rule and this only its guard.
 *  4. Kept ranges (gemm_bf16_keep_packed) only say which bf16 weights the callers look up here
 *     rather than pack per call; gemm_bf16_weights_changed over any part of one ends it, as it
 *     drops the entries in it (invariant 2), so memory freed and reused is never taken for it.
 *  5. Lookups and drops hold one mutex; a returned packing stays valid until the next drop or
 *     update, so a product uses it at once and keeps nothing (products and weight updates do
 *     not overlap).
 *  6. gemm_bf16_weights_updated (an optimizer step: the same weights, new values) marks the
 *     entries overlapping the bytes stale instead of dropping them: a stale entry is never
 *     returned as it is; its next lookup packs the weights again into the entry's own buffer
 *     (bf16_repack_b). Fresh buffers for the whole model every step cost the bf16 DPO step of
 *     the 135M shape ~40% of its page faults (perf, 2026-11-28); the buffer is what invariant 2's
 *     drop would have freed and the next step's packing allocated again, so the memory held
 *     between steps is the one the step itself holds.
 *  7. An optimizer that updates an fp32 W may instead pack its entries again itself, rows as it
 *     updates them (bf16_weight_repack_begin / _rows / _done; adamw_f32_update_repacking): the
 *     rows are in its cache then, where the next lookup's repack reads the whole W again from
 *     memory. begin copies the entries (their buffers stay until a drop, and no lookup or drop
 *     runs during an optimizer step: invariant 5), _rows writes only the rows' part of each,
 *     and _done marks the entries fresh with the fingerprint of the updated W, so only then may
 *     a lookup return them. An entry updated another way stays stale (invariant 6). */
#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FINGERPRINT_SAMPLES 512

typedef struct {
    const void *src;
    size_t bytes;
    bool transposed;
    int out_dim, in_dim;
    uint64_t fingerprint;
    bool stale; /* invariant 6: packed from values since updated */
    Bf16PackedB packed;
} Entry;

static Entry *entries;
static int n_entries, cap_entries;

typedef struct {
    const char *begin, *end;
} Range;

static Range *kept; /* invariant 4 */
static int n_kept, cap_kept;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a over the bytes of the sampled values (all of them when there are few). */
static uint64_t fingerprint(const unsigned char *p, size_t count, size_t elem) {
    uint64_t h = 1469598103934665603ull;
    size_t samples = count <= 4 * FINGERPRINT_SAMPLES ? count : FINGERPRINT_SAMPLES;
    for (size_t s = 0; s < samples; s++) {
        size_t at = samples == count ? s : s * (count - 1) / (samples - 1);
        for (size_t b = 0; b < elem; b++)
            h = (h ^ p[at * elem + b]) * 1099511628211ull;
    }
    return h;
}

static void drop(int i) {
    bf16_packed_b_free(&entries[i].packed);
    entries[i] = entries[--n_entries];
}

/* W (out_dim, in_dim) row-major, fp32 w32 or else bf16 w16, as a source: the forward's B is
 * W^T (in_dim x out_dim), dX's is W. */
static Bf16Source weight_source(const float *w32, const uint16_t *w16, int in_dim,
                                bool transposed) {
    return (Bf16Source){.f32 = w32,
                        .bf16 = w32 ? NULL : w16,
                        .row_stride = transposed ? 1 : (size_t)in_dim,
                        .col_stride = transposed ? (size_t)in_dim : 1};
}

/* The lookup; `checked` false skips invariant 3's fingerprint on a hit
 * (bf16_weight_packed_unchanged). */
static const Bf16PackedB *lookup(const float *w32, const uint16_t *w16, int out_dim, int in_dim,
                                 bool transposed, bool checked) {
    const void *src = w32 ? (const void *)w32 : (const void *)w16;
    size_t elem = w32 ? sizeof *w32 : sizeof *w16, count = (size_t)out_dim * in_dim;
    uint64_t fp = checked ? fingerprint(src, count, elem) : 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_entries; i++) {
        Entry *e = &entries[i];
        if (e->src != src || e->transposed != transposed || e->out_dim != out_dim ||
            e->in_dim != in_dim || e->bytes != count * elem)
            continue;
        if (e->stale) { /* invariant 6: packed again in place */
            e->fingerprint = checked ? fp : fingerprint(src, count, elem);
            e->stale = false;
            bf16_repack_b(&e->packed, weight_source(w32, w16, in_dim, transposed));
            pthread_mutex_unlock(&cache_lock);
            return &e->packed;
        }
        if (!checked || e->fingerprint == fp) {
            pthread_mutex_unlock(&cache_lock);
            return &e->packed;
        }
        drop(i); /* invariant 3: written behind our back */
        break;
    }
    if (!checked) fp = fingerprint(src, count, elem); /* a new entry's, to check it later */
    if (n_entries == cap_entries) {
        cap_entries = cap_entries ? 2 * cap_entries : 64;
        entries = xrealloc(entries, (size_t)cap_entries * sizeof *entries);
    }
    Entry *e = &entries[n_entries++];
    *e = (Entry){.src = src,
                 .bytes = count * elem,
                 .transposed = transposed,
                 .out_dim = out_dim,
                 .in_dim = in_dim,
                 .fingerprint = fp};
    Bf16Source s = weight_source(w32, w16, in_dim, transposed);
    if (transposed)
        bf16_pack_b(&e->packed, s, in_dim, out_dim);
    else
        bf16_pack_b(&e->packed, s, out_dim, in_dim);
    pthread_mutex_unlock(&cache_lock);
    return &e->packed;
}

const Bf16PackedB *bf16_weight_packed(const float *w32, const uint16_t *w16, int out_dim,
                                      int in_dim, bool transposed) {
    return lookup(w32, w16, out_dim, in_dim, transposed, true);
}

const Bf16PackedB *bf16_weight_packed_unchanged(const float *w32, const uint16_t *w16, int out_dim,
                                                int in_dim, bool transposed) {
    return lookup(w32, w16, out_dim, in_dim, transposed, false);
}

void gemm_bf16_keep_packed(const void *begin, size_t bytes) {
    if (!begin || !bytes) return;
    pthread_mutex_lock(&cache_lock);
    if (n_kept == cap_kept) {
        cap_kept = cap_kept ? 2 * cap_kept : 8;
        kept = xrealloc(kept, (size_t)cap_kept * sizeof *kept);
    }
    kept[n_kept++] = (Range){begin, (const char *)begin + bytes};
    pthread_mutex_unlock(&cache_lock);
}

bool gemm_bf16_weight_kept(const uint16_t *w16) {
    if (!w16) return false;
    const char *p = (const char *)w16;
    bool found = false;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_kept && !found; i++)
        found = kept[i].begin <= p && p < kept[i].end;
    pthread_mutex_unlock(&cache_lock);
    return found;
}

void gemm_bf16_weights_changed(const void *begin, size_t bytes) {
    if (!begin || !bytes) return;
    const char *lo = begin, *hi = lo + bytes;
    pthread_mutex_lock(&cache_lock);
    for (int i = n_kept - 1; i >= 0; i--) /* invariant 4 */
        if (kept[i].begin < hi && lo < kept[i].end) kept[i] = kept[--n_kept];
    for (int i = n_entries - 1; i >= 0; i--) {
        const char *s = entries[i].src;
        if (s < hi && lo < s + entries[i].bytes) drop(i);
    }
    pthread_mutex_unlock(&cache_lock);
}

void gemm_bf16_weights_updated(const void *begin, size_t bytes) {
    if (!begin || !bytes) return;
    const char *lo = begin, *hi = lo + bytes;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_entries; i++) { /* invariant 6 */
        const char *s = entries[i].src;
        if (s < hi && lo < s + entries[i].bytes) entries[i].stale = true;
    }
    pthread_mutex_unlock(&cache_lock);
}

int bf16_weight_repack_begin(Bf16WeightRepack *r, const float *w, size_t numel) {
    r->count = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_entries && r->count < 2; i++) {
        const Entry *e = &entries[i];
        if (e->src != (const void *)w || e->bytes != numel * sizeof *w || e->in_dim < 2 ||
            (r->count && (e->out_dim != r->out_dim || e->in_dim != r->in_dim)))
            continue;
        r->w = w, r->out_dim = e->out_dim, r->in_dim = e->in_dim;
        r->transposed[r->count] = e->transposed;
        r->packed[r->count++] = e->packed;
    }
    pthread_mutex_unlock(&cache_lock);
    return r->count;
}

void bf16_weight_repack_rows(const Bf16WeightRepack *r, int r0, int r1) {
    for (int k = 0; k < r->count; k++) {
        Bf16PackedB b = r->packed[k];
        bf16_repack_b_rows(&b, r->w, r->in_dim, r->transposed[k], r0, r1);
    }
}

void bf16_weight_repack_done(const Bf16WeightRepack *r) {
    if (!r->count) return;
    size_t count = (size_t)r->out_dim * r->in_dim;
    uint64_t fp = fingerprint((const unsigned char *)r->w, count, sizeof *r->w);
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_entries; i++) {
        Entry *e = &entries[i];
        for (int k = 0; k < r->count; k++)
            if (e->src == (const void *)r->w && e->transposed == r->transposed[k] &&
                e->packed.data == r->packed[k].data) {
                e->fingerprint = fp;
                e->stale = false;
            }
    }
    pthread_mutex_unlock(&cache_lock);
}

void gemm_bf16_cache_clear(void) {
    pthread_mutex_lock(&cache_lock);
    while (n_entries > 0)
        drop(n_entries - 1);
    free(entries);
    entries = NULL;
    cap_entries = 0;
    pthread_mutex_unlock(&cache_lock);
}

size_t gemm_bf16_cache_bytes(void) {
    size_t total = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_entries; i++)
        total += (size_t)entries[i].packed.depth_padded * entries[i].packed.cols_padded * 2;
    pthread_mutex_unlock(&cache_lock);
    return total;
}
