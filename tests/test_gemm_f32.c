/* gemm_f32 (kernels/cpu/gemm_f32.h) against a double-precision product, on every path this CPU
 * has: shapes with tails in each dimension for every kernel's tile and blocks, all four transpose
 * combinations, row strides wider than the rows, alpha, and beta 0 (C full of NaN, never read),
 * 1 (dW's accumulation) and another value. The bound is fp32 summation's: each element within
 * (k + 3) u of alpha sum |a||b| + |beta c| (u = 2^-24). Then invariant 1 (the same bits for 1, 2
 * and 3 threads) and the measured choice (gemm_f32 and its report). Last, the AVX-512 packer
 * (gemm_f32_pack_avx512) against the packing's definition, float for float: the tolerance
 * above would not see a panel that differs only in which of two equal-magnitude values sits
 * where. */
#include "harness.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/gemm_f32_kernels.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int m, n, k;
} Shape;

/* Tails against the tiles (4x8, 6x16, 12x32), depth blocks (256, 384), column blocks (512-768
 * per thread) and row blocks (4092). */
static const Shape shapes[] = {{1, 1, 1},     {3, 5, 2},     {13, 33, 7},    {12, 32, 384},
                               {25, 65, 385}, {7, 17, 257},  {13, 700, 300}, {5, 1601, 33},
                               {4099, 19, 9}, {30, 45, 800}, {11, 1, 1000}};

