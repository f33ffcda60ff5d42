/* gemm_bf16 (kernels/cpu/gemm_bf16.h) on every path this machine has, against the product of the
 * same bf16-rounded factors computed here in double. Each product of two bf16 values is exact in
 * fp32, so what a path may add is fp32 summation error only: over a depth of K terms (and the
 * accumulated C value) at most (K + 1) u sum |terms| with u = 2^-24, whatever the order. Odd
 * shapes (every padding and tail: rows, columns, depth, the odd last pair), sources in fp32, in
 * bf16 and transposed, C written and accumulated with a row stride past its columns (which must
 * stay untouched), and the same bits with one thread as with two. gemm_bf16_rounded against
 * gemm_bf16 then a rounding pass, bit for bit. The packings value by value (check_packing). */
#include "common/float16.h"
#include "harness.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_bf16_kernels.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static double b16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

static void fill(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rand_r(seed) / (double)RAND_MAX - 0.5) * 2.0f;
}

/* C = A · B (+ C0) for A (m x k) stored transposed if a_t, B (k x n) given in bf16 if b_16. */
static void check(GemmBf16Path path, int m, int k, int n, bool a_t, bool b_16, bool accumulate,
                  unsigned seed) {
    size_t ldc = (size_t)n + 3;
    float *a = malloc(((size_t)m * k + 1) * sizeof *a), *b = malloc(((size_t)k * n + 1) * 4);
    float *c = malloc((size_t)m * ldc * sizeof *c + 4), *c1 = malloc((size_t)m * ldc * 4 + 4);
    uint16_t *b16v = malloc(((size_t)k * n + 1) * sizeof *b16v);
    fill(a, (size_t)m * k, &seed), fill(b, (size_t)k * n, &seed), fill(c, (size_t)m * ldc, &seed);
    for (size_t i = 0; i < (size_t)k * n; i++)
        b16v[i] = f32_to_bf16(b[i]);
    float *c0 = malloc((size_t)m * ldc * sizeof *c0 + 4);
    memcpy(c0, c, (size_t)m * ldc * sizeof *c);
    memcpy(c1, c, (size_t)m * ldc * sizeof *c);

    /* A(i, kk) at a[i * k + kk], or transposed at a[kk * m + i] */
    Bf16Source as = {
        .f32 = a, .row_stride = a_t ? 1 : (size_t)k, .col_stride = a_t ? (size_t)m : 1};
    Bf16Source bs = {.f32 = b_16 ? NULL : b,
                     .bf16 = b_16 ? b16v : NULL,
                     .row_stride = (size_t)n,
                     .col_stride = 1};
    Bf16PackedA pa;
    Bf16PackedB pb;
    bf16_pack_a(&pa, as, m, k);
    bf16_pack_b(&pb, bs, k, n);
    omp_set_num_threads(2);
    gemm_bf16(c, ldc, accumulate, &pa, &pb);
    omp_set_num_threads(1);
    gemm_bf16(c1, ldc, accumulate, &pa, &pb);
    omp_set_num_threads(2);

    int bad = 0, untouched = 0;
    double worst = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = accumulate ? c0[(size_t)i * ldc + j] : 0, mag = fabs(s);
            for (int kk = 0; kk < k; kk++) {
                double t = b16(a[a_t ? (size_t)kk * m + i : (size_t)i * k + kk]) *
                           b16(b[(size_t)kk * n + j]);
                s += t, mag += fabs(t);
            }
            double err = fabs(c[(size_t)i * ldc + j] - s), bound = (k + 1) * ldexp(1.0, -24) * mag;
            bad += !(err <= bound);
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
        for (size_t j = n; j < ldc; j++)
            untouched += c[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j];
    }
    CHECK(bad == 0,
          "%s %dx%dx%d%s%s%s: %d of %d values off the double product beyond fp32 "
          "summation error (worst %.3g of sum |terms|)",
          gemm_bf16_path_name(path), m, k, n, a_t ? " A^T" : "", b_16 ? " B bf16" : "",
          accumulate ? " +=" : "", bad, m * n, worst);
    CHECK(untouched == m * 3, "%s %dx%dx%d: %d values past the columns written",
          gemm_bf16_path_name(path), m, k, n, m * 3 - untouched);
    CHECK(memcmp(c, c1, (size_t)m * ldc * sizeof *c) == 0, "%s %dx%dx%d: one thread and two differ",
          gemm_bf16_path_name(path), m, k, n);
    bf16_packed_a_free(&pa);
    bf16_packed_b_free(&pb);
    free(a), free(b), free(c), free(c0), free(c1), free(b16v);
}

/* gemm_bf16_rounded: bit for bit gemm_bf16's product followed by c = bf16(c + bias[j]) (the
 * bias rounded to bf16 first, as an autocast linear's is), rounded here by float16.h's
 * f32_to_bf16, with and without a bias; the row stride's tail untouched. */
