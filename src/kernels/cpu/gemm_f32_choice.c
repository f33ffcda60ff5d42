/* gemm_f32: which path multiplies (invariant 2 of gemm_f32.h). GEMM_F32_AUTO, the default, is
 * a fixed rule of the CPU's instruction sets (why: gemm_f32.h). Under GEMM_F32_MEASURED:
 *
 * Products are grouped in shape classes: the transposes, whether the call is made from inside a
 * parallel region (it then runs on one thread), and each of m, n, k rounded up to a power of
 * two. The first product of a class times our best path and OpenBLAS's sgemm on that product's
 * shape, each dimension capped at CALIBRATION_CAP (the rate of a blocked GEMM hardly changes
 * beyond that; the cap bounds the calibration's cost to some 10-100 ms per class), on scratch
 * matrices, alternating the two, best of at least 3 runs and of 5 ms each; the faster (ours on a
 * tie) multiplies every product of the class for the rest of the process. The classes' table is
 * what gemm_f32_report prints. Timings are the machine's at that moment: on a loaded machine
 * the choice can differ between runs, never within one. */
#include "kernels/cpu/gemm_f32.h"

#include "common/error.h"
#include "common/test_hooks.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALIBRATION_CAP 1024
#define MAX_CLASSES     256

typedef struct {
    bool trans_a, trans_b, nested;
    int bucket_m, bucket_n, bucket_k; /* the class */
    int m, n, k;                      /* the shape it was measured on */
    double own_gflops, blas_gflops;
    GemmF32Path path;
} ShapeClass;

static ShapeClass classes[MAX_CLASSES];
static int n_classes;
static GemmF32Path policy = GEMM_F32_AUTO;

static int bucket(int x) {
    int b = 1;
    while (b < x && b < (1 << 30))
        b <<= 1;
    return b;
}

