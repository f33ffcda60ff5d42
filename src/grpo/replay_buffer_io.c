/* The replay buffer on disk, for checkpoints (TRL keeps none, §6.4 step 6): a safetensors file,
 * written atomically, whose tensors are
 *
 *   format_version  I64 [1]     REPLAY_FORMAT_VERSION
 *   capacity        I64 [1]     of the buffer that saved it (informational; n <= capacity)
 *   next_counter    U64 [1]     the counter the next stored entry gets
 *   group_size      I64 [1]     G (0 when there are no entries)
 *   scores          F64 [n]     finite, >= 0
 *   counters        U64 [n]     distinct, < next_counter
 *   has_logps       U8  [n, 2]  per entry: old log-probs stored, reference log-probs stored (0/1)
 *   prompt_len      I32 [n, G]
 *   completion_len  I32 [n, G]
 *   advantages      F32 [n, G]  finite
 *   prompt_ids      I32 [sum of prompt_len]       the entries' real prompt tokens, row by row
 *   completion_ids  I32 [sum of completion_len]   likewise for completions
 *   completion_mask U8  [sum of completion_len]   0/1
 *   old_logps       F32 [sum of completion_len over the entries with old log-probs]
 *   ref_logps       F32 [likewise for reference log-probs]
 *
 * entries in insertion order. Per-entry flags rather than one per file keep a buffer whose
 * entries differ (stored under different configurations) representable as it is. The reader
 * accepts exactly these tensors with exactly these dtypes and shapes; everything the format
 * promises is checked before any entry is built. */
#include "common/error.h"
#include "io/safetensors.h"
#include "grpo/replay_buffer.h"
#include "grpo/replay_buffer_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_FORMAT_VERSION 1

enum {
    T_VERSION,
    T_CAPACITY,
    T_NEXT_COUNTER,
    T_GROUP_SIZE,
    T_SCORES,
    T_COUNTERS,
    T_HAS_LOGPS,
    T_PROMPT_LEN,
    T_COMPLETION_LEN,
    T_ADVANTAGES,
    T_PROMPT_IDS,
    T_COMPLETION_IDS,
    T_COMPLETION_MASK,
    T_OLD_LOGPS,
    T_REF_LOGPS,
    T_COUNT
};

static const char *const tensor_names[T_COUNT] = {
    "format_version", "capacity",       "next_counter",    "group_size",     "scores",
    "counters",       "has_logps",      "prompt_len",      "completion_len", "advantages",
    "prompt_ids",     "completion_ids", "completion_mask", "old_logps",      "ref_logps"};

static SafetensorsWriteTensor vec(int t, SafetensorsDtype dt, size_t n, const void *data) {
    return (SafetensorsWriteTensor){tensor_names[t], dt, 1, {(int64_t)n}, data};
}

static SafetensorsWriteTensor mat(int t, SafetensorsDtype dt, size_t n, size_t m,
                                  const void *data) {
    return (SafetensorsWriteTensor){tensor_names[t], dt, 2, {(int64_t)n, (int64_t)m}, data};
}