static unsigned rng_state = 1;
static float uniform(void) {
    rng_state = rng_state * 1103515245u + 12345u;
    return (float)((rng_state >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

typedef struct {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    float *a, *b, *c0; /* c0: C before the product */
} Case;

static Case make_case(Shape s, bool ta, bool tb) {
    Case t = {.ta = ta, .tb = tb, .m = s.m, .n = s.n, .k = s.k};
    /* strides a few floats wider than the stored rows */
    t.lda = (ta ? s.m : s.k) + 3, t.ldb = (tb ? s.k : s.n) + 5, t.ldc = s.n + 2;
    size_t na = (size_t)(ta ? s.k : s.m) * t.lda, nb = (size_t)(tb ? s.n : s.k) * t.ldb;
    size_t nc = (size_t)s.m * t.ldc;
    t.a = malloc(na * sizeof(float)), t.b = malloc(nb * sizeof(float));
    t.c0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++)
        t.a[i] = uniform();
    for (size_t i = 0; i < nb; i++)
        t.b[i] = uniform();
    for (size_t i = 0; i < nc; i++)
        t.c0[i] = uniform();
    return t;
}

static void free_case(Case *t) {
    free(t->a), free(t->b), free(t->c0);
}

static double at_a(const Case *t, int i, int p) {
    return t->ta ? t->a[(size_t)p * t->lda + i] : t->a[(size_t)i * t->lda + p];
}
static double at_b(const Case *t, int p, int j) {
    return t->tb ? t->b[(size_t)j * t->ldb + p] : t->b[(size_t)p * t->ldb + j];
}

/* The double-precision product and its bound for each element of C (m x n). */
typedef struct {
    double *want, *bound;
} Reference;

static Reference reference(const Case *t, float alpha, float beta) {
    Reference r = {malloc((size_t)t->m * t->n * sizeof(double)),
                   malloc((size_t)t->m * t->n * sizeof(double))};
    const double u = ldexp(1.0, -24);
    for (int i = 0; i < t->m; i++)
        for (int j = 0; j < t->n; j++) {
            double s = 0, mag = 0, before = t->c0[(size_t)i * t->ldc + j];
            for (int p = 0; p < t->k; p++) {
                double prod = at_a(t, i, p) * at_b(t, p, j);
                s += prod, mag += fabs(prod);
            }
            size_t at = (size_t)i * t->n + j;
            r.want[at] = alpha * s + (beta == 0.0f ? 0.0 : (double)beta * before);
            r.bound[at] = (t->k + 3) * u * (fabs(alpha) * mag + fabs(beta * before)) + 1e-30;
        }
    return r;
}

/* Runs `path` on the case and counts the elements outside the bound; the padding between rows
 * of C must come out untouched. Returns the number of bad elements (-1: path unavailable). */
static long check_case(GemmF32Path path, const Case *t, const Reference *r, float alpha, float beta,
                       double *worst) {
    size_t nc = (size_t)t->m * t->ldc;
    float *c = malloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        c[i] = beta == 0.0f && (int)(i % t->ldc) < t->n ? NAN : t->c0[i];
    if (!gemm_f32_on(path, t->ta, t->tb, t->m, t->n, t->k, alpha, t->a, t->lda, t->b, t->ldb, beta,
                     c, t->ldc)) {
        free(c);
        return -1;
    }
    long bad = 0;
    for (int i = 0; i < t->m; i++)
        for (int j = 0; j < t->ldc; j++) {
            float got = c[(size_t)i * t->ldc + j], before = t->c0[(size_t)i * t->ldc + j];
            if (j >= t->n) { /* the stride's padding */
                if (memcmp(&got, &before, sizeof got) != 0) bad++;
                continue;
            }
            size_t at = (size_t)i * t->n + j;
            double err = fabs((double)got - r->want[at]);
            if (!(err <= r->bound[at])) bad++; /* (NaN counts as bad) */
            if (err / r->bound[at] > *worst) *worst = err / r->bound[at];
        }
    free(c);
    return bad;
}

static void test_paths(void) {
    const float alphas[] = {1.0f, 1.0f, 0.5f}, betas[] = {0.0f, 1.0f, -0.75f};
    double worst[GEMM_F32_PATHS] = {0};
    int cases[GEMM_F32_PATHS] = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int tr = 0; tr < 4; tr++) {
            Case t = make_case(shapes[s], tr & 1, tr & 2);
            for (int ab = 0; ab < 3; ab++) {
                Reference r = reference(&t, alphas[ab], betas[ab]);
                for (int path = GEMM_F32_OPENBLAS; path < GEMM_F32_PATHS; path++) {
                    long bad =
                        check_case((GemmF32Path)path, &t, &r, alphas[ab], betas[ab], &worst[path]);
                    if (bad < 0) continue; /* not on this CPU */
                    cases[path]++;
                    CHECK(bad == 0, "%s %c%c m=%d n=%d k=%d alpha %g beta %g: %ld elements wrong",
                          gemm_f32_path_name((GemmF32Path)path), t.ta ? 'T' : 'N', t.tb ? 'T' : 'N',
                          t.m, t.n, t.k, alphas[ab], betas[ab], bad);
                }
                free(r.want), free(r.bound);
            }
            free_case(&t);
        }
    for (int path = GEMM_F32_OPENBLAS; path < GEMM_F32_PATHS; path++)
        if (cases[path])
            printf("%s: %d cases, worst error %.3g of the fp32 bound\n",
                   gemm_f32_path_name((GemmF32Path)path), cases[path], worst[path]);
        else
            printf("%s: not on this CPU, skipped\n", gemm_f32_path_name((GemmF32Path)path));
}

/* k == 0: C = beta C, no product. */
static void test_empty_depth(void) {
    for (int path = GEMM_F32_OWN_AVX512; path < GEMM_F32_PATHS; path++) {
        float c[6] = {1, 2, 3, 4, 5, 6}, a[1] = {0}, b[1] = {0};
        if (!gemm_f32_on((GemmF32Path)path, false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.5f, c, 3))
            continue;
        CHECK(c[0] == 0.5f && c[5] == 3.0f, "%s: k = 0 scales C by beta (%g %g)",
              gemm_f32_path_name((GemmF32Path)path), c[0], c[5]);
        for (int i = 0; i < 6; i++)
            c[i] = NAN;
        gemm_f32_on((GemmF32Path)path, false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.0f, c, 3);
        CHECK(c[0] == 0.0f && c[5] == 0.0f, "%s: k = 0, beta 0 zeroes C",
              gemm_f32_path_name((GemmF32Path)path));
    }
}

/* Invariant 1: 1, 2 and 3 threads give the same bits (a dW-like product: TN, beta 1). */
static void test_thread_count(void) {
    Case t = make_case((Shape){30, 1300, 500}, true, false);
    size_t nc = (size_t)t.m * t.ldc;
    float *ref = malloc(nc * sizeof(float)), *c = malloc(nc * sizeof(float));
    int saved = omp_get_max_threads();
    for (int path = GEMM_F32_OWN_AVX512; path < GEMM_F32_PATHS; path++) {
        if (!gemm_f32_path_available((GemmF32Path)path)) continue;
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            float *out = threads == 1 ? ref : c;
            memcpy(out, t.c0, nc * sizeof(float));
            gemm_f32_on((GemmF32Path)path, t.ta, t.tb, t.m, t.n, t.k, 1.0f, t.a, t.lda, t.b, t.ldb,
                        1.0f, out, t.ldc);
            if (threads > 1)
                CHECK(memcmp(ref, c, nc * sizeof(float)) == 0, "%s: %d threads differ from 1",
                      gemm_f32_path_name((GemmF32Path)path), threads);
        }
    }
    omp_set_num_threads(saved);
    free(ref), free(c);
    free_case(&t);
}

