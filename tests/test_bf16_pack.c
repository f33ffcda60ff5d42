/* bf16_pack_a_transposed (kernels/cpu/gemm_bf16.h): a packed A's transpose built from its bf16
 * values must be, byte for byte (padding included), the packing bf16_pack_a makes from the fp32
 * source read transposed, and value by value float16.h's f32_to_bf16 of that source (an
 * independent rounding), zeros in the padding. On every path this machine has (the transpose of
 * words is AVX-512 on amx and avx512, scalar on avx2), on shapes with rows and depth short of,
 * at and past 16 and 32, odd, 1, over both threads' chunks; from whole packings and from views
 * of their rows (bf16_packed_a_rows), each into a pooled buffer a previous packing dirtied. And
 * bf16_pack_a from a transposed bf16 source (which the transpose reads through) value by value.
 * Its user: autocast_linear_backward with din and dw in one call (dout packed once, dW's A its
 * transpose) against din and dw in two calls (dW's A packed from the fp32 dout), memcmp. */
#include "common/float16.h"
#include "harness.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Mostly random in [-1.5, 1.5), with the values whose rounding is special: ties both ways, a
 * NaN, infinities, a subnormal, the largest finite float (rounds to inf), -0. */
static float source_value(uint64_t *state) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800001u,
                                       0x7f800000u, 0x00012345u, 0x7f7fffffu, 0x80000000u};
    double u = harness_uniform(state);
    if (u < 1.0 / 7) {
        float f;
        memcpy(&f, &special[(int)(u * 7 * 8) % 8], sizeof f);
        return f;
    }
    return (float)(harness_uniform(state) - 0.5) * 3.0f;
}

/* Counts of values of p (rows x depth of source value src(r, c)) that are not f32_to_bf16 of
 * the source, or not zero in the padding. */
static int packing_errors(const Bf16PackedA *p, const float *x, size_t row_step, size_t col_step) {
    int bad = 0;
    for (int r = 0; r < p->rows_padded; r++)
        for (int c = 0; c < p->row_stride; c++) {
            uint16_t want = r < p->rows && c < p->depth
                                ? f32_to_bf16(x[(size_t)r * row_step + (size_t)c * col_step])
                                : 0;
            bad += p->data[(size_t)r * p->row_stride + c] != want;
        }
    return bad;
}

/* x (rows x depth, row-major) packed as A; its transpose from that packing against the fp32
 * transposed packing, whole and from the views of rows r0.. rows (r0 a multiple of 32). */
static void check_transposed(int rows, int depth, const char *path, uint64_t *state) {
    size_t count = (size_t)rows * depth;
    float *x = malloc((count + 1) * sizeof *x);
    for (size_t i = 0; i < count; i++)
        x[i] = source_value(state);
    Bf16PackedA a, got, want;
    bf16_pack_a(&a, (Bf16Source){.f32 = x, .row_stride = (size_t)depth, .col_stride = 1}, rows,
                depth);
    for (int r0 = 0; r0 < rows; r0 += 32) {
        Bf16PackedA v = bf16_packed_a_rows(&a, r0, rows - r0);
        const float *xv = x + (size_t)r0 * depth;
        bf16_pack_a_transposed(&got, &v);
        /* the transposed fp32 source: element (k, i) = x[r0 + i][k] */
        bf16_pack_a(&want, (Bf16Source){.f32 = xv, .row_stride = 1, .col_stride = (size_t)depth},
                    depth, rows - r0);
        bool same_sizes =
            got.rows == depth && got.depth == rows - r0 && got.rows_padded == want.rows_padded &&
            got.depth_padded == want.depth_padded && got.row_stride == want.row_stride;
        CHECK(same_sizes, "%s %dx%d rows %d..: transposed sizes %d x %d (padded %d x %d)", path,
              rows, depth, r0, got.rows, got.depth, got.rows_padded, got.depth_padded);
        if (same_sizes)
            CHECK(memcmp(got.data, want.data,
                         (size_t)got.rows_padded * got.row_stride * sizeof *got.data) == 0,
                  "%s %dx%d rows %d..: the transpose of the packing is not the fp32 packing", path,
                  rows, depth, r0);
        int bad = packing_errors(&got, xv, 1, (size_t)depth);
        CHECK(bad == 0, "%s %dx%d rows %d..: %d values not f32_to_bf16 of the source or padding",
              path, rows, depth, r0, bad);
        bf16_packed_a_free(&want);
        bf16_packed_a_free(&got);
    }
    bf16_packed_a_free(&a);
    free(x);
}

