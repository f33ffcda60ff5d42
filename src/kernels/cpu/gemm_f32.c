/* gemm_f32's own paths: BLIS-style cache blocking around a register micro-kernel
 * (gemm_f32_kernels.h), and the per-path entry point gemm_f32_on.
 *
 * Loops of one thread, outermost first (our row-major names; the kernel's tile is mr rows x
 * nr columns), over the part of C it computes (own_gemm):
 *   m0 over A's rows in blocks of mb      A block packed (mb x kc)
 *   k0 over the depth in blocks of kc     (invariant 1 of gemm_f32.h: the k blocks in order)
 *   n0 over C's columns in blocks of nb   B block packed (kc x nb, in L2)
 *   i over the A block in steps of mr     A's micro-panel (mr x kc) stays in L1
 *   j over the B block in steps of nr     B's micro-panels stream from L2
 * The first k block updates C with the caller's beta, later ones add (beta 1). Which thread
 * computes a tile changes nothing in its sums, so results do not depend on the thread count. */
#include "kernels/cpu/gemm_f32.h"

#include "common/error.h"
#include "kernels/cpu/gemm_f32_kernels.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int min_int(int a, int b) {
    return a < b ? a : b;
}

static int round_up(int x, int to) {
    return (x + to - 1) / to * to;
}

/* A micro-panel: op(A)'s rows i0 .. i0 + rows - 1 (rows <= mr, zeros past them) at depths
 * k0 .. k0 + kc - 1, stored k by k, mr values each. */
static void pack_a(float *dst, const float *a, int lda, bool trans_a, int i0, int rows, int k0,
                   int kc, int mr) {
    if (rows < mr) memset(dst, 0, (size_t)kc * mr * sizeof *dst);
    if (trans_a) /* A stored k x m: a depth's rows are adjacent */
        for (int kk = 0; kk < kc; kk++) {
            const float *src = a + (size_t)(k0 + kk) * lda + i0;
            for (int ii = 0; ii < rows; ii++)
                dst[(size_t)kk * mr + ii] = src[ii];
        }
    else /* rows side by side, depth by depth: mr read streams, one write stream */
        for (int kk = 0; kk < kc; kk++)
            for (int ii = 0; ii < rows; ii++)
                dst[(size_t)kk * mr + ii] = a[(size_t)(i0 + ii) * lda + k0 + kk];
}

/* A B micro-panel: op(B)'s columns j0 .. j0 + cols - 1 (cols <= nr, zeros past them) at depths
 * k0 .. k0 + kc - 1, stored k by k, nr values each. */
static void pack_b(float *dst, const float *b, int ldb, bool trans_b, int j0, int cols, int k0,
                   int kc, int nr) {
    if (cols < nr) memset(dst, 0, (size_t)kc * nr * sizeof *dst);
    if (trans_b) /* B stored n x k (a weight matrix for x W^T): a column's depths are adjacent */
        for (int jj = 0; jj < cols; jj++) {
            const float *src = b + (size_t)(j0 + jj) * ldb + k0;
            for (int kk = 0; kk < kc; kk++)
                dst[(size_t)kk * nr + jj] = src[kk];
        }
    else
        for (int kk = 0; kk < kc; kk++)
            memcpy(dst + (size_t)kk * nr, b + (size_t)(k0 + kk) * ldb + j0,
                   (size_t)cols * sizeof *dst);
}

/* C = beta C (k == 0: no product to add). */
static void scale_c(float *c, int ldc, int m, int n, float beta) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
}

/* A thread's packing buffer, at least `floats` long, starting on a cache line (each vector load
 * of a panel then reads one line). Kept for the thread's later products and only grown: fresh
 * memory costs a page fault per 4 KiB on first touch (about 10 us each on our VMs, see
 * xmalloc_huge), which for a 2 MB panel is as long as a small product. One buffer for A and one
 * for B per thread. */
typedef struct {
    void *base;
    size_t floats;
} PackBuffer;

static _Thread_local PackBuffer a_buffer, b_buffer;
static _Thread_local bool buffers_registered;

/* OpenMP's worker threads come and go with the team size: a thread's buffers are freed as it
 * ends, by a thread-specific key's destructor (its value only makes the destructor run). */
static pthread_key_t buffers_key;
static pthread_once_t buffers_key_once = PTHREAD_ONCE_INIT;

