#include "grpo/grpo_share.h"

#include "common/error.h"
#include "dist/dist.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A row travels as one record: its length (int32), its ids (int32 each), its K rewards (f64
 * each), unaligned (memcpy in and out). Rank order is row order, so the gathered records are
 * the batch's rows in order. */
static size_t record_bytes(int len, int K) {
    return sizeof(int32_t) * (1 + (size_t)len) + sizeof(double) * (size_t)K;
}

void grpo_share_completions(Completion *comp, double *rewards, int rows, int K, int lo, int hi) {
    if (dist_size() == 1) return;
    size_t bytes = 0;
    for (int i = lo; i < hi; i++)
        bytes += record_bytes(comp[i].len, K);
    char *send = xmalloc(bytes ? bytes : 1), *p = send;
    for (int i = lo; i < hi; i++) {
        int32_t len = comp[i].len;
        memcpy(p, &len, sizeof len), p += sizeof len;
        memcpy(p, comp[i].ids, (size_t)len * sizeof(int32_t)), p += (size_t)len * sizeof(int32_t);
        memcpy(p, rewards + (size_t)i * K, (size_t)K * sizeof(double)), p += K * sizeof(double);
    }
    void *all;
    size_t total;
    dist_allgatherv_bytes(send, bytes, &all, &total, NULL);
    free(send);
    const char *q = all;
    for (int i = 0; i < rows; i++) {
        int32_t len;
        memcpy(&len, q, sizeof len);
        if (i < lo || i >= hi) { /* this rank's own rows are already in place */
            comp[i].len = len;
            comp[i].ids = xmalloc((size_t)(len ? len : 1) * sizeof(int32_t));
            memcpy(comp[i].ids, q + sizeof len, (size_t)len * sizeof(int32_t));
            memcpy(rewards + (size_t)i * K, q + sizeof(int32_t) * (1 + (size_t)len),
                   (size_t)K * sizeof(double));
        }
        q += record_bytes(len, K);
    }
    /* the ranks' runs not tiling the batch is a bug in the caller, not bad input */
    if ((size_t)(q - (const char *)all) != total) abort();
    free(all);
}

void grpo_share_scatter_completions(Completion *comp, int rows, int lo, int hi) {
    if (dist_size() == 1) return;
    /* every row as one record (K = 0: ids alone), broadcast whole: each rank's run is read out
     * of it, which costs the other ranks' ids in transfer and saves a scatter of records of
     * unequal sizes */
    uint64_t bytes = 0;
    char *all = NULL;
    if (dist_is_root()) {
        for (int i = 0; i < rows; i++)
            bytes += record_bytes(comp[i].len, 0);
        char *p = all = xmalloc(bytes ? bytes : 1);
        for (int i = 0; i < rows; i++) {
            int32_t len = comp[i].len;
            memcpy(p, &len, sizeof len), p += sizeof len;
            memcpy(p, comp[i].ids, (size_t)len * sizeof(int32_t)),
                p += (size_t)len * sizeof(int32_t);
        }
    }
    dist_bcast(&bytes, sizeof bytes, 0);
    if (!dist_is_root()) all = xmalloc(bytes ? bytes : 1);
    dist_bcast(all, (size_t)bytes, 0);
    const char *q = all;
    for (int i = 0; i < rows; i++) {
        int32_t len;
        memcpy(&len, q, sizeof len);
        if (dist_is_root() && (i < lo || i >= hi)) {
            completions_free(&comp[i], 1);
        } else if (!dist_is_root() && i >= lo && i < hi) {
            comp[i].len = len;
            comp[i].ids = xmalloc((size_t)(len ? len : 1) * sizeof(int32_t));
            memcpy(comp[i].ids, q + sizeof len, (size_t)len * sizeof(int32_t));
        }
        q += record_bytes(len, 0);
    }
    if ((uint64_t)(q - all) != bytes) abort(); /* a caller's bug, as below */
    free(all);
}

void grpo_share_rows_f32(float *values, int rows, int width, int lo, int hi) {
    if (dist_size() == 1) return;
    size_t row_bytes = (size_t)width * sizeof(float);
    void *all;
    size_t total;
    dist_allgatherv_bytes(values + (size_t)lo * width, (size_t)(hi - lo) * row_bytes, &all, &total,
                          NULL);
    if (total != (size_t)rows * row_bytes) abort(); /* as above: a caller's bug */
    memcpy(values, all, total);
    free(all);
}