/* autocast_linear_backward(din, dw, dbias) in one call against the din call and the dw, dbias
 * call apart, bit for bit; dw and dbias accumulate onto the same random values. */
static void check_backward(int n, int in_dim, int out_dim, const char *path, uint64_t *state) {
    size_t nd = (size_t)n * out_dim, ni = (size_t)n * in_dim, nw = (size_t)out_dim * in_dim;
    float *dout = malloc(nd * sizeof *dout), *in = malloc(ni * sizeof *in);
    float *w = malloc(nw * sizeof *w), *din[2], *dw[2], *db[2];
    for (size_t i = 0; i < nd; i++)
        dout[i] = source_value(state);
    for (size_t i = 0; i < ni; i++)
        in[i] = (float)(harness_uniform(state) - 0.5);
    for (size_t i = 0; i < nw; i++)
        w[i] = (float)(harness_uniform(state) - 0.5);
    for (int v = 0; v < 2; v++) {
        din[v] = malloc(ni * sizeof *din[v]);
        dw[v] = malloc(nw * sizeof *dw[v]);
        db[v] = malloc((size_t)out_dim * sizeof *db[v]);
    }
    uint64_t again = *state;
    for (int v = 0; v < 2; v++) { /* the same start for both */
        uint64_t st = again;
        for (size_t i = 0; i < nw; i++)
            dw[v][i] = (float)(harness_uniform(&st) - 0.5);
        for (int i = 0; i < out_dim; i++)
            db[v][i] = (float)(harness_uniform(&st) - 0.5);
        *state = st;
    }
    WeightRef wr = {.f32 = w};
    autocast_linear_backward(din[0], dw[0], db[0], dout, in, wr, n, in_dim, out_dim);
    autocast_linear_backward(din[1], NULL, NULL, dout, in, wr, n, in_dim, out_dim);
    autocast_linear_backward(NULL, dw[1], db[1], dout, in, wr, n, in_dim, out_dim);
    CHECK(memcmp(din[0], din[1], ni * sizeof *din[0]) == 0, "%s %d x %d -> %d: din differs", path,
          n, in_dim, out_dim);
    CHECK(memcmp(dw[0], dw[1], nw * sizeof *dw[0]) == 0,
          "%s %d x %d -> %d: dw with din in one call differs from dw alone", path, n, in_dim,
          out_dim);
    CHECK(memcmp(db[0], db[1], (size_t)out_dim * sizeof *db[0]) == 0,
          "%s %d x %d -> %d: dbias differs", path, n, in_dim, out_dim);
    gemm_bf16_weights_changed(w, nw * sizeof *w); /* its cached packings, before w is freed */
    for (int v = 0; v < 2; v++)
        free(din[v]), free(dw[v]), free(db[v]);
    free(dout), free(in), free(w);
}

int main(void) {
    uint64_t state = 33;
    int shapes[][2] = {{1, 1},   {1, 37},  {37, 1},  {5, 3},     {16, 32},   {17, 33},
                       {31, 63}, {33, 65}, {70, 31}, {64, 64},   {97, 1001}, {300, 257},
                       {2, 130}, {130, 2}, {45, 96}, {654, 130}, {96, 45}};
    int paths = 0;
    for (int p = GEMM_BF16_AVX2; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        paths++;
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                check_transposed(shapes[s][0], shapes[s][1], gemm_bf16_path_name((GemmBf16Path)p),
                                 &state);
        }
        int linears[][3] = {{1, 33, 17}, {37, 70, 45}, {100, 64, 130}, {300, 96, 257}};
        for (size_t s = 0; s < sizeof linears / sizeof linears[0]; s++)
            check_backward(linears[s][0], linears[s][1], linears[s][2],
                           gemm_bf16_path_name((GemmBf16Path)p), &state);
    }
    CHECK(paths > 0 || !gemm_bf16_supported(GEMM_BF16_AVX2), "no path checked on a CPU with AVX2");
    return harness_finish("test_bf16_pack");
}
