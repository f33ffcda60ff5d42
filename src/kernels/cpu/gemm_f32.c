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

/* One thread's product, blocked as the file's head says. */
static void blocked_gemm(const GemmF32Kernel *kd, bool trans_a, bool trans_b, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                         float *c, int ldc) {
    int mb = min_int(kd->mb, round_up(m, kd->mr)), nb = min_int(kd->nb_max, round_up(n, kd->nr));
    float *pa = pack_buffer(&a_buffer, (size_t)mb * kd->kc);
    float *pb = pack_buffer(&b_buffer, (size_t)nb * kd->kc);
    for (int m0 = 0; m0 < m; m0 += mb) {
        int rows = min_int(mb, m - m0);
        for (int k0 = 0; k0 < k; k0 += kd->kc) {
            int kc = min_int(kd->kc, k - k0);
            float beta_here = k0 == 0 ? beta : 1.0f;
            for (int i = 0; i < rows; i += kd->mr)
                if (kd->pack)
                    kd->pack(pa + (size_t)i * kc, a, lda, !trans_a, m0 + i,
                             min_int(kd->mr, rows - i), k0, kc, kd->mr);
                else
                    pack_a(pa + (size_t)i * kc, a, lda, trans_a, m0 + i, min_int(kd->mr, rows - i),
                           k0, kc, kd->mr);
            for (int n0 = 0; n0 < n; n0 += nb) {
                int cols = min_int(nb, n - n0);
                for (int j = 0; j < cols; j += kd->nr)
                    if (kd->pack)
                        kd->pack(pb + (size_t)j * kc, b, ldb, trans_b, n0 + j,
                                 min_int(kd->nr, cols - j), k0, kc, kd->nr);
                    else
                        pack_b(pb + (size_t)j * kc, b, ldb, trans_b, n0 + j,
                               min_int(kd->nr, cols - j), k0, kc, kd->nr);
                for (int i = 0; i < rows; i += kd->mr) {
                    const float *pa_i = pa + (size_t)i * kc;
                    float *c_i = c + (size_t)(m0 + i) * ldc + n0;
                    int tile_rows = min_int(kd->mr, rows - i);
                    for (int j = 0; j < cols; j += kd->nr)
                        kd->kernel(kc, pa_i, pb + (size_t)j * kc, c_i + j, ldc, tile_rows,
                                   min_int(kd->nr, cols - j), alpha, beta_here);
                }
            }
        }
    }
}

/* The threads split C along its longer side, in whole tiles, and each computes its part alone:
 * no barrier until the end. Each packs the other operand whole (its share of the copies grows
 * by about 2 x 32 / (longer side) of the multiply-adds: a few percent at the model's shapes), and
 * in exchange a thread that the OS deschedules (a loaded machine) holds up no one: on this
 * workplace's shared 2-core VM a shared A panel with a barrier per k block ran at ~60% of
 * OpenBLAS's speed, while one thread alone matched it. */
static void own_gemm(const GemmF32Kernel *kd, bool trans_a, bool trans_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                     float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        scale_c(c, ldc, m, n, beta);
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
        if (count > 0 && split_rows)
            blocked_gemm(kd, trans_a, trans_b, count, n, k, alpha,
                         trans_a ? a + from : a + (size_t)from * lda, lda, b, ldb, beta,
                         c + (size_t)from * ldc, ldc);
        else if (count > 0)
            blocked_gemm(kd, trans_a, trans_b, m, count, k, alpha, a, lda,
                         trans_b ? b + (size_t)from * ldb : b + from, ldb, beta, c + from, ldc);
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

bool gemm_f32_on(GemmF32Path path, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (!gemm_f32_path_available(path)) return false;
    const GemmF32Kernel *kd = &gemm_f32_kernel_portable;
    switch (path) {
    case GEMM_F32_OPENBLAS:
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                    ldc);
        return true;
#if defined(__x86_64__)
    case GEMM_F32_OWN_AVX512:
        kd = &gemm_f32_kernel_avx512;
        break;
    case GEMM_F32_OWN_AVX2:
        kd = &gemm_f32_kernel_avx2;
        break;
#endif
    default:
        break;
    }
    own_gemm(kd, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
}