static void check_rounded(GemmBf16Path path, int m, int k, int n, bool a_t, unsigned seed) {
    size_t ldc = (size_t)n + 3, cn = (size_t)m * ldc;
    float *a = malloc(((size_t)m * k + 1) * sizeof *a), *b = malloc(((size_t)k * n + 1) * 4);
    float *bias = malloc(((size_t)n + 1) * sizeof *bias), *want = malloc(cn * 4 + 4);
    float *got = malloc(cn * 4 + 4), *garbage = malloc(cn * 4 + 4);
    fill(a, (size_t)m * k, &seed), fill(b, (size_t)k * n, &seed), fill(bias, (size_t)n, &seed);
    fill(garbage, cn, &seed);
    for (int j = 0; j < n; j++) /* a bf16 bias, scaled to move the sums' rounding */
        bias[j] = (float)b16(bias[j] * 4.0f);
    Bf16Source as = {
        .f32 = a, .row_stride = a_t ? 1 : (size_t)k, .col_stride = a_t ? (size_t)m : 1};
    Bf16Source bs = {.f32 = b, .row_stride = (size_t)n, .col_stride = 1};
    Bf16PackedA pa;
    Bf16PackedB pb;
    bf16_pack_a(&pa, as, m, k);
    bf16_pack_b(&pb, bs, k, n);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        memcpy(want, garbage, cn * sizeof *want);
        memcpy(got, garbage, cn * sizeof *got);
        gemm_bf16(want, ldc, false, &pa, &pb);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float *w = &want[(size_t)i * ldc + j];
                *w = (float)b16(with_bias ? *w + bias[j] : *w);
            }
        gemm_bf16_rounded(got, ldc, &pa, &pb, with_bias ? bias : NULL);
        int off = 0;
        for (size_t i = 0; i < cn; i++)
            off += memcmp(&got[i], &want[i], sizeof *got) != 0;
        CHECK(off == 0, "%s %dx%dx%d%s rounded%s: %d of %d values not gemm_bf16's rounded",
              gemm_bf16_path_name(path), m, k, n, a_t ? " A^T" : "", with_bias ? " + bias" : "",
              off, m * n);
    }
    bf16_packed_a_free(&pa);
    bf16_packed_b_free(&pb);
    free(a), free(b), free(bias), free(want), free(got), free(garbage);
}

/* Value v of a test source: mostly random, with the values whose rounding is special (ties
 * both ways, a NaN, infinities, a subnormal, the largest finite float, which rounds to inf). */
static float source_value(unsigned *seed) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800001u,
                                       0x7f800000u, 0x00012345u, 0x7f7fffffu, 0x80000000u};
    unsigned r = (unsigned)rand_r(seed);
    if (r % 7 == 0) {
        float f;
        memcpy(&f, &special[r / 7 % 8], sizeof f);
        return f;
    }
    return (float)(r / (double)RAND_MAX - 0.5) * 3.0f;
}

/* The packings themselves, value by value against invariants 1-3 (gemm_bf16.c): A (rows x depth)
 * and B (depth x cols) from sources stored row-major, transposed (row_stride 1: dW's dout^T, the
 * forward's W^T) and with neither stride 1, in fp32 (rounded by float16.h's f32_to_bf16) and in
 * bf16; every padded value zero. Each packing reuses a pooled buffer another one dirtied. */