/* The default policy's path depends on the CPU only (invariant 2): ours where there is vector
 * code, OpenBLAS elsewhere; bitwise the named path's product, and nothing measured. */
static void test_default_path(void) {
    Case t = make_case((Shape){37, 53, 1000}, false, true); /* k over a depth block */
    size_t nc = (size_t)t.m * t.ldc;
    float *got = malloc(nc * sizeof(float)), *want = malloc(nc * sizeof(float));
    memcpy(got, t.c0, nc * sizeof(float));
    memcpy(want, t.c0, nc * sizeof(float));
    GemmF32Path own = gemm_f32_own_path();
    GemmF32Path expect = own == GEMM_F32_OWN_PORTABLE ? GEMM_F32_OPENBLAS : own;
    gemm_f32(false, true, t.m, t.n, t.k, 1.0f, t.a, t.lda, t.b, t.ldb, 0.0f, got, t.ldc);
    gemm_f32_on(expect, false, true, t.m, t.n, t.k, 1.0f, t.a, t.lda, t.b, t.ldb, 0.0f, want,
                t.ldc);
    CHECK(memcmp(got, want, nc * sizeof(float)) == 0, "the default multiplies on %s",
          gemm_f32_path_name(expect));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    gemm_f32_report(mem);
    fclose(mem);
    CHECK(strstr(text, "0 shape classes measured") != NULL, "the default measures nothing: %s",
          text);
    free(text);
    mem = open_memstream(&text, &len);
    gemm_f32_describe(mem);
    fclose(mem);
    char named[64];
    snprintf(named, sizeof named, "fp32 GEMM: %s ", gemm_f32_path_name(expect));
    CHECK(strstr(text, named) != NULL, "--version names the default's path: %s", text);
    free(text);
    free(got), free(want);
    free_case(&t);
}

/* Under GEMM_F32_MEASURED gemm_f32 measures a class once and keeps its choice (invariant 2);
 * the report names it. */
static void test_choice(void) {
    gemm_f32_set_policy(GEMM_F32_MEASURED);
    Case t = make_case((Shape){64, 96, 80}, false, true);
    size_t nc = (size_t)t.m * t.ldc;
    float *first = malloc(nc * sizeof(float)), *again = malloc(nc * sizeof(float));
    memcpy(first, t.c0, nc * sizeof(float));
    memcpy(again, t.c0, nc * sizeof(float));
    gemm_f32(false, true, t.m, t.n, t.k, 1.0f, t.a, t.lda, t.b, t.ldb, 0.0f, first, t.ldc);
    for (int i = 0; i < 3; i++) /* same class: same path, same bits */
        gemm_f32(false, true, t.m, t.n, t.k, 1.0f, t.a, t.lda, t.b, t.ldb, 0.0f, again, t.ldc);
    CHECK(memcmp(first, again, nc * sizeof(float)) == 0, "a class's product is the same each time");
    /* and it is the product, whichever path was chosen */
    Reference r = reference(&t, 1.0f, 0.0f);
    long bad = 0;
    for (int i = 0; i < t.m; i++)
        for (int j = 0; j < t.n; j++) {
            size_t at = (size_t)i * t.n + j;
            bad += !(fabs(first[(size_t)i * t.ldc + j] - r.want[at]) <= r.bound[at]);
        }
    CHECK(bad == 0, "gemm_f32's product: %ld elements wrong", bad);
    free(r.want), free(r.bound);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    gemm_f32_report(mem);
    fclose(mem);
    printf("%s", text);
    CHECK(strstr(text, "gemm_f32: NT m=64 n=96 k=80 (class <=64x128x128)") != NULL,
          "the report names the measured class");
    CHECK(strstr(text, "1 shape classes measured") != NULL, "one class measured: %s", text);
    free(text);
    free(first), free(again);
    free_case(&t);
}