int replay_buffer_save(const ReplayBuffer *rb, const char *path) {
    size_t n = (size_t)rb->size, G = n ? (size_t)rb->heap[0].group_size : 0;
    const ReplayEntry **order = xmalloc(replay_nz(n) * sizeof *order);
    size_t np = 0, nc = 0, no = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        order[i] = &rb->heap[i];
        size_t c = replay_entry_completion_tokens(order[i]);
        np += replay_entry_prompt_tokens(order[i]), nc += c;
        no += order[i]->old_logps ? c : 0, nr += order[i]->ref_logps ? c : 0;
    }
    qsort(order, n, sizeof *order, replay_entry_ptr_by_counter);

    int64_t version = REPLAY_FORMAT_VERSION, capacity = rb->capacity, group = (int64_t)G;
    uint64_t next = rb->next_counter;
    double *scores = xmalloc(replay_nz(n) * sizeof *scores);
    uint64_t *counters = xmalloc(replay_nz(n) * sizeof *counters);
    uint8_t *has = xmalloc(replay_nz(2 * n));
    int32_t *plen = xmalloc(replay_nz(n * G) * sizeof *plen);
    int32_t *clen = xmalloc(replay_nz(n * G) * sizeof *clen);
    float *adv = xmalloc(replay_nz(n * G) * sizeof *adv);
    int32_t *pids = xmalloc(replay_nz(np) * sizeof *pids);
    int32_t *cids = xmalloc(replay_nz(nc) * sizeof *cids);
    uint8_t *cmask = xmalloc(replay_nz(nc));
    float *old = xmalloc(replay_nz(no) * sizeof *old);
    float *ref = xmalloc(replay_nz(nr) * sizeof *ref);
    size_t po = 0, co = 0, oo = 0, ro = 0;
    for (size_t i = 0; i < n; i++) {
        const ReplayEntry *e = order[i];
        size_t ep = replay_entry_prompt_tokens(e), ec = replay_entry_completion_tokens(e);
        scores[i] = e->score, counters[i] = e->counter;
        has[2 * i] = e->old_logps != NULL, has[2 * i + 1] = e->ref_logps != NULL;
        for (size_t j = 0; j < G; j++) {
            plen[i * G + j] = e->prompt_len[j], clen[i * G + j] = e->completion_len[j];
            adv[i * G + j] = e->advantages[j];
        }
        memcpy(pids + po, e->prompt_ids, ep * sizeof *pids);
        memcpy(cids + co, e->completion_ids, ec * sizeof *cids);
        memcpy(cmask + co, e->completion_mask, ec);
        if (e->old_logps) memcpy(old + oo, e->old_logps, ec * sizeof *old), oo += ec;
        if (e->ref_logps) memcpy(ref + ro, e->ref_logps, ec * sizeof *ref), ro += ec;
        po += ep, co += ec;
    }
    SafetensorsWriteTensor t[T_COUNT] = {
        [T_VERSION] = vec(T_VERSION, ST_I64, 1, &version),
        [T_CAPACITY] = vec(T_CAPACITY, ST_I64, 1, &capacity),
        [T_NEXT_COUNTER] = vec(T_NEXT_COUNTER, ST_U64, 1, &next),
        [T_GROUP_SIZE] = vec(T_GROUP_SIZE, ST_I64, 1, &group),
        [T_SCORES] = vec(T_SCORES, ST_F64, n, scores),
        [T_COUNTERS] = vec(T_COUNTERS, ST_U64, n, counters),
        [T_HAS_LOGPS] = mat(T_HAS_LOGPS, ST_U8, n, 2, has),
        [T_PROMPT_LEN] = mat(T_PROMPT_LEN, ST_I32, n, G, plen),
        [T_COMPLETION_LEN] = mat(T_COMPLETION_LEN, ST_I32, n, G, clen),
        [T_ADVANTAGES] = mat(T_ADVANTAGES, ST_F32, n, G, adv),
        [T_PROMPT_IDS] = vec(T_PROMPT_IDS, ST_I32, np, pids),
        [T_COMPLETION_IDS] = vec(T_COMPLETION_IDS, ST_I32, nc, cids),
        [T_COMPLETION_MASK] = vec(T_COMPLETION_MASK, ST_U8, nc, cmask),
        [T_OLD_LOGPS] = vec(T_OLD_LOGPS, ST_F32, no, old),
        [T_REF_LOGPS] = vec(T_REF_LOGPS, ST_F32, nr, ref),
    };
    int rc = safetensors_write(path, t, T_COUNT);
    if (rc != 0) err_prefix("replay buffer");
    free(order), free(scores), free(counters), free(has), free(plen), free(clen), free(adv);
    free(pids), free(cids), free(cmask), free(old), free(ref);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    const SafetensorsTensor *t[T_COUNT];
} Tensors;

/* Every tensor present, with its dtype and rank, and nothing else in the file. */
static int find_tensors(const SafetensorsFile *f, Tensors *ts) {
    static const SafetensorsDtype dtypes[T_COUNT] = {ST_I64, ST_I64, ST_U64, ST_I64, ST_F64,
                                                     ST_U64, ST_U8,  ST_I32, ST_I32, ST_F32,
                                                     ST_I32, ST_I32, ST_U8,  ST_F32, ST_F32};
    static const int ranks[T_COUNT] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1};
    for (int i = 0; i < T_COUNT; i++) {
        const SafetensorsTensor *t = safetensors_find(f, tensor_names[i]);
        if (!t) return err_set("no tensor \"%s\" (not a replay buffer file?)", tensor_names[i]);
        if (t->dtype != dtypes[i] || t->ndim != ranks[i])
            return err_set("tensor \"%s\": %s of rank %d, expected %s of rank %d", tensor_names[i],
                           safetensors_dtype_name(t->dtype), t->ndim,
                           safetensors_dtype_name(dtypes[i]), ranks[i]);
        ts->t[i] = t;
    }
    if (f->n_tensors != T_COUNT) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            bool known = false;
            for (int k = 0; k < T_COUNT; k++)
                known |= strcmp(f->tensors[i].name, tensor_names[k]) == 0;
            if (!known) return err_set("unexpected tensor \"%s\"", f->tensors[i].name);
        }
    }
    return 0;
}