static void check_packing(GemmBf16Path path, int rows, int depth, int cols, unsigned seed) {
    size_t na = (size_t)rows * depth + 1, nb = (size_t)depth * cols + 1;
    float *a = malloc(3 * na * sizeof *a), *b = malloc(3 * nb * sizeof *b);
    uint16_t *a16 = malloc(3 * na * sizeof *a16), *b16v = malloc(3 * nb * sizeof *b16v);
    for (size_t i = 0; i < 3 * na; i++)
        a[i] = source_value(&seed), a16[i] = f32_to_bf16(source_value(&seed));
    for (size_t i = 0; i < 3 * nb; i++)
        b[i] = source_value(&seed), b16v[i] = f32_to_bf16(source_value(&seed));
    /* layouts: 0 row-major, 1 transposed, 2 strided (row-major with every other value used) */
    for (int layout = 0; layout < 3; layout++)
        for (int in_bf16 = 0; in_bf16 < 2; in_bf16++) {
            size_t ars = layout == 0 ? (size_t)depth : layout == 1 ? 1 : 2 * (size_t)depth;
            size_t acs = layout == 0 ? 1 : layout == 1 ? (size_t)rows : 2;
            size_t brs = layout == 0 ? (size_t)cols : layout == 1 ? 1 : 2 * (size_t)cols;
            size_t bcs = layout == 0 ? 1 : layout == 1 ? (size_t)depth : 2;
            Bf16Source as = {in_bf16 ? NULL : a, in_bf16 ? a16 : NULL, ars, acs};
            Bf16Source bs = {in_bf16 ? NULL : b, in_bf16 ? b16v : NULL, brs, bcs};
            Bf16PackedA pa;
            Bf16PackedB pb;
            bf16_pack_a(&pa, as, rows, depth);
            bf16_pack_b(&pb, bs, depth, cols);
            int bad_a = 0, bad_b = 0;
            for (int i = 0; i < pa.rows_padded; i++)
                for (int k = 0; k < pa.depth_padded; k++) {
                    size_t at = (size_t)i * ars + (size_t)k * acs;
                    uint16_t want = i >= rows || k >= depth ? 0
                                    : in_bf16               ? a16[at]
                                                            : f32_to_bf16(a[at]);
                    bad_a += pa.data[(size_t)i * pa.row_stride + k] != want;
                }
            for (int k = 0; k < pb.depth_padded; k++)
                for (int j = 0; j < pb.cols_padded; j++) {
                    size_t at = (size_t)k * brs + (size_t)j * bcs;
                    uint16_t want = k >= depth || j >= cols ? 0
                                    : in_bf16               ? b16v[at]
                                                            : f32_to_bf16(b[at]);
                    size_t got = (size_t)(j / 16) * pb.panel_stride + (size_t)(k / 2) * 32 +
                                 (size_t)(j % 16) * 2 + (size_t)(k % 2);
                    bad_b += pb.data[got] != want;
                }
            CHECK(bad_a == 0 && bad_b == 0,
                  "%s packing %dx%d (A) and %dx%d (B), %s source%s: %d of A's %d, %d of B's %d "
                  "packed values wrong",
                  gemm_bf16_path_name(path), rows, depth, depth, cols,
                  layout == 0   ? "row-major"
                  : layout == 1 ? "transposed"
                                : "strided",
                  in_bf16 ? " in bf16" : "", bad_a, pa.rows_padded * pa.depth_padded, bad_b,
                  pb.depth_padded * pb.cols_padded);
            bf16_packed_a_free(&pa);
            bf16_packed_b_free(&pb);
        }
    free(a), free(b), free(a16), free(b16v);
}

/* The AMX path's result does not depend on its blocking (gemm_bf16_kernels.h): C written,
 * accumulated and rounded (+ bias) under several depth chunks (shorter than the depth and not
 * dividing it: the sums spilled to the thread's buffer and loaded back), row chunks and column
 * groups, each memcmp'd to main's order (each block's whole depth at once, 64-row chunks, one
 * pair an item), at two threads, and with the spill buffer refused (the whole depth at once).
 * Every one of the product's calls goes through the path. */
static void check_blocking(int m, int k, int n, unsigned seed) {
    static const GemmBf16AmxBlocking ways[] = {
        {0, 64, 1, 0, false},      {32, 32, 1, 0, false},
        {64, 96, 3, 0, false},     {160, 32, 2, 0, false},
        {96, 256, 8, 0, false},    {256, 1000, 100, 0, false},
        {1024, 256, 8, 64, false}, {64, 64, 1, 40, false},
        {64, 96, 3, 0, true}}; /* the last: as if no thread got a spill buffer */
    const int n_ways = (int)(sizeof ways / sizeof ways[0]);
    size_t ldc = (size_t)n + 3, cn = (size_t)m * ldc;
    float *a = malloc(((size_t)m * k + 1) * sizeof *a), *b = malloc(((size_t)k * n + 1) * 4);
    float *bias = malloc(((size_t)n + 1) * sizeof *bias), *c0 = malloc(cn * 4 + 4);
    float *want = malloc(3 * cn * 4 + 4), *got = malloc(cn * 4 + 4);
    fill(a, (size_t)m * k, &seed), fill(b, (size_t)k * n, &seed), fill(bias, (size_t)n, &seed);
    fill(c0, cn, &seed);
    Bf16Source as = {.f32 = a, .row_stride = (size_t)k, .col_stride = 1};
    Bf16Source bs = {.f32 = b, .row_stride = (size_t)n, .col_stride = 1};
    Bf16PackedA pa;
    Bf16PackedB pb;
    bf16_pack_a(&pa, as, m, k);
    bf16_pack_b(&pb, bs, k, n);
    for (int w = 0; w < n_ways; w++) {
        gemm_bf16_amx_set_blocking(&ways[w]);
        for (int mode = 0; mode < 3; mode++) { /* written, accumulated, rounded + bias */
            float *out = w == 0 ? want + mode * cn : got;
            memcpy(out, c0, cn * sizeof *out);
            if (mode < 2)
                gemm_bf16(out, ldc, mode == 1, &pa, &pb);
            else
                gemm_bf16_rounded(out, ldc, &pa, &pb, bias);
            if (w == 0) continue;
            int off = 0;
            for (size_t i = 0; i < cn; i++)
                off += memcmp(&got[i], &want[mode * cn + i], sizeof *got) != 0;
            CHECK(off == 0,
                  "amx %dx%dx%d %s, depth chunk %d, row chunk %d, column group %d, short rows "
                  "%d: %d of %zu values not the bits of main's order",
                  m, k, n,
                  mode == 0   ? "written"
                  : mode == 1 ? "accumulated"
                              : "rounded + bias",
                  ways[w].depth_chunk, ways[w].row_chunk, ways[w].col_group, ways[w].short_rows,
                  off, cn);
        }
    }
    gemm_bf16_amx_set_blocking(NULL);
    bf16_packed_a_free(&pa);
    bf16_packed_b_free(&pb);
    free(a), free(b), free(bias), free(c0), free(want), free(got);
}