#if defined(__x86_64__)
/* One panel from gemm_f32_pack_avx512 against its contract (gemm_f32_kernels.h): item it's
 * depth d at src + (first + it) ld + k0 + d (along_k) or src + (k0 + d) ld + first + it, zeros
 * for it >= count; the words past the panel untouched. */
static long check_pack(const float *src, int ld, bool along_k, int first, int count, int k0, int kc,
                       int width) {
    size_t size = (size_t)kc * width;
    float *dst = malloc((size + 16) * sizeof *dst);
    for (size_t i = 0; i < size + 16; i++)
        dst[i] = NAN;
    gemm_f32_pack_avx512(dst + 1, src, ld, along_k, first, count, k0, kc, width);
    long bad = !isnan(dst[0]);
    for (int d = 0; d < kc; d++)
        for (int it = 0; it < width; it++) {
            float want = 0.0f;
            if (it < count)
                want = along_k ? src[(size_t)(first + it) * ld + k0 + d]
                               : src[(size_t)(k0 + d) * ld + first + it];
            float got = dst[1 + (size_t)d * width + it];
            bad += memcmp(&got, &want, sizeof got) != 0;
        }
    for (int i = 0; i < 15; i++)
        bad += !isnan(dst[1 + size + i]);
    free(dst);
    return bad;
}

static void test_avx512_pack(void) {
    if (!gemm_f32_path_available(GEMM_F32_OWN_AVX512)) {
        printf("no AVX-512: its packer not tested\n");
        return;
    }
    int ld = 700, lines = 120;
    float *src = malloc((size_t)ld * lines * sizeof *src);
    for (size_t i = 0; i < (size_t)ld * lines; i++)
        src[i] = uniform();
    const int widths[] = {12, 32}, depths[] = {1, 15, 16, 17, 383, 384};
    for (int w = 0; w < 2; w++)
        for (int dk = 0; dk < 6; dk++)
            for (int count = 1; count <= widths[w]; count += count < 4 ? 1 : 5)
                for (int along_k = 0; along_k < 2; along_k++) {
                    int first = 3 + count, k0 = 5, kc = depths[dk];
                    if (!along_k && k0 + kc > lines) kc = lines - k0;
                    if (along_k && k0 + kc > ld) kc = ld - k0;
                    long bad = check_pack(src, ld, along_k, first, count, k0, kc, widths[w]);
                    CHECK(bad == 0, "pack width %d count %d kc %d along_k %d: %ld floats wrong",
                          widths[w], count, kc, along_k, bad);
                }
    free(src);
}
#endif

/* gemm_f32_shared: each part's C bitwise what gemm_f32_on gives that product alone on the same
 * path (which test_paths holds to the double-precision bound), for a group sharing A and one
 * sharing B, every transpose combination, parts with tails against every tile (one of no items
 * among them), their own alpha and beta (0 with C full of NaN), depths over two blocks, a
 * shared side longer and shorter than the parts' (the threads split one or the other), 1 to 3
 * threads. */
