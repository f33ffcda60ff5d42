/* The bf16 autocast products (kernels/cpu/matmul_autocast.c) against their definition computed
 * here in double: factors rounded to bf16, exact products, the forward and dX results rounded to
 * bf16 once, dW's sums not. On each path this machine has (gemm_bf16's, and the sgemm one with a
 * few rows through matmul_forward's own loops and many through sgemm), an odd in_dim; W given in
 * bf16 gives what its fp32 values give, through the backend table too. */
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double b16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

static void fill(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rand_r(seed) / (double)RAND_MAX - 0.5) * 2.0f;
}

/* got is a bf16 value, and the nearest to want or its neighbour (the fp32 sum may fall on the
 * other side of a rounding boundary than the double sum): within one bf16 step of want. */
static bool bf16_close(float got, double want) {
    if (b16(got) != got) return false;
    double step = ldexp(1.0, ilogb(want == 0 ? 1e-30 : want) - 7);
    return fabs(got - want) <= step * 1.0001 + 1e-30;
}

static void check_shape(int n, int in_dim, int out_dim, unsigned seed) {
    size_t nx = (size_t)n * in_dim, nw = (size_t)in_dim * out_dim, no = (size_t)n * out_dim;
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *bias = malloc(out_dim * 4);
    float *dout = malloc(no * sizeof *dout), *out = malloc(no * sizeof *out),
          *out16 = malloc(no * sizeof *out16);
    float *din = malloc(nx * sizeof *din), *dw = calloc(nw, sizeof *dw),
          *dbias = calloc(out_dim, sizeof *dbias);
    uint16_t *w16 = malloc(nw * sizeof *w16);
    fill(x, nx, &seed), fill(w, nw, &seed), fill(bias, out_dim, &seed), fill(dout, no, &seed);
    for (size_t i = 0; i < nw; i++)
        w16[i] = f32_to_bf16(w[i]);
    char path[48];
    snprintf(path, sizeof path, "%s", gemm_bf16_path_name(gemm_bf16_path()));
    if (gemm_bf16_path() == GEMM_BF16_NONE && n <= 16) snprintf(path, sizeof path, "few-rows");

    autocast_linear_forward(out, x, (WeightRef){.f32 = w}, bias, n, in_dim, out_dim);
    autocast_linear_forward(out16, x, (WeightRef){.bf16 = w16}, bias, n, in_dim, out_dim);
    backend_cpu_autocast()->linear(backend_cpu_autocast(), out16, x, (WeightRef){.bf16 = w16}, NULL,
                                   bias, n, in_dim, out_dim);
    int bad_fwd = 0, bad_w16 = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out_dim; j++) {
            double s = 0;
            for (int k = 0; k < in_dim; k++)
                s += b16(x[(size_t)r * in_dim + k]) * b16(w[(size_t)j * in_dim + k]);
            s = (float)s + b16(bias[j]);
            float got = out[(size_t)r * out_dim + j];
            bad_fwd += !bf16_close(got, s);
            bad_w16 += got != out16[(size_t)r * out_dim + j];
        }
    CHECK(bad_fwd == 0, "%s forward %dx%dx%d: %d outputs off bf16(bf16(x)·bf16(W)^T + b)", path, n,
          in_dim, out_dim, bad_fwd);
    CHECK(bad_w16 == 0, "%s forward: %d outputs differ between W in fp32 and in bf16", path,
          bad_w16);

    for (size_t i = 0; i < nw; i++)
        dw[i] = 0.25f; /* accumulated onto */
    autocast_linear_backward(din, dw, dbias, dout, x, (WeightRef){.f32 = w}, n, in_dim, out_dim);
    int bad_din = 0, bad_dw = 0, bad_db = 0;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < in_dim; k++) {
            double s = 0;
            for (int j = 0; j < out_dim; j++)
                s += b16(dout[(size_t)r * out_dim + j]) * b16(w[(size_t)j * in_dim + k]);
            bad_din += !bf16_close(din[(size_t)r * in_dim + k], s);
        }
    for (int j = 0; j < out_dim; j++) {
        double sb = 0, mag_b = 0;
        for (int r = 0; r < n; r++) {
            sb += b16(dout[(size_t)r * out_dim + j]);
            mag_b += fabs(dout[(size_t)r * out_dim + j]);
        }
        bad_db += fabs(dbias[j] - sb) > 1e-5 * mag_b + 1e-6;
        for (int k = 0; k < in_dim; k++) {
            double s = 0.25, mag = 0.25;
            for (int r = 0; r < n; r++) {
                double t = b16(dout[(size_t)r * out_dim + j]) * b16(x[(size_t)r * in_dim + k]);
                s += t, mag += fabs(t);
            }
            /* unrounded fp32 sums: fp32 summation error only */
            bad_dw += fabs(dw[(size_t)j * in_dim + k] - s) > 1e-6 * mag;
        }
    }
    CHECK(bad_din == 0, "%s dX %dx%dx%d: %d values off bf16(bf16(dout)·bf16(W))", path, n, in_dim,
          out_dim, bad_din);
    CHECK(bad_dw == 0, "%s dW: %d values off 0.25 + bf16(dout)^T·bf16(x)", path, bad_dw);
    CHECK(bad_db == 0, "%s dbias: %d values off the column sums of bf16(dout)", path, bad_db);

    /* a frozen base kept in bf16 (LoRA with bf16: true): the same dX as its fp32 master */
    float *din16 = malloc(nx * sizeof *din16);
    autocast_linear_backward(din16, NULL, NULL, dout, x, (WeightRef){.bf16 = w16}, n, in_dim,
                             out_dim);
    CHECK(memcmp(din16, din, nx * sizeof *din) == 0, "%s dX: W in bf16 and in fp32 differ", path);
    free(din16);
    free(x), free(w), free(bias), free(dout), free(out), free(out16), free(din), free(dw);
    free(dbias), free(w16);
}