static void free_thread_buffers(void *unused) {
    (void)unused;
    free(a_buffer.base), free(b_buffer.base);
    a_buffer = b_buffer = (PackBuffer){0};
    buffers_registered = false;
}

static void make_buffers_key(void) {
    if (pthread_key_create(&buffers_key, free_thread_buffers) != 0) abort();
}

static float *pack_buffer(PackBuffer *buf, size_t floats) {
    if (!buffers_registered) {
        pthread_once(&buffers_key_once, make_buffers_key);
        pthread_setspecific(buffers_key, &a_buffer);
        buffers_registered = true;
    }
    if (buf->floats < floats) {
        free(buf->base);
        buf->base = xmalloc((floats + 16) * sizeof(float));
        buf->floats = floats;
    }
    return (float *)(((uintptr_t)buf->base + 63) & ~(uintptr_t)63);
}

/* One side of a thread's product: stretches of op(A)'s rows (the A side) or op(B)'s columns (the
 * B side), each from its own matrix. A side has one stretch unless it is the parts' side of a
 * group (gemm_f32_shared), where each part is one. The side's rows (columns) are numbered in a
 * virtual order in which every stretch starts at a multiple of the kernel's mr (nr): a tile of
 * the kernel never holds two stretches' items, and the rows (columns) between one stretch's end
 * and the next one's start are never packed nor written. */
typedef struct {
    const float *src; /* the stretch's first row (column) of its operand */
    int ld;
    int len; /* rows (columns) */
    int at;  /* its first virtual row (column): a multiple of the tile */
    int off; /* rows (columns) of its part's C before the stretch's first (a thread's cut) */
    /* on the parts' side only: the part's C (at its row 0, column 0) and update */
    float *c;
    int ldc;
    float alpha, beta;
} Stretch;

typedef struct {
    Stretch s[GEMM_F32_MAX_PARTS];
    int n;
    int len; /* virtual rows (columns): the last stretch's at + len */
} Side;

/* The stretch holding virtual row (column) v, which a tile start never falls outside of. */
static const Stretch *stretch_at(const Side *side, int v) {
    int i = side->n - 1;
    while (i > 0 && side->s[i].at > v)
        i--;
    return &side->s[i];
}

/* Packs one micro-panel of `width` items from virtual item v of a side (A's rows: is_a). */
static void pack_panel(const GemmF32Kernel *kd, float *dst, const Side *side, bool is_a, bool trans,
                       int v, int block_end, int k0, int kc, int width) {
    const Stretch *st = stretch_at(side, v);
    int first = v - st->at, count = min_int(min_int(width, st->len - first), block_end - v);
    if (kd->pack) /* A's items have their depths adjacent when A is not transposed */
        kd->pack(dst, st->src, st->ld, is_a ? !trans : trans, first, count, k0, kc, width);
    else if (is_a)
        pack_a(dst, st->src, st->ld, trans, first, count, k0, kc, width);
    else
        pack_b(dst, st->src, st->ld, trans, first, count, k0, kc, width);
}

/* One thread's product (or group of products), blocked as the file's head says. A block of A
 * packed once serves every part on the B side, and a block of B every part on the A side. */