static int expect_shape(const SafetensorsTensor *t, int64_t d0, int64_t d1) {
    if (t->shape[0] != d0 || (t->ndim == 2 && t->shape[1] != d1)) {
        if (t->ndim == 2)
            return err_set("tensor \"%s\": shape [%lld, %lld], expected [%lld, %lld]", t->name,
                           (long long)t->shape[0], (long long)t->shape[1], (long long)d0,
                           (long long)d1);
        return err_set("tensor \"%s\": shape [%lld], expected [%lld]", t->name,
                       (long long)t->shape[0], (long long)d0);
    }
    return 0;
}

/* Element i of a tensor, copied out (the mapping promises no alignment). */
static int64_t get_i64(const SafetensorsTensor *t, size_t i) {
    int64_t v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static uint64_t get_u64(const SafetensorsTensor *t, size_t i) {
    uint64_t v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static double get_f64(const SafetensorsTensor *t, size_t i) {
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static int32_t get_i32(const SafetensorsTensor *t, size_t i) {
    int32_t v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}
static float get_f32(const SafetensorsTensor *t, size_t i) {
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}
static uint8_t get_u8(const SafetensorsTensor *t, size_t i) {
    return ((const uint8_t *)t->data)[i];
}

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Every property the layout promises, on the raw tensors. */
static int validate(const Tensors *ts, size_t *n_out, size_t *g_out) {
    const SafetensorsTensor *const *t = ts->t;
    for (int i = T_VERSION; i <= T_GROUP_SIZE; i++)
        if (expect_shape(t[i], 1, 0) != 0) return -1;
    int64_t version = get_i64(t[T_VERSION], 0), capacity = get_i64(t[T_CAPACITY], 0);
    int64_t group = get_i64(t[T_GROUP_SIZE], 0);
    uint64_t next = get_u64(t[T_NEXT_COUNTER], 0);
    if (version != REPLAY_FORMAT_VERSION)
        return err_set("format version %lld, this build reads version %d", (long long)version,
                       REPLAY_FORMAT_VERSION);
    int64_t n = t[T_SCORES]->shape[0];
    if (capacity < 0 || capacity > INT_MAX || n > capacity)
        return err_set("%lld entries in a buffer of capacity %lld", (long long)n,
                       (long long)capacity);
    if (group < 0 || group > INT_MAX || (n > 0 && group == 0))
        return err_set("group_size %lld is not valid", (long long)group);
    if (expect_shape(t[T_COUNTERS], n, 0) || expect_shape(t[T_HAS_LOGPS], n, 2) ||
        expect_shape(t[T_PROMPT_LEN], n, group) || expect_shape(t[T_COMPLETION_LEN], n, group) ||
        expect_shape(t[T_ADVANTAGES], n, group))
        return -1;

    uint64_t np = 0, nc = 0, no = 0, nr = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        double s = get_f64(t[T_SCORES], i);
        if (!isfinite(s) || s < 0)
            return err_set("entry %zu: score %g is not finite and >= 0", i, s);
        if (get_u64(t[T_COUNTERS], i) >= next)
            return err_set("entry %zu: counter %llu is not below next_counter %llu", i,
                           (unsigned long long)get_u64(t[T_COUNTERS], i), (unsigned long long)next);
        uint8_t ho = get_u8(t[T_HAS_LOGPS], 2 * i), hr = get_u8(t[T_HAS_LOGPS], 2 * i + 1);
        if (ho > 1 || hr > 1) return err_set("entry %zu: has_logps values must be 0 or 1", i);
        uint64_t entry_c = 0;
        for (size_t j = 0; j < (size_t)group; j++) {
            int32_t pl = get_i32(t[T_PROMPT_LEN], i * (size_t)group + j);
            int32_t cl = get_i32(t[T_COMPLETION_LEN], i * (size_t)group + j);
            if (pl < 0 || cl < 0)
                return err_set("entry %zu row %zu: negative length (prompt %d, completion %d)", i,
                               j, (int)pl, (int)cl);
            if (!isfinite(get_f32(t[T_ADVANTAGES], i * (size_t)group + j)))
                return err_set("entry %zu row %zu: advantage is not finite", i, j);
            np += (uint64_t)pl, entry_c += (uint64_t)cl;
        }
        nc += entry_c, no += ho ? entry_c : 0, nr += hr ? entry_c : 0;
    }
    if (expect_shape(t[T_PROMPT_IDS], (int64_t)np, 0) ||
        expect_shape(t[T_COMPLETION_IDS], (int64_t)nc, 0) ||
        expect_shape(t[T_COMPLETION_MASK], (int64_t)nc, 0) ||
        expect_shape(t[T_OLD_LOGPS], (int64_t)no, 0) ||
        expect_shape(t[T_REF_LOGPS], (int64_t)nr, 0))
        return err_prefix("the lengths do not add up");
    for (size_t i = 0; i < (size_t)nc; i++)
        if (get_u8(t[T_COMPLETION_MASK], i) > 1)
            return err_set("completion_mask[%zu] is %d, expected 0 or 1", i,
                           get_u8(t[T_COMPLETION_MASK], i));

    uint64_t *sorted = xmalloc(replay_nz((size_t)n) * sizeof *sorted);
    for (size_t i = 0; i < (size_t)n; i++)
        sorted[i] = get_u64(t[T_COUNTERS], i);
    qsort(sorted, (size_t)n, sizeof *sorted, u64_cmp);
    int rc = 0;
    for (size_t i = 1; i < (size_t)n && rc == 0; i++)
        if (sorted[i] == sorted[i - 1])
            rc = err_set("counter %llu appears twice", (unsigned long long)sorted[i]);
    free(sorted);
    if (rc != 0) return rc;
    *n_out = (size_t)n, *g_out = (size_t)group;
    return 0;
}

/* The entries of a validated file, in file order. */
static ReplayEntry *build_entries(const Tensors *ts, size_t n, size_t G) {
    const SafetensorsTensor *const *t = ts->t;
    ReplayEntry *es = xcalloc(replay_nz(n), sizeof *es);
    size_t po = 0, co = 0, oo = 0, ro = 0;
    for (size_t i = 0; i < n; i++) {
        ReplayEntry *e = &es[i];
        e->group_size = (int)G;
        e->score = get_f64(t[T_SCORES], i);
        e->counter = get_u64(t[T_COUNTERS], i);
        e->prompt_len = xmalloc(replay_nz(G) * sizeof(int));
        e->completion_len = xmalloc(replay_nz(G) * sizeof(int));
        e->advantages = xmalloc(replay_nz(G) * sizeof(float));
        for (size_t j = 0; j < G; j++) {
            e->prompt_len[j] = get_i32(t[T_PROMPT_LEN], i * G + j);
            e->completion_len[j] = get_i32(t[T_COMPLETION_LEN], i * G + j);
            e->advantages[j] = get_f32(t[T_ADVANTAGES], i * G + j);
        }
        size_t np = replay_entry_prompt_tokens(e), nc = replay_entry_completion_tokens(e);
        e->prompt_ids = xmalloc(replay_nz(np) * sizeof(int32_t));
        e->completion_ids = xmalloc(replay_nz(nc) * sizeof(int32_t));
        e->completion_mask = xmalloc(replay_nz(nc));
        if (np) memcpy(e->prompt_ids, (const int32_t *)t[T_PROMPT_IDS]->data + po, np * 4);
        if (nc) memcpy(e->completion_ids, (const int32_t *)t[T_COMPLETION_IDS]->data + co, nc * 4);
        if (nc) memcpy(e->completion_mask, (const uint8_t *)t[T_COMPLETION_MASK]->data + co, nc);
        if (get_u8(t[T_HAS_LOGPS], 2 * i)) {
            e->old_logps = xmalloc(replay_nz(nc) * sizeof(float));
            if (nc) memcpy(e->old_logps, (const float *)t[T_OLD_LOGPS]->data + oo, nc * 4);
            oo += nc;
        }
        if (get_u8(t[T_HAS_LOGPS], 2 * i + 1)) {
            e->ref_logps = xmalloc(replay_nz(nc) * sizeof(float));
            if (nc) memcpy(e->ref_logps, (const float *)t[T_REF_LOGPS]->data + ro, nc * 4);
            ro += nc;
        }
        po += np, co += nc;
    }
    return es;
}

int replay_buffer_load(ReplayBuffer *rb, const char *path) {
    SafetensorsFile f;
    if (safetensors_open(&f, path) != 0) return err_prefix("replay buffer");
    Tensors ts;
    size_t n = 0, G = 0;
    if (find_tensors(&f, &ts) != 0 || validate(&ts, &n, &G) != 0) {
        safetensors_close(&f);
        err_prefix("%s: invalid replay buffer file", path);
        return -1;
    }
    ReplayEntry *es = build_entries(&ts, n, G);
    ReplayBuffer fresh;
    replay_buffer_init(&fresh, rb->capacity);
    fresh.next_counter = get_u64(ts.t[T_NEXT_COUNTER], 0);
    safetensors_close(&f);

    /* Offers compare under invariant 1's total order (counters included), so offering in file
     * order keeps exactly the best `capacity`. */
    for (size_t i = 0; i < n; i++)
        replay_buffer_offer(&fresh, &es[i]);
    free(es);
    replay_buffer_free(rb);
    *rb = fresh;
    return 0;
}