/* The forward against its definition, W as it is now. */
static int forward_off(const float *x, const float *w, int n, int in_dim, int out_dim) {
    float *out = malloc((size_t)n * out_dim * sizeof *out);
    autocast_linear_forward(out, x, (WeightRef){.f32 = w}, NULL, n, in_dim, out_dim);
    int bad = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out_dim; j++) {
            double s = 0;
            for (int k = 0; k < in_dim; k++)
                s += b16(x[(size_t)r * in_dim + k]) * b16(w[(size_t)j * in_dim + k]);
            bad += !bf16_close(out[(size_t)r * out_dim + j], (float)s);
        }
    free(out);
    return bad;
}

/* gemm_bf16's cache of packed weights (gemm_bf16_cache.c): packed once, reused, and repacked
 * after gemm_bf16_weights_changed over the bytes written (an optimizer step writes all of W; one
 * value changed here is one the fingerprint does not sample) or after the whole of W changed
 * unannounced (the fingerprint's guard). */
static void check_weight_cache(void) {
    enum { N = 9, IN = 96, OUT = 64 }; /* 6144 values: the fingerprint samples 512 of them */
    unsigned seed = 11;
    float *x = malloc(N * IN * sizeof *x), *w = malloc(OUT * IN * sizeof *w);
    fill(x, N * IN, &seed), fill(w, OUT * IN, &seed);
    gemm_bf16_cache_clear();
    const char *path = gemm_bf16_path_name(gemm_bf16_path());
    CHECK(forward_off(x, w, N, IN, OUT) == 0, "%s cache: first forward off", path);
    const Bf16PackedB *p1 = bf16_weight_packed(w, NULL, OUT, IN, true);
    CHECK(bf16_weight_packed(w, NULL, OUT, IN, true) == p1, "%s cache: W packed twice", path);

    w[1] = -8.0f; /* feeds output column 0 only */
    gemm_bf16_weights_changed(w + 1, sizeof *w);
    CHECK(forward_off(x, w, N, IN, OUT) == 0,
          "%s cache: forward after a change announced over its bytes is stale", path);

    for (int i = 0; i < OUT * IN; i++)
        w[i] = -w[i];
    CHECK(forward_off(x, w, N, IN, OUT) == 0,
          "%s cache: forward after W changed unannounced is stale", path);
    gemm_bf16_cache_clear();
    CHECK(gemm_bf16_cache_bytes() == 0, "cache not empty after gemm_bf16_cache_clear");
    free(x), free(w);
}

/* A frozen bf16 W declared with gemm_bf16_keep_packed (a DPO reference): the linear and the
 * lm_head read its packing from the cache, made on the first product and reused (the cache does
 * not grow on the second), with results bit for bit those of the per-call packing; a drop over
 * its bytes (model_free) ends the declaration and the packing. */