static void blocked_gemm(const GemmF32Kernel *kd, bool trans_a, bool trans_b, int k, const Side *sa,
                         const Side *sb, bool parts_on_b) {
    int m = sa->len, n = sb->len;
    int mb = min_int(kd->mb, round_up(m, kd->mr)), nb = min_int(kd->nb_max, round_up(n, kd->nr));
    float *pa = pack_buffer(&a_buffer, (size_t)mb * kd->kc);
    float *pb = pack_buffer(&b_buffer, (size_t)nb * kd->kc);
    for (int m0 = 0; m0 < m; m0 += mb) {
        int rows = min_int(mb, m - m0);
        for (int k0 = 0; k0 < k; k0 += kd->kc) {
            int kc = min_int(kd->kc, k - k0);
            for (int i = 0; i < rows; i += kd->mr)
                pack_panel(kd, pa + (size_t)i * kc, sa, true, trans_a, m0 + i, m0 + rows, k0, kc,
                           kd->mr);
            for (int n0 = 0; n0 < n; n0 += nb) {
                int cols = min_int(nb, n - n0);
                for (int j = 0; j < cols; j += kd->nr)
                    pack_panel(kd, pb + (size_t)j * kc, sb, false, trans_b, n0 + j, n0 + cols, k0,
                               kc, kd->nr);
                for (int i = 0; i < rows; i += kd->mr) {
                    const Stretch *ra = stretch_at(sa, m0 + i);
                    int r = m0 + i - ra->at;
                    int tile_rows = min_int(min_int(kd->mr, ra->len - r), rows - i);
                    const float *pa_i = pa + (size_t)i * kc;
                    for (int j = 0; j < cols; j += kd->nr) {
                        const Stretch *rb = stretch_at(sb, n0 + j);
                        const Stretch *part = parts_on_b ? rb : ra;
                        int col = n0 + j - rb->at;
                        int tile_cols = min_int(min_int(kd->nr, rb->len - col), cols - j);
                        float *c = part->c + (size_t)(ra->off + r) * part->ldc + rb->off + col;
                        kd->kernel(kc, pa_i, pb + (size_t)j * kc, c, part->ldc, tile_rows,
                                   tile_cols, part->alpha, k0 == 0 ? part->beta : 1.0f);
                    }
                }
            }
        }
    }
}

/* The stretches of `side` within virtual items from .. from + count - 1, renumbered from 0.
 * trans: the side's operand is stored transposed (items side by side in a row). */
static void cut_side(Side *out, const Side *side, bool is_a, bool trans, int from, int count) {
    out->n = 0, out->len = 0;
    for (int i = 0; i < side->n; i++) {
        Stretch st = side->s[i];
        int lo = st.at > from ? st.at : from, hi = min_int(st.at + st.len, from + count);
        if (hi <= lo) continue;
        int cut = lo - st.at;
        /* an item is a row of a stored matrix unless its side is transposed (A) or not (B) */
        bool item_is_row = is_a ? !trans : trans;
        st.src += item_is_row ? (size_t)cut * st.ld : (size_t)cut;
        st.off += cut, st.len = hi - lo, st.at = lo - from;
        out->s[out->n++] = st;
        out->len = st.at + st.len;
    }
}

/* The threads split C along its longer side, in whole tiles, and each computes its part alone:
 * no barrier until the end. Each packs the other operand whole (its share of the copies grows
 * by about 2 x 32 / (longer side) of the multiply-adds: a few percent at the model's shapes), and
 * in exchange a thread that the OS deschedules (a loaded machine) holds up no one: on this
 * workplace's shared 2-core VM a shared A panel with a barrier per k block ran at ~60% of
 * OpenBLAS's speed, while one thread alone matched it. A group's longer side counts all its
 * parts (the packing each thread repeats is then the smaller operand, as for one product). */
static void own_gemm(const GemmF32Kernel *kd, bool trans_a, bool trans_b, int k, const Side *sa,
                     const Side *sb, bool parts_on_b) {
    int m = sa->len, n = sb->len;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        const Side *parts = parts_on_b ? sb : sa;
        for (int p = 0; p < parts->n; p++) {
            const Stretch *st = &parts->s[p];
            scale_c(st->c, st->ldc, parts_on_b ? m : st->len, parts_on_b ? st->len : n, st->beta);
        }
        return;
    }
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    bool split_rows = m >= n;
    int unit = split_rows ? kd->mr : kd->nr, len = split_rows ? m : n;
    int share = round_up((len + threads - 1) / threads, unit);
    threads = (len + share - 1) / share;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), from = t * share, count = min_int(share, len - from);
        Side cut;
        if (count > 0 && split_rows) {
            cut_side(&cut, sa, true, trans_a, from, count);
            blocked_gemm(kd, trans_a, trans_b, k, &cut, sb, parts_on_b);
        } else if (count > 0) {
            cut_side(&cut, sb, false, trans_b, from, count);
            blocked_gemm(kd, trans_a, trans_b, k, sa, &cut, parts_on_b);
        }
    }
}

bool gemm_f32_path_available(GemmF32Path path) {
    switch (path) {
    case GEMM_F32_OPENBLAS:
    case GEMM_F32_OWN_PORTABLE:
        return true;
#if defined(__x86_64__)
    case GEMM_F32_OWN_AVX512:
        return __builtin_cpu_supports("avx512f");
    case GEMM_F32_OWN_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    default:
        return false;
    }
}

