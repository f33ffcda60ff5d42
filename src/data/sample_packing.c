#include "data/sample_packing.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* Bins under construction: bin b's members are a linked list through next[] (placement order),
 * so that first-fit can add to any open bin without moving the others. */
typedef struct {
    size_t n, cap;
    int64_t *room; /* tokens left */
    size_t *count; /* examples held */
    size_t *head;  /* first member's slot in the example arrays, tail: last */
    size_t *tail;
} OpenBins;

static size_t open_bin(OpenBins *ob, int64_t capacity) {
    if (ob->n == ob->cap) {
        ob->cap = ob->cap ? 2 * ob->cap : 64;
        ob->room = xrealloc(ob->room, ob->cap * sizeof *ob->room);
        ob->count = xrealloc(ob->count, ob->cap * sizeof *ob->count);
        ob->head = xrealloc(ob->head, ob->cap * sizeof *ob->head);
        ob->tail = xrealloc(ob->tail, ob->cap * sizeof *ob->tail);
    }
    ob->room[ob->n] = capacity, ob->count[ob->n] = 0;
    return ob->n++;
}

#define NO_NEXT ((size_t)-1)

/* Adds example slot k (of length len) to bin b. */
static void place(OpenBins *ob, size_t *next, size_t b, size_t k, int len) {
    next[k] = NO_NEXT;
    if (ob->count[b]++ == 0)
        ob->head[b] = k;
    else
        next[ob->tail[b]] = k;
    ob->tail[b] = k;
    ob->room[b] -= len;
}

void sample_packing_pack(const SftDataset *ds, const size_t *order, size_t n,
                         const PackingOptions *opt, PackedBins *bins) {
    memset(bins, 0, sizeof *bins);
    OpenBins ob = {0};
    size_t *next = xmalloc((n ? n : 1) * sizeof *next);
    size_t group_first_bin = 0;
    for (size_t k = 0; k < n; k++) {
        int len = ds->items[order[k]].len;
        bins->tokens += (size_t)len;
        size_t b = NO_NEXT;
        if (opt->sequential) {
            /* next-fit: only the last bin is open */
            if (ob.n && ob.room[ob.n - 1] >= len) b = ob.n - 1;
        } else {
            if (k % (size_t)opt->group_size == 0) group_first_bin = ob.n;
            for (size_t c = group_first_bin; c < ob.n && b == NO_NEXT; c++)
                if (ob.room[c] >= len && ob.count[c] < (size_t)opt->bin_size) b = c;
        }
        if (b == NO_NEXT) b = open_bin(&ob, opt->capacity);
        place(&ob, next, b, k, len);
    }
    bins->n_bins = ob.n;
    bins->start = xmalloc((ob.n + 1) * sizeof *bins->start);
    bins->members = xmalloc((n ? n : 1) * sizeof *bins->members);
    size_t m = 0;
    for (size_t b = 0; b < ob.n; b++) {
        bins->start[b] = m;
        for (size_t k = ob.head[b]; k != NO_NEXT; k = next[k])
            bins->members[m++] = order[k];
    }
    bins->start[ob.n] = m;
    free(next);
    free(ob.room), free(ob.count), free(ob.head), free(ob.tail);
}

void sample_packing_free(PackedBins *bins) {
    free(bins->start);
    free(bins->members);
    memset(bins, 0, sizeof *bins);
}

double sample_packing_efficiency(const PackedBins *bins, int64_t capacity) {
    return bins->n_bins ? (double)bins->tokens / ((double)bins->n_bins * (double)capacity) : 0.0;
}

static size_t bin_tokens(const SftDataset *ds, const PackedBins *bins, size_t b) {
    size_t t = 0;
    for (size_t k = bins->start[b]; k < bins->start[b + 1]; k++)
        t += (size_t)ds->items[bins->members[k]].len;
    return t;
}

void sample_packing_rows(const SftDataset *ds, const PackedBins *bins, size_t first_bin, int count,
                         int32_t pad_id, PackedRows *out) {
    memset(out, 0, sizeof *out);
    size_t t_len = 1;
    for (int r = 0; r < count; r++) {
        size_t t = bin_tokens(ds, bins, first_bin + (size_t)r);
        if (t > t_len) t_len = t;
    }
    size_t cells = (size_t)count * t_len;
    out->rows = count, out->t_len = (int)t_len;
    out->tokens = xmalloc(cells * sizeof *out->tokens);
    out->positions = xcalloc(cells, sizeof *out->positions);
    out->attn = xcalloc(cells, 1);
    out->labels = xcalloc(cells, 1);
    for (size_t i = 0; i < cells; i++)
        out->tokens[i] = pad_id;
    for (int r = 0; r < count; r++) {
        size_t b = first_bin + (size_t)r, at = (size_t)r * t_len;
        for (size_t k = bins->start[b]; k < bins->start[b + 1]; k++) {
            const SftExample *e = &ds->items[bins->members[k]];
            size_t len = (size_t)e->len;
            memcpy(out->tokens + at, e->ids, len * sizeof *e->ids);
            memcpy(out->labels + at, e->labels, len);
            memset(out->attn + at, 1, len);
            for (size_t t = 0; t < len; t++)
                out->positions[at + t] = (int32_t)t;
            at += len;
            out->tokens_real += len;
        }
        out->labels[(size_t)r * t_len] = 0;
    }
}

void sample_packing_rows_free(PackedRows *r) {
    free(r->tokens), free(r->positions), free(r->attn), free(r->labels);
    memset(r, 0, sizeof *r);
}