static void test_shared(void) {
    static const int lens[] = {13, 1, 0, 40, 33};
    static const float alphas[] = {1.0f, -0.5f, 1.0f, 2.0f, 1.0f};
    static const float betas[] = {0.0f, 1.0f, 0.0f, 0.25f, 1.0f};
    enum { PARTS = 5 };
    static const int dims[] = {7, 29, 300};
    int saved = omp_get_max_threads();
    long bad = 0, groups = 0;
    for (int path = GEMM_F32_OPENBLAS; path < GEMM_F32_PATHS; path++) {
        if (!gemm_f32_path_available((GemmF32Path)path)) continue;
        for (int shares_a = 0; shares_a < 2; shares_a++)
            for (int tr = 0; tr < 4; tr++)
                for (int d = 0; d < 3; d++)
                    for (int threads = 1; threads <= 3; threads++) {
                        omp_set_num_threads(threads);
                        bool ta = tr & 1, tb = tr & 2;
                        int dim = dims[d], k = 785; /* three depth blocks of 384, 256 */
                        /* the shared operand and each part's, strides a few floats wider */
                        int ld = (shares_a ? (ta ? dim : k) : (tb ? k : dim)) + 3;
                        size_t ns = (size_t)(shares_a ? (ta ? k : dim) : (tb ? dim : k)) * ld;
                        float *shared = malloc(ns * sizeof(float));
                        for (size_t i = 0; i < ns; i++)
                            shared[i] = uniform();
                        GemmF32Part parts[PARTS];
                        float *want[PARTS];
                        size_t nc[PARTS];
                        for (int p = 0; p < PARTS; p++) {
                            int len = lens[p];
                            bool x_trans = shares_a ? tb : ta; /* the part's own operand */
                            int ldx = (shares_a ? (x_trans ? k : len) : (x_trans ? len : k)) + 1;
                            size_t nx =
                                (size_t)(shares_a ? (x_trans ? len : k) : (x_trans ? k : len)) *
                                ldx;
                            int rows = shares_a ? dim : len, cols = shares_a ? len : dim;
                            int ldc = cols + 2;
                            nc[p] = (size_t)rows * ldc;
                            float *x = malloc((nx ? nx : 1) * sizeof(float));
                            float *c = malloc((nc[p] ? nc[p] : 1) * sizeof(float));
                            want[p] = malloc((nc[p] ? nc[p] : 1) * sizeof(float));
                            for (size_t i = 0; i < nx; i++)
                                x[i] = uniform();
                            for (size_t i = 0; i < nc[p]; i++)
                                c[i] = betas[p] == 0.0f ? NAN : uniform();
                            memcpy(want[p], c, nc[p] * sizeof(float));
                            parts[p] = (GemmF32Part){x, ldx, len, alphas[p], betas[p], c, ldc};
                            if (shares_a)
                                gemm_f32_on((GemmF32Path)path, ta, tb, dim, len, k, alphas[p],
                                            shared, ld, x, ldx, betas[p], want[p], ldc);
                            else
                                gemm_f32_on((GemmF32Path)path, ta, tb, len, dim, k, alphas[p], x,
                                            ldx, shared, ld, betas[p], want[p], ldc);
                        }
                        CHECK(gemm_f32_shared_on((GemmF32Path)path, shares_a, ta, tb, dim, k,
                                                 shared, ld, parts, PARTS),
                              "%s: gemm_f32_shared_on refused", gemm_f32_path_name(path));
                        groups++;
                        for (int p = 0; p < PARTS; p++) {
                            if (memcmp(want[p], parts[p].c, nc[p] * sizeof(float)) != 0) {
                                if (bad++ < 5)
                                    printf("%s: shared %c, %c%c, dim %d, %d threads: part %d "
                                           "differs from its product alone\n",
                                           gemm_f32_path_name((GemmF32Path)path),
                                           shares_a ? 'A' : 'B', ta ? 'T' : 'N', tb ? 'T' : 'N',
                                           dim, threads, p);
                            }
                            free((void *)parts[p].x), free(parts[p].c), free(want[p]);
                        }
                        free(shared);
                    }
    }
    omp_set_num_threads(saved);
    CHECK(bad == 0, "gemm_f32_shared: %ld parts of %ld groups differ bitwise from gemm_f32_on", bad,
          groups);
    GemmF32Part too_many[GEMM_F32_MAX_PARTS + 1] = {{0}};
    float x = 0;
    CHECK(!gemm_f32_shared_on(gemm_f32_own_path(), true, false, true, 1, 1, &x, 1, too_many,
                              GEMM_F32_MAX_PARTS + 1),
          "gemm_f32_shared_on takes more than GEMM_F32_MAX_PARTS parts");
}

int main(void) {
    gemm_f32_describe(stdout);
    test_paths();
    test_empty_depth();
    test_thread_count();
    test_default_path();
    test_choice();
    test_shared();
#if defined(__x86_64__)
    test_avx512_pack();
#endif
    return harness_finish("test_gemm_f32");
}