int main(void) {
    int paths = 0;
    for (int p = GEMM_BF16_AVX2; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) {
            printf("test_gemm_bf16: no %s on this CPU, not checked\n",
                   gemm_bf16_path_name((GemmBf16Path)p));
            continue;
        }
        paths++;
        check(p, 1, 1, 1, false, false, false, 1);
        check(p, 5, 72, 40, false, false, false, 2);
        check(p, 33, 71, 45, true, false, false, 3);
        check(p, 67, 131, 97, false, true, true, 4);
        check(p, 130, 33, 70, true, true, false, 5);
        check(p, 96, 640, 64, false, false, true, 6);
        check(p, 17, 1001, 33, true, false, true, 7);
        /* the AMX path stores each block during the next one's depth steps: more than 32 steps
         * (a row each), one step (all 32 rows at once), a thread's last block stored after its
         * loop, row and column tails in the pending block */
        check(p, 101, 1100, 70, false, false, true, 12);
        check(p, 130, 20, 100, true, false, false, 13);
        check(p, 200, 64, 230, false, true, true, 14);
        /* at most 32 rows (the rollout's decode steps): AMX tiles of the rows' own count, the
         * upper 16 only, or the lower half short */
        check(p, 16, 200, 100, false, false, true, 17);
        check(p, 24, 96, 70, true, false, false, 18);
        check(p, 32, 40, 33, false, true, true, 19);
        check(p, 9, 577, 130, false, false, false, 20);
        /* a last block of 2, 18 and 28 rows (its lower tiles skipped, short, nearly full) */
        check(p, 66, 100, 40, false, false, true, 23);
        check(p, 50, 100, 40, true, false, false, 24);
        check(p, 92, 70, 50, false, true, true, 25);
        /* every tail of the packers' 16 x 16 transposes: rows, depth and columns short of, at
         * and past 16 and 32, depth odd, and more than one pass over each (two threads) */
        int sizes[][3] = {{1, 1, 1},    {5, 3, 7},      {16, 32, 16},  {17, 33, 15},
                          {31, 63, 47}, {45, 65, 33},   {70, 31, 100}, {33, 129, 130},
                          {64, 64, 64}, {97, 1001, 21}, {300, 257, 90}};
        for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++)
            check_packing(p, sizes[t][0], sizes[t][1], sizes[t][2], 30 + (unsigned)t);
        check_rounded(p, 1, 1, 1, false, 8);
        check_rounded(p, 67, 131, 97, false, 9);
        check_rounded(p, 130, 576, 70, true, 10);
        check_rounded(p, 5, 0, 40, false, 11); /* an empty sum: bf16(bias) */
        check_rounded(p, 161, 1100, 99, false, 15);
        check_rounded(p, 99, 31, 130, true, 16);
        check_rounded(p, 9, 300, 50, false, 21);
        check_rounded(p, 29, 64, 64, true, 22);
        if (p == GEMM_BF16_AMX) {
            for (int rows = 1; rows <= 40; rows++)
                check_blocking(rows, 333, 70, 100 + (unsigned)rows);
            check_blocking(1000, 577, 45, 141);
            check_blocking(130, 1100, 300, 142);
            check_blocking(97, 32, 33, 143); /* one depth step */
            /* the 0.5B model's gate/up weight gradient's shape, a 6-row last block and an odd
             * ldc: C (17 MB) far past L2, its rows fetched ahead of the accumulate store */
            check_blocking(4870, 654, 901, 144);
        }
    }
    CHECK(paths > 0 || !gemm_bf16_supported(GEMM_BF16_AVX2), "no path checked on a CPU with AVX2");
    return harness_finish("test_gemm_bf16");
}
