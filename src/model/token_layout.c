#include "model/token_layout.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

static bool cell_real(const TokenBatch *b, size_t i) {
    return !b->attn_mask || b->attn_mask[i];
}

static int32_t cell_position(const TokenBatch *b, size_t i) {
    return b->positions ? b->positions[i] : (int32_t)(i % (size_t)b->t_len);
}

/* How many leading cells rows r and s have in common. */
static int common_prefix(const TokenBatch *b, int r, int s) {
    size_t T = (size_t)b->t_len, ri = (size_t)r * T, si = (size_t)s * T;
    int t = 0;
    for (; t < b->t_len; t++) {
        bool real = cell_real(b, ri + t);
        if (real != cell_real(b, si + t)) break;
        if (real && (b->tokens[ri + t] != b->tokens[si + t] ||
                     cell_position(b, ri + t) != cell_position(b, si + t)))
            break;
    }
    return t;
}

static int real_cells(const TokenBatch *b, int r, int t_end) {
    int count = 0;
    for (int t = 0; t < t_end; t++)
        count += cell_real(b, (size_t)r * b->t_len + t);
    return count;
}

/* The earlier unshared row whose common prefix with r holds the most real cells (at least
 * LAYOUT_MIN_SHARED), or -1; *cells receives that prefix's length in cells. */
static int best_source(const TokenBatch *b, const int *source, int r, int *cells) {
    int best = -1, best_real = LAYOUT_MIN_SHARED - 1;
    for (int s = 0; s < r; s++) {
        if (source[s] >= 0) continue;
        int common = common_prefix(b, r, s);
        int real = real_cells(b, r, common);
        if (real > best_real) best = s, best_real = real, *cells = common;
    }
    return best;
}

void token_layout_build(TokenLayout *lay, const TokenBatch *b, bool share) {
    int B = b->batch, T = b->t_len;
    size_t cells = (size_t)B * T;
    memset(lay, 0, sizeof *lay);
    lay->row_of = xmalloc(cells * sizeof *lay->row_of);
    lay->tokens = xmalloc((cells ? cells : 1) * sizeof *lay->tokens);
    lay->positions = xmalloc((cells ? cells : 1) * sizeof *lay->positions);
    lay->seq_index = xmalloc((cells ? cells : 1) * sizeof *lay->seq_index);
    size_t max_segs = (size_t)B;
    if (b->packed) {
        share = false;
        max_segs = cells;
    }
    lay->segs = xmalloc((max_segs ? max_segs : 1) * sizeof *lay->segs);
    int *source = xmalloc((size_t)(B ? B : 1) * sizeof *source);
    size_t n = 0;
    for (int r = 0; r < B; r++) {
        int shared = 0;
        source[r] = share ? best_source(b, source, r, &shared) : -1;
        AttnSegment seg = {(int)n, 0, 0, 0};
        if (source[r] >= 0) {
            /* the source's real cells are its first rows, in order: the prefix is a run of them */
            size_t first = LAYOUT_NO_ROW;
            for (int t = 0; t < shared; t++) {
                size_t i = (size_t)r * T + t;
                lay->row_of[i] = lay->row_of[(size_t)source[r] * T + t];
                if (lay->row_of[i] != LAYOUT_NO_ROW && first == LAYOUT_NO_ROW)
                    first = lay->row_of[i];
            }
            seg.prefix_start = (int)first;
            seg.prefix_len = real_cells(b, r, shared);
            lay->shared_cells += (size_t)seg.prefix_len;
        }
        for (int t = shared; t < T; t++) {
            size_t i = (size_t)r * T + t;
            if (!cell_real(b, i)) {
                lay->row_of[i] = LAYOUT_NO_ROW;
                continue;
            }
            if (b->packed && (int)n > seg.start &&
                lay->positions[n - 1] + 1 != cell_position(b, i)) {
                /* a packed row's next sequence: the one before it is a segment of its own */
                seg.len = (int)n - seg.start;
                lay->segs[lay->n_segs++] = seg;
                seg = (AttnSegment){(int)n, 0, 0, 0};
            }
            lay->row_of[i] = n;
            lay->tokens[n] = b->tokens[i];
            lay->positions[n] = cell_position(b, i);
            lay->seq_index[n++] = t;
        }
        seg.len = (int)n - seg.start;
        if (seg.len > 0) lay->segs[lay->n_segs++] = seg;
    }
    lay->n = n;
    free(source);
}

void token_layout_free(TokenLayout *lay) {
    free(lay->row_of);
    free(lay->tokens);
    free(lay->positions);
    free(lay->seq_index);
    free(lay->segs);
    memset(lay, 0, sizeof *lay);
}

size_t token_layout_targets(const TokenLayout *lay, const TokenBatch *b, const uint8_t *target_mask,
                            size_t *where, size_t *from) {
    size_t cells = (size_t)b->batch * b->t_len, n_sel = 0;
    for (size_t i = 0; i < cells; i++) {
        if (i % (size_t)b->t_len == 0 || !cell_real(b, i) || (target_mask && !target_mask[i]))
            continue;
        if (lay->row_of[i - 1] == LAYOUT_NO_ROW) continue;
        where[n_sel] = i;
        from[n_sel++] = lay->row_of[i - 1];
    }
    return n_sel;
}