GemmF32Path gemm_f32_own_path(void) {
    if (gemm_f32_path_available(GEMM_F32_OWN_AVX512)) return GEMM_F32_OWN_AVX512;
    if (gemm_f32_path_available(GEMM_F32_OWN_AVX2)) return GEMM_F32_OWN_AVX2;
    return GEMM_F32_OWN_PORTABLE;
}

const char *gemm_f32_path_name(GemmF32Path path) {
    switch (path) {
    case GEMM_F32_AUTO:
        return "auto";
    case GEMM_F32_MEASURED:
        return "measured";
    case GEMM_F32_OPENBLAS:
        return "openblas";
    case GEMM_F32_OWN_AVX512:
        return "own-avx512";
    case GEMM_F32_OWN_AVX2:
        return "own-avx2";
    case GEMM_F32_OWN_PORTABLE:
        return "own-portable";
    default:
        return "?";
    }
}

/* Our kernel for `path` (the portable one for any path without its own). */
static const GemmF32Kernel *kernel_of(GemmF32Path path) {
    switch (path) {
#if defined(__x86_64__)
    case GEMM_F32_OWN_AVX512:
        return &gemm_f32_kernel_avx512;
    case GEMM_F32_OWN_AVX2:
        return &gemm_f32_kernel_avx2;
#endif
    default:
        return &gemm_f32_kernel_portable;
    }
}

/* A side of one stretch: `len` items of src from item 0 (no C: it is not the parts' side). */
static void side_of_one(Side *side, const float *src, int ld, int len) {
    side->s[0] = (Stretch){.src = src, .ld = ld, .len = len};
    side->n = 1, side->len = len;
}

/* The parts' side of a group: each part a stretch starting at the next multiple of `unit` (parts
 * of no items left out). */
static void side_of_parts(Side *side, const GemmF32Part *parts, int n_parts, int unit) {
    side->n = 0, side->len = 0;
    for (int p = 0, at = 0; p < n_parts; p++) {
        if (parts[p].len <= 0) continue;
        side->s[side->n++] = (Stretch){.src = parts[p].x,
                                       .ld = parts[p].ldx,
                                       .len = parts[p].len,
                                       .at = at,
                                       .c = parts[p].c,
                                       .ldc = parts[p].ldc,
                                       .alpha = parts[p].alpha,
                                       .beta = parts[p].beta};
        side->len = at + parts[p].len;
        at = round_up(side->len, unit);
    }
}

bool gemm_f32_on(GemmF32Path path, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (!gemm_f32_path_available(path)) return false;
    if (path == GEMM_F32_OPENBLAS) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                    ldc);
        return true;
    }
    Side sa, sb;
    side_of_one(&sa, a, lda, m);
    side_of_one(&sb, b, ldb, n);
    sb.s[0].c = c, sb.s[0].ldc = ldc, sb.s[0].alpha = alpha, sb.s[0].beta = beta;
    own_gemm(kernel_of(path), trans_a, trans_b, k, &sa, &sb, true);
    return true;
}

bool gemm_f32_shared_on(GemmF32Path path, bool shares_a, bool trans_a, bool trans_b, int dim, int k,
                        const float *shared, int ld, const GemmF32Part *parts, int n_parts) {
    if (!gemm_f32_path_available(path) || n_parts < 0 || n_parts > GEMM_F32_MAX_PARTS) return false;
    if (path == GEMM_F32_OPENBLAS || dim <= 0) {
        for (int p = 0; p < n_parts; p++) {
            const GemmF32Part *q = &parts[p];
            gemm_f32_on(path, trans_a, trans_b, shares_a ? dim : q->len, shares_a ? q->len : dim, k,
                        q->alpha, shares_a ? shared : q->x, shares_a ? ld : q->ldx,
                        shares_a ? q->x : shared, shares_a ? q->ldx : ld, q->beta, q->c, q->ldc);
        }
        return true;
    }
    const GemmF32Kernel *kd = kernel_of(path);
    Side one, many;
    side_of_one(&one, shared, ld, dim);
    side_of_parts(&many, parts, n_parts, shares_a ? kd->nr : kd->mr);
    if (shares_a)
        own_gemm(kd, trans_a, trans_b, k, &one, &many, true);
    else
        own_gemm(kd, trans_a, trans_b, k, &many, &one, false);
    return true;
}