static int capped(int x) {
    return x < CALIBRATION_CAP ? x : CALIBRATION_CAP;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Times our path `own` and OpenBLAS on the class's shape (already capped), alternating. */
static void calibrate(ShapeClass *sc, GemmF32Path own, float beta) {
    int m = sc->m, n = sc->n, k = sc->k;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *a = xmalloc(na * sizeof *a), *b = xmalloc(nb * sizeof *b), *c = xmalloc(nc * sizeof *c);
    unsigned seed = 12345u;
    for (size_t i = 0; i < na + nb; i++) {
        seed = seed * 1103515245u + 12345u;
        float v = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
        if (i < na)
            a[i] = v;
        else
            b[i - na] = v;
    }
    for (size_t i = 0; i < nc; i++)
        c[i] = 0.0f;
    int lda = sc->trans_a ? m : k, ldb = sc->trans_b ? k : n;
    GemmF32Path paths[2] = {own, GEMM_F32_OPENBLAS};
    double best[2] = {1e30, 1e30}, spent[2] = {0, 0};
    for (int p = 0; p < 2; p++) /* warm-up: first-touch of buffers, thread pools */
        gemm_f32_on(paths[p], sc->trans_a, sc->trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
    for (int rep = 0; rep < 50; rep++) {
        if (rep >= 3 && spent[0] > 5e-3 && spent[1] > 5e-3) break;
        for (int p = 0; p < 2; p++) {
            double t0 = now_seconds();
            gemm_f32_on(paths[p], sc->trans_a, sc->trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                        n);
            double dt = now_seconds() - t0;
            spent[p] += dt;
            if (dt < best[p]) best[p] = dt;
        }
    }
    double flops = 2.0 * m * n * k * 1e-9;
    sc->own_gflops = flops / (best[0] > 1e-9 ? best[0] : 1e-9);
    sc->blas_gflops = flops / (best[1] > 1e-9 ? best[1] : 1e-9);
    sc->path = sc->own_gflops >= sc->blas_gflops ? own : GEMM_F32_OPENBLAS;
    free(a), free(b), free(c);
}

/* The path test_hook_gemm_f32_path names (GEMM_F32_AUTO: none); a name that is not a path of
 * this CPU ends the process, so that a test cannot pass on a path it did not run. */
static GemmF32Path hooked_path(void) {
    const char *name = test_hook_gemm_f32_path();
    if (!name) return GEMM_F32_AUTO;
    if (strcmp(name, "own") == 0) return gemm_f32_own_path();
    for (int p = GEMM_F32_OPENBLAS; p < GEMM_F32_PATHS; p++)
        if (strcmp(name, gemm_f32_path_name((GemmF32Path)p)) == 0 &&
            gemm_f32_path_available((GemmF32Path)p))
            return (GemmF32Path)p;
    fprintf(stderr, "RLHF_TEST_GEMM_F32=%s: not a GEMM path of this CPU\n", name);
    abort();
}

/* The test hook's path, read once (GEMM_F32_AUTO: none). */
static GemmF32Path hooked_path_once(void) {
    static bool hook_read;
    static GemmF32Path hooked = GEMM_F32_AUTO;
#pragma omp critical(gemm_f32_classes)
    {
        if (!hook_read) hooked = hooked_path(), hook_read = true;
    }
    return hooked;
}

/* The class's path, measuring it first if it is new. */
static GemmF32Path choose(bool trans_a, bool trans_b, int m, int n, int k, float beta) {
    bool nested = omp_in_parallel();
    GemmF32Path path = gemm_f32_own_path();
#pragma omp critical(gemm_f32_classes)
    {
        int bm = bucket(m), bn = bucket(n), bk = bucket(k), i = 0;
        for (; i < n_classes; i++) {
            const ShapeClass *sc = &classes[i];
            if (sc->trans_a == trans_a && sc->trans_b == trans_b && sc->nested == nested &&
                sc->bucket_m == bm && sc->bucket_n == bn && sc->bucket_k == bk)
                break;
        }
        if (i < n_classes)
            path = classes[i].path;
        else if (n_classes < MAX_CLASSES) { /* (a full table: our path, unmeasured) */
            ShapeClass *sc = &classes[n_classes++];
            *sc = (ShapeClass){.trans_a = trans_a,
                               .trans_b = trans_b,
                               .nested = nested,
                               .bucket_m = bm,
                               .bucket_n = bn,
                               .bucket_k = bk,
                               .m = capped(m),
                               .n = capped(n),
                               .k = capped(k)};
            calibrate(sc, path, beta);
            path = sc->path;
        }
    }
    return path;
}

/* GEMM_F32_AUTO's rule: our kernel where it has vector code, OpenBLAS elsewhere. */
static GemmF32Path fixed_path(void) {
    GemmF32Path own = gemm_f32_own_path();
    return own == GEMM_F32_OWN_PORTABLE ? GEMM_F32_OPENBLAS : own;
}

/* The path of every product from now on, short of GEMM_F32_MEASURED's per-class choice (which
 * this returns as it is). */
static GemmF32Path current_path(void) {
    GemmF32Path hooked = hooked_path_once();
    if (hooked != GEMM_F32_AUTO) return hooked;
    return policy == GEMM_F32_AUTO ? fixed_path() : policy;
}

void gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
    GemmF32Path path = current_path();
    if (path == GEMM_F32_MEASURED)
        path = m > 0 && n > 0 && k > 0 ? choose(trans_a, trans_b, m, n, k, beta) : fixed_path();
    gemm_f32_on(path, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_f32_shared(bool shares_a, bool trans_a, bool trans_b, int dim, int k, const float *shared,
                     int ld, const GemmF32Part *parts, int n_parts) {
    GemmF32Path path = current_path();
    if (path != GEMM_F32_MEASURED) {
        gemm_f32_shared_on(path, shares_a, trans_a, trans_b, dim, k, shared, ld, parts, n_parts);
        return;
    }
    for (int p = 0; p < n_parts; p++) { /* each part on its own class's path */
        const GemmF32Part *q = &parts[p];
        if (shares_a)
            gemm_f32(trans_a, trans_b, dim, q->len, k, q->alpha, shared, ld, q->x, q->ldx, q->beta,
                     q->c, q->ldc);
        else
            gemm_f32(trans_a, trans_b, q->len, dim, k, q->alpha, q->x, q->ldx, shared, ld, q->beta,
                     q->c, q->ldc);
    }
}

void gemm_f32_set_policy(GemmF32Path p) {
    if (p == GEMM_F32_OWN_AVX512 || p == GEMM_F32_OWN_AVX2 || p == GEMM_F32_OWN_PORTABLE)
        p = gemm_f32_own_path();
    policy = p;
}

void gemm_f32_report(FILE *fp) {
    int own = 0;
#pragma omp critical(gemm_f32_classes)
    {
        for (int i = 0; i < n_classes; i++) {
            const ShapeClass *sc = &classes[i];
            own += sc->path != GEMM_F32_OPENBLAS;
            fprintf(fp,
                    "gemm_f32: %c%c%s m=%d n=%d k=%d (class <=%dx%dx%d): %s %.1f GFLOP/s, "
                    "openblas %.1f GFLOP/s -> %s\n",
                    sc->trans_a ? 'T' : 'N', sc->trans_b ? 'T' : 'N',
                    sc->nested ? " (1 thread, nested)" : "", sc->m, sc->n, sc->k, sc->bucket_m,
                    sc->bucket_n, sc->bucket_k, gemm_f32_path_name(gemm_f32_own_path()),
                    sc->own_gflops, sc->blas_gflops, gemm_f32_path_name(sc->path));
        }
        fprintf(fp, "gemm_f32: policy %s, %d shape classes measured, %d on %s, %d on openblas\n",
                gemm_f32_path_name(policy), n_classes, own, gemm_f32_path_name(gemm_f32_own_path()),
                n_classes - own);
    }
}

void gemm_f32_describe(FILE *fp) {
    fprintf(fp, "fp32 GEMM: %s for training's products (OpenBLAS %s for the rest; %d threads)\n",
            gemm_f32_path_name(policy == GEMM_F32_AUTO ? fixed_path() : policy),
            openblas_get_corename(), omp_get_max_threads());
}