static void check_kept_bf16(void) {
    enum { N = 9, IN = 96, OUT = 64, VOCAB = 200 };
    unsigned seed = 12;
    float *x = malloc(N * IN * sizeof *x), *w = malloc(VOCAB * IN * sizeof *w);
    uint16_t *w16 = malloc(VOCAB * IN * sizeof *w16);
    fill(x, N * IN, &seed), fill(w, VOCAB * IN, &seed);
    for (int i = 0; i < VOCAB * IN; i++)
        w16[i] = f32_to_bf16(w[i]);
    int32_t target[N];
    for (int r = 0; r < N; r++)
        target[r] = (r * 37) % VOCAB;
    WeightRef ref = {.bf16 = w16};
    LogitCap cap = {0.0f, 1.0f};
    float per_call[N * OUT], kept_out[N * OUT], lp_call[N], lp_kept[N];
    const char *path = gemm_bf16_path_name(gemm_bf16_path());
    gemm_bf16_cache_clear();
    autocast_linear_forward(per_call, x, ref, NULL, N, IN, OUT);
    autocast_logprob_forward(lp_call, NULL, x, target, ref, N, IN, VOCAB, cap);
    CHECK(gemm_bf16_cache_bytes() == 0, "%s kept: a bf16 W not declared was cached", path);

    gemm_bf16_keep_packed(w16, VOCAB * IN * sizeof *w16);
    CHECK(gemm_bf16_weight_kept(w16 + 5), "%s kept: w16 not found in its range", path);
    autocast_linear_forward(kept_out, x, ref, NULL, N, IN, OUT);
    size_t after_linear = gemm_bf16_cache_bytes();
    CHECK(after_linear > 0, "%s kept: the declared W's packing is not in the cache", path);
    autocast_logprob_forward(lp_kept, NULL, x, target, ref, N, IN, VOCAB, cap);
    size_t after_both = gemm_bf16_cache_bytes();
    CHECK(after_both > after_linear, "%s kept: the lm_head's packing is not in the cache", path);
    autocast_linear_forward(kept_out, x, ref, NULL, N, IN, OUT);
    autocast_logprob_forward(lp_kept, NULL, x, target, ref, N, IN, VOCAB, cap);
    CHECK(gemm_bf16_cache_bytes() == after_both, "%s kept: packed again on the second call", path);
    CHECK(memcmp(kept_out, per_call, sizeof per_call) == 0,
          "%s kept: the linear differs from the per-call packing", path);
    CHECK(memcmp(lp_kept, lp_call, sizeof lp_call) == 0,
          "%s kept: the lm_head's log-probs differ from the per-call packing", path);

    gemm_bf16_weights_changed(w16, VOCAB * IN * sizeof *w16);
    CHECK(!gemm_bf16_weight_kept(w16 + 5), "%s kept: still declared after a drop", path);
    CHECK(gemm_bf16_cache_bytes() == 0, "%s kept: packing left after a drop", path);
    free(x), free(w), free(w16);
}

/* bf16_round_copy (out of place and in place) and bf16_narrow against f32_to_bf16, value by
 * value and bit for bit: at lengths that end inside the vector loop's epilogue, below and above
 * the threshold where they go parallel, over values with every low half (ties to even both ways,
 * carries into the exponent), infinities, NaNs and denormals. */
static void check_round_loops(void) {
    const size_t lens[] = {1, 15, 17, 65536 + 37, 300001};
    unsigned seed = 21;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        float *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst),
              *in_place = malloc(n * sizeof *in_place);
        uint16_t *narrow = malloc(n * sizeof *narrow);
        const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u,
                                    0xff800000u, 0x7fc00001u, 0xffa00000u, 0x00008000u,
                                    0x80018000u, 0x3f80ffffu, 0x00000000u, 0x80000000u};
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)rand_r(&seed) << 16 ^ (uint32_t)rand_r(&seed);
            if (i % 7 == 3) u = special[(i / 7) % (sizeof special / sizeof *special)];
            memcpy(&src[i], &u, sizeof u);
        }
        memcpy(in_place, src, n * sizeof *src);
        bf16_round_copy(dst, src, n);
        bf16_round_inplace(in_place, n);
        bf16_narrow(narrow, src, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t want = f32_to_bf16(src[i]);
            uint32_t got, got_in_place, want32 = (uint32_t)want << 16;
            memcpy(&got, &dst[i], sizeof got);
            memcpy(&got_in_place, &in_place[i], sizeof got_in_place);
            bad += got != want32 || got_in_place != want32 || narrow[i] != want;
        }
        CHECK(bad == 0, "bf16 rounding loops: %d of %zu values differ from f32_to_bf16", bad, n);
        free(src), free(dst), free(in_place), free(narrow);
    }
}

int main(void) {
    check_round_loops();
    /* every path the products can take here: the sgemm one, then each bf16 GEMM */
    for (int p = GEMM_BF16_NONE; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        check_shape(5, 72, 40, 1);
        check_shape(33, 70, 45, 2);
        check_shape(300, 96, 64, 3);
        if (gemm_bf16_path() != GEMM_BF16_NONE) check_weight_cache(), check_kept_bf16();
    }
    return harness_finish("test_autocast_kernels");
}
