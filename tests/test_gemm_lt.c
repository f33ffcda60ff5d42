/* kernels/cuda/gemm.h's host reference and the row-major products on it (gemm_ops.h), the GEMM
 * of the emulated CUDA backend:
 *  - gemm_lt against a triple loop in double written here from cuBLAS's column-major definition,
 *    on odd shapes, all four op combinations, leading dimensions above the rows (the padding
 *    holds NaN, so reading it shows), alpha and beta (C poisoned under beta 0; C's padding rows
 *    must survive), fp32 and bf16 inputs, fp32 and bf16 outputs, with a bias;
 *  - the argument checks (gemm.h rule 5): each bad leading dimension refused, C untouched;
 *  - every row-major product against the CPU backend's op (backend_cpu) in fp32 to 1e-5
 *    relative, and with bf16 inputs against the CPU on the same rounded values (1e-5) and against
 *    the unrounded fp32 result within bf16's rounding bound.
 * The row-major to column-major mapping is where layout bugs live; every product of gemm_ops.c
 * has a transposed operand or an accumulation somewhere here that a wrong ld, a swapped op or a
 * wrong beta changes. */
#include "common/error.h"
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_ops.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) {
    return harness_frand(&rng_state);
}

static float *rand_f(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static float *nan_f(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static float *copy_f(const float *x, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static uint16_t *to_bf16(const float *x, size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = f32_to_bf16(x[i]);
    return p;
}

/* x rounded to bf16 and widened back, in place: the values a bf16 product multiplies. */
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static float *from_bf16(const uint16_t *x, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = bf16_to_f32(x[i]);
    return p;
}

/* Values off want by more than rel times (|want| + the rms of want): relative to the element,
 * with the tensor's scale as the floor where a sum cancels to near zero. */
static int count_off(const float *got, const float *want, size_t n, double rel) {
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)want[i] * want[i];
    double rms = n ? sqrt(ss / (double)n) : 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= rel * (fabs(want[i]) + rms))) bad++;
    return bad;
}

/* ------------------------------------------------------ gemm_lt against the definition */

/* Element (i, l) of op(X), X stored column-major with leading dimension ld. */
static double op_at(const float *x, GemmOp op, int ld, int i, int l) {
    return op == GEMM_OP_N ? x[(size_t)i + (size_t)l * ld] : x[(size_t)l + (size_t)i * ld];
}

/* One gemm_lt call on the reference against the definition in double: D = alpha op(A) op(B) +
 * beta C (+ bias), ops and types as given. Every stored element beyond the matrices' rows is
 * NaN (A, B) or a sentinel (C), so an index that strays into the padding shows. */
static void check_gemm(GemmLt *g, GemmOp op_a, GemmOp op_b, int m, int n, int k, int pad,
                       float alpha, float beta, GemmType ab_t, GemmType c_t, bool with_bias) {
    int a_rows = op_a == GEMM_OP_N ? m : k, a_cols = op_a == GEMM_OP_N ? k : m;
    int b_rows = op_b == GEMM_OP_N ? k : n, b_cols = op_b == GEMM_OP_N ? n : k;
    int lda = a_rows + pad, ldb = b_rows + pad, ldc = m + pad;
    size_t na = (size_t)lda * a_cols, nb = (size_t)ldb * b_cols, nc = (size_t)ldc * n;
    float *A = nan_f(na), *B = nan_f(nb), *C = malloc(nc * sizeof *C), *bias = rand_f((size_t)m);
    for (int c = 0; c < a_cols; c++)
        for (int r = 0; r < a_rows; r++)
            A[(size_t)r + (size_t)c * lda] = frand();
    for (int c = 0; c < b_cols; c++)
        for (int r = 0; r < b_rows; r++)
            B[(size_t)r + (size_t)c * ldb] = frand();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) /* rows < m: C (NaN under beta 0); beyond: sentinel */
            C[(size_t)i + (size_t)j * ldc] = i >= m ? 1024.0f : beta == 0.0f ? NAN : frand();
    if (ab_t == GEMM_BF16) round_bf16(A, na), round_bf16(B, nb);
    if (c_t == GEMM_BF16) round_bf16(C, nc), round_bf16(bias, (size_t)m);

    /* the arrays the call gets, in its types */
    uint16_t *A16 = to_bf16(A, na), *B16 = to_bf16(B, nb), *C16 = to_bf16(C, nc);
    uint16_t *bias16 = to_bf16(bias, (size_t)m);
    float *Cf = copy_f(C, nc);
    const void *a_arg = ab_t == GEMM_F32 ? (const void *)A : A16;
    const void *b_arg = ab_t == GEMM_F32 ? (const void *)B : B16;
    void *c_arg = c_t == GEMM_F32 ? (void *)Cf : C16;
    const void *bias_arg = !with_bias ? NULL : c_t == GEMM_F32 ? (const void *)bias : bias16;
    int rc = gemm_lt_bias(g, op_a, op_b, m, n, k, alpha, a_arg, ab_t, lda, b_arg, ab_t, ldb, beta,
                          c_arg, c_t, ldc, bias_arg);
    CHECK(rc == 0, "gemm_lt failed: %s", err_msg());
    float *got = c_t == GEMM_F32 ? Cf : from_bf16(C16, nc);

    int bad = 0, padding_hit = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            size_t at = (size_t)i + (size_t)j * ldc;
            if (i >= m) { /* rule 2: never touched */
                padding_hit += got[at] != 1024.0f;
                continue;
            }
            double s = 0, mag = 0;
            for (int l = 0; l < k; l++) {
                double p = op_at(A, op_a, lda, i, l) * op_at(B, op_b, ldb, l, j);
                s += p, mag += fabs(p);
            }
            double want = alpha * s, scale = fabs(alpha) * mag;
            if (beta != 0.0f) want += beta * (double)C[at], scale += fabs(beta * (double)C[at]);
            if (with_bias) want += bias[i], scale += fabs(bias[i]);
            /* fp32 accumulation of k products and three more terms: (k + 3) units of 2^-24 of
             * the sum of magnitudes (a little over the worst case); a bf16 D adds its own
             * rounding, at most 2^-8 of the value (8 significant bits) */
            double tol = (k + 3) * 6.0e-8 * scale + 1e-30;
            if (c_t == GEMM_BF16) tol += fabs(want) / 256.0;
            if (!(fabs(got[at] - want) <= tol)) {
                if (bad < 3)
                    fprintf(stderr, "  D(%d,%d) = %.9g, want %.9g (tol %.3g)\n", i, j, got[at],
                            want, tol);
                bad++;
            }
        }
    CHECK(bad == 0 && padding_hit == 0,
          "gemm_lt op %s%s m %d n %d k %d pad %d alpha %g beta %g %s->%s%s: %d values off the "
          "definition, %d padding values of C changed",
          op_a == GEMM_OP_N ? "N" : "T", op_b == GEMM_OP_N ? "N" : "T", m, n, k, pad, alpha, beta,
          ab_t == GEMM_F32 ? "fp32" : "bf16", c_t == GEMM_F32 ? "fp32" : "bf16",
          with_bias ? " +bias" : "", bad, padding_hit);
    if (got != Cf) free(got);
    free(A), free(B), free(C), free(bias), free(A16), free(B16), free(C16), free(bias16), free(Cf);
}

static void test_gemm_definition(GemmLt *g) {
    static const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 4, 33}, {8, 13, 1}, {31, 29, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ops = 0; ops < 4; ops++) {
            GemmOp oa = ops & 1 ? GEMM_OP_T : GEMM_OP_N, ob = ops & 2 ? GEMM_OP_T : GEMM_OP_N;
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            check_gemm(g, oa, ob, m, n, k, 0, 1.0f, 0.0f, GEMM_F32, GEMM_F32, false);
            check_gemm(g, oa, ob, m, n, k, 3, 1.0f, 1.0f, GEMM_F32, GEMM_F32, false);
            check_gemm(g, oa, ob, m, n, k, 5, -0.75f, 0.5f, GEMM_F32, GEMM_F32, true);
            check_gemm(g, oa, ob, m, n, k, 2, 1.0f, 0.0f, GEMM_BF16, GEMM_F32, false);
            check_gemm(g, oa, ob, m, n, k, 1, 0.5f, 1.0f, GEMM_BF16, GEMM_BF16, true);
        }
}

/* Rule 5: each bad argument refused with a message naming it, C as it was. */
static void test_gemm_checks(GemmLt *g) {
    float A[64], B[64], C[64], before[64];
    for (int i = 0; i < 64; i++)
        A[i] = B[i] = C[i] = before[i] = (float)i;
    struct {
        GemmOp oa, ob;
        int m, n, k, lda, ldb, ldc;
        GemmType bt;
        const char *names;
    } bad[] = {
        {GEMM_OP_N, GEMM_OP_N, 4, 3, 5, 3, 5, 4, GEMM_F32, "lda"}, /* A m x k: lda >= m = 4 */
        {GEMM_OP_T, GEMM_OP_N, 4, 3, 5, 4, 5, 4, GEMM_F32, "lda"}, /* A k x m: lda >= k = 5 */
        {GEMM_OP_N, GEMM_OP_N, 4, 3, 5, 4, 4, 4, GEMM_F32, "ldb"}, /* B k x n: ldb >= k = 5 */
        {GEMM_OP_N, GEMM_OP_T, 4, 3, 5, 4, 2, 4, GEMM_F32, "ldb"}, /* B n x k: ldb >= n = 3 */
        {GEMM_OP_N, GEMM_OP_N, 4, 3, 5, 4, 5, 3, GEMM_F32, "ldc"}, /* C m x n: ldc >= m = 4 */
        {GEMM_OP_N, GEMM_OP_N, 4, 3, 0, 4, 5, 4, GEMM_F32, "at least 1"}, /* k = 0 */
        {GEMM_OP_N, GEMM_OP_N, 4, 3, 5, 4, 5, 4, GEMM_BF16, "bf16"},      /* A fp32, B bf16 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err_clear();
        int rc = gemm_lt(g, bad[i].oa, bad[i].ob, bad[i].m, bad[i].n, bad[i].k, 1.0f, A, GEMM_F32,
                         bad[i].lda, B, bad[i].bt, bad[i].ldb, 0.0f, C, GEMM_F32, bad[i].ldc);
        CHECK(rc == GEMM_INVALID_VALUE && strstr(err_msg(), bad[i].names),
              "bad call %zu: rc %d, message '%s' (wanted one naming %s)", i, rc, err_msg(),
              bad[i].names);
        CHECK(memcmp(C, before, sizeof C) == 0, "bad call %zu wrote C", i);
    }
    /* the smallest legal leading dimensions of the same calls pass */
    CHECK(gemm_lt(g, GEMM_OP_T, GEMM_OP_T, 4, 3, 5, 1.0f, A, GEMM_F32, 5, B, GEMM_F32, 3, 0.0f, C,
                  GEMM_F32, 4) == 0,
          "a legal call refused: %s", err_msg());
}

/* Rule 6: the reference's bits do not depend on how many threads compute them (each element is
 * one thread's chain over l in order), so the emulated backend reproduces itself anywhere. */
static void test_gemm_thread_count(GemmLt *g) {
    const int m = 45, n = 38, k = 301;
    float *A = rand_f((size_t)k * m), *B = rand_f((size_t)k * n);
    float *one = nan_f((size_t)m * n), *many = nan_f((size_t)m * n);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK(gemm_lt(g, GEMM_OP_T, GEMM_OP_N, m, n, k, 1.0f, A, GEMM_F32, k, B, GEMM_F32, k, 0.0f, one,
                  GEMM_F32, m) == 0,
          "%s", err_msg());
    omp_set_num_threads(threads > 1 ? threads : 2);
    CHECK(gemm_lt(g, GEMM_OP_T, GEMM_OP_N, m, n, k, 1.0f, A, GEMM_F32, k, B, GEMM_F32, k, 0.0f,
                  many, GEMM_F32, m) == 0,
          "%s", err_msg());
    omp_set_num_threads(threads);
    CHECK(memcmp(one, many, (size_t)m * n * sizeof(float)) == 0,
          "gemm_lt: one thread and several give different bits");
    free(A), free(B), free(one), free(many);
}

/* --------------------------------------- the row-major products against the CPU backend */

#define N_ROWS 13
#define IN     37
#define OUT    23
#define RANK   5

/* The shapes of one layer's products and their inputs, fp32. */
typedef struct {
    float *in, *w, *bias, *dout, *A, *B;
} LayerData;

static LayerData layer_data(void) {
    return (LayerData){rand_f(N_ROWS * IN),  rand_f(OUT * IN),  rand_f(OUT),
                       rand_f(N_ROWS * OUT), rand_f(RANK * IN), rand_f(OUT * RANK)};
}

static void layer_free(LayerData *d) {
    free(d->in), free(d->w), free(d->bias), free(d->dout), free(d->A), free(d->B);
}

static void test_linear_ops(GemmLt *g) {
    const Backend *cpu = backend_cpu();
    LayerData d = layer_data();
    /* forward, with and without the bias epilogue */
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *bias = with_bias ? d.bias : NULL;
        float *want = nan_f(N_ROWS * OUT), *got = nan_f(N_ROWS * OUT);
        cpu->linear(cpu, want, d.in, (WeightRef){.f32 = d.w}, NULL, bias, N_ROWS, IN, OUT);
        CHECK(gemm_linear(g, got, d.in, d.w, bias, N_ROWS, IN, OUT, GEMM_F32, GEMM_F32) == 0,
              "gemm_linear: %s", err_msg());
        int bad = count_off(got, want, N_ROWS * OUT, 1e-5);
        CHECK(bad == 0, "linear%s: %d of %d values off the CPU backend's", bias ? " +bias" : "",
              bad, N_ROWS * OUT);
        free(want), free(got);
    }
    /* backward: din written, dW and dbias accumulated onto what is there */
    float *dw0 = rand_f(OUT * IN), *db0 = rand_f(OUT);
    float *din_w = nan_f(N_ROWS * IN), *dw_w = copy_f(dw0, OUT * IN), *db_w = copy_f(db0, OUT);
    float *din_g = nan_f(N_ROWS * IN), *dw_g = copy_f(dw0, OUT * IN), *db_g = copy_f(db0, OUT);
    cpu->linear_backward(cpu, din_w, dw_w, db_w, d.dout, d.in, (WeightRef){.f32 = d.w}, N_ROWS, IN,
                         OUT);
    CHECK(gemm_linear_backward(g, din_g, dw_g, db_g, d.dout, d.in, d.w, N_ROWS, IN, OUT, GEMM_F32,
                               GEMM_F32) == 0,
          "gemm_linear_backward: %s", err_msg());
    CHECK(count_off(din_g, din_w, N_ROWS * IN, 1e-5) == 0, "linear_backward: din off the CPU's");
    CHECK(count_off(dw_g, dw_w, OUT * IN, 1e-5) == 0,
          "linear_backward: dW off the CPU's (accumulated with beta 1?)");
    CHECK(count_off(db_g, db_w, OUT, 1e-5) == 0, "linear_backward: dbias off the CPU's");
    free(dw0), free(db0), free(din_w), free(dw_w), free(db_w), free(din_g), free(dw_g), free(db_g);
    layer_free(&d);
}

static void test_lora_ops(GemmLt *g) {
    const Backend *cpu = backend_cpu();
    LayerData d = layer_data();
    const float scaling = 1.75f;
    float *tmp = nan_f(N_ROWS * RANK), *dtmp = nan_f(N_ROWS * RANK);
    /* forward: accumulated onto an existing output (the base layer's) */
    float *out0 = rand_f(N_ROWS * OUT);
    float *want = copy_f(out0, N_ROWS * OUT), *got = copy_f(out0, N_ROWS * OUT);
    cpu->lora(cpu, want, d.in, d.A, d.B, N_ROWS, IN, OUT, RANK, scaling, 0.0f, 0);
    CHECK(gemm_lora(g, got, d.in, d.A, d.B, tmp, N_ROWS, IN, OUT, RANK, scaling, GEMM_F32,
                    GEMM_F32) == 0,
          "gemm_lora: %s", err_msg());
    CHECK(count_off(got, want, N_ROWS * OUT, 1e-5) == 0, "lora: out off the CPU's");
    /* backward: all three accumulated */
    float *dx0 = rand_f(N_ROWS * IN), *dA0 = rand_f(RANK * IN), *dB0 = rand_f(OUT * RANK);
    float *dx_w = copy_f(dx0, N_ROWS * IN), *dA_w = copy_f(dA0, RANK * IN);
    float *dB_w = copy_f(dB0, OUT * RANK), *dx_g = copy_f(dx0, N_ROWS * IN);
    float *dA_g = copy_f(dA0, RANK * IN), *dB_g = copy_f(dB0, OUT * RANK);
    cpu->lora_backward(cpu, dx_w, dA_w, dB_w, d.dout, d.in, d.A, d.B, N_ROWS, IN, OUT, RANK,
                       scaling, 0.0f, 0);
    CHECK(gemm_lora_backward(g, dx_g, dA_g, dB_g, d.dout, d.in, d.A, d.B, tmp, dtmp, N_ROWS, IN,
                             OUT, RANK, scaling, GEMM_F32, GEMM_F32) == 0,
          "gemm_lora_backward: %s", err_msg());
    CHECK(count_off(dx_g, dx_w, N_ROWS * IN, 1e-5) == 0, "lora_backward: din off the CPU's");
    CHECK(count_off(dA_g, dA_w, RANK * IN, 1e-5) == 0, "lora_backward: dA off the CPU's");
    CHECK(count_off(dB_g, dB_w, OUT * RANK, 1e-5) == 0, "lora_backward: dB off the CPU's");
    free(tmp), free(dtmp), free(out0), free(want), free(got), free(dx0), free(dA0), free(dB0);
    free(dx_w), free(dA_w), free(dB_w), free(dx_g), free(dA_g), free(dB_g);
    layer_free(&d);
}

/* The lm_head of logprob / logprob_backward, chunk by chunk through the vocabulary (CHUNK rows
 * of W at a time, the last one short) into a tile whose row stride LD_TILE exceeds the chunk:
 * log-softmax and its gradient computed here in double from the tiles, the result against the
 * CPU backend's fused logprob. */
#define LM_ROWS 11
#define LM_H    24
#define LM_V    50
#define CHUNK   16
#define LD_TILE 20

static void test_lm_head_ops(GemmLt *g) {
    const Backend *cpu = backend_cpu();
    float *hidden = rand_f(LM_ROWS * LM_H), *w = rand_f(LM_V * LM_H), *dlogp = rand_f(LM_ROWS);
    for (size_t i = 0; i < (size_t)LM_V * LM_H; i++)
        w[i] *= 3.0f; /* logits of a few units: a softmax that is not flat */
    int32_t target[LM_ROWS];
    for (int r = 0; r < LM_ROWS; r++)
        target[r] = (r * 17 + 3) % LM_V;
    float *logits = nan_f(LM_ROWS * LM_V); /* gathered from the tiles */
    float *tile = nan_f(LM_ROWS * LD_TILE);
    for (int c0 = 0; c0 < LM_V; c0 += CHUNK) {
        int cols = LM_V - c0 < CHUNK ? LM_V - c0 : CHUNK;
        CHECK(gemm_lm_head_logits(g, tile, LD_TILE, hidden, w + (size_t)c0 * LM_H, LM_ROWS, cols,
                                  LM_H, GEMM_F32, GEMM_F32) == 0,
              "gemm_lm_head_logits: %s", err_msg());
        for (int r = 0; r < LM_ROWS; r++)
            memcpy(logits + (size_t)r * LM_V + c0, tile + (size_t)r * LD_TILE,
                   (size_t)cols * sizeof(float));
    }
    float logp_g[LM_ROWS], logp_w[LM_ROWS];
    double lse[LM_ROWS];
    for (int r = 0; r < LM_ROWS; r++) {
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < LM_V; v++)
            mx = fmax(mx, logits[(size_t)r * LM_V + v]);
        for (int v = 0; v < LM_V; v++)
            s += exp(logits[(size_t)r * LM_V + v] - mx);
        lse[r] = mx + log(s);
        logp_g[r] = (float)(logits[(size_t)r * LM_V + target[r]] - lse[r]);
    }
    cpu->logprob(cpu, logp_w, NULL, hidden, target, (WeightRef){.f32 = w}, LM_ROWS, LM_H, LM_V);
    CHECK(count_off(logp_g, logp_w, LM_ROWS, 1e-5) == 0, "lm_head logits: logp off the CPU's");

    /* backward: dz = g (onehot - softmax) per chunk, dhidden summed over the chunks */
    float *dh_g = calloc(LM_ROWS * LM_H, sizeof(float)), *dh_w = nan_f(LM_ROWS * LM_H);
    float *dw0 = rand_f(LM_V * LM_H), *dw_g = copy_f(dw0, LM_V * LM_H);
    float *dw_w = copy_f(dw0, LM_V * LM_H);
    for (int c0 = 0; c0 < LM_V; c0 += CHUNK) {
        int cols = LM_V - c0 < CHUNK ? LM_V - c0 : CHUNK;
        for (int r = 0; r < LM_ROWS; r++)
            for (int j = 0; j < cols; j++) {
                double p = exp(logits[(size_t)r * LM_V + c0 + j] - lse[r]);
                tile[(size_t)r * LD_TILE + j] =
                    (float)(dlogp[r] * ((c0 + j == target[r] ? 1.0 : 0.0) - p));
            }
        CHECK(gemm_lm_head_backward(g, dh_g, dw_g + (size_t)c0 * LM_H, tile, LD_TILE, hidden,
                                    w + (size_t)c0 * LM_H, LM_ROWS, cols, LM_H, GEMM_F32,
                                    GEMM_F32) == 0,
              "gemm_lm_head_backward: %s", err_msg());
    }
    cpu->logprob_backward(cpu, dh_w, dw_w, dlogp, hidden, target, (WeightRef){.f32 = w}, LM_ROWS,
                          LM_H, LM_V);
    CHECK(count_off(dh_g, dh_w, LM_ROWS * LM_H, 1e-5) == 0,
          "lm_head backward: dhidden off the CPU's");
    CHECK(count_off(dw_g, dw_w, LM_V * LM_H, 1e-5) == 0, "lm_head backward: dW off the CPU's");
    free(hidden), free(w), free(dlogp), free(logits), free(tile), free(dh_g), free(dh_w);
    free(dw0), free(dw_g), free(dw_w);
}

/* bf16 inputs: against the CPU on the same rounded values (the CPU's fp32 product of those
 * values is the same math, so 1e-5 still holds), and against the unrounded fp32 product within
 * bf16's bound: bf16 keeps 8 significant bits, so rounding moves a value by at most 2^-8 of
 * itself, a product of two rounded values by about 2^-7, and the sum by 2^-7 of the sum of
 * magnitudes. A bf16 output adds its own rounding, 2^-8 of |value|. */
static void test_bf16_ops(GemmLt *g) {
    const Backend *cpu = backend_cpu();
    LayerData d = layer_data();
    float *in_r = copy_f(d.in, N_ROWS * IN), *w_r = copy_f(d.w, OUT * IN);
    float *dout_r = copy_f(d.dout, N_ROWS * OUT);
    round_bf16(in_r, N_ROWS * IN), round_bf16(w_r, OUT * IN), round_bf16(dout_r, N_ROWS * OUT);
    uint16_t *in16 = to_bf16(d.in, N_ROWS * IN), *w16 = to_bf16(d.w, OUT * IN);
    uint16_t *dout16 = to_bf16(d.dout, N_ROWS * OUT);

    float *want_r = nan_f(N_ROWS * OUT), *want_f = nan_f(N_ROWS * OUT);
    float *got = nan_f(N_ROWS * OUT);
    cpu->linear(cpu, want_r, in_r, (WeightRef){.f32 = w_r}, NULL, NULL, N_ROWS, IN, OUT);
    cpu->linear(cpu, want_f, d.in, (WeightRef){.f32 = d.w}, NULL, NULL, N_ROWS, IN, OUT);
    CHECK(gemm_linear(g, got, in16, w16, NULL, N_ROWS, IN, OUT, GEMM_BF16, GEMM_F32) == 0,
          "gemm_linear bf16: %s", err_msg());
    CHECK(count_off(got, want_r, N_ROWS * OUT, 1e-5) == 0,
          "linear bf16 -> fp32: off the CPU's product of the rounded values");
    int off_bound = 0;
    for (int r = 0; r < N_ROWS; r++)
        for (int j = 0; j < OUT; j++) {
            double mag = 0;
            for (int i = 0; i < IN; i++)
                mag += fabs((double)d.in[r * IN + i] * d.w[j * IN + i]);
            off_bound += !(fabs(got[r * OUT + j] - want_f[r * OUT + j]) <= mag / 128.0 + 1e-6);
        }
    CHECK(off_bound == 0, "linear bf16: %d values beyond bf16's bound from fp32", off_bound);

    uint16_t *got16 = malloc(N_ROWS * OUT * sizeof *got16);
    CHECK(gemm_linear(g, got16, in16, w16, NULL, N_ROWS, IN, OUT, GEMM_BF16, GEMM_BF16) == 0,
          "gemm_linear bf16 -> bf16: %s", err_msg());
    float *got16f = from_bf16(got16, N_ROWS * OUT);
    int bad16 = 0;
    for (int i = 0; i < N_ROWS * OUT; i++)
        if (!(fabs(got16f[i] - want_r[i]) <= fabs(want_r[i]) / 256.0 + 1e-6) && bad16++ < 3)
            fprintf(stderr, "  [%d] %.9g want %.9g\n", i, got16f[i], want_r[i]);
    CHECK(bad16 == 0, "linear bf16 -> bf16: %d values not the fp32 result rounded", bad16);

    /* backward with bf16 inputs and fp32 gradients */
    float *dw0 = rand_f(OUT * IN), *db0 = rand_f(OUT);
    float *din_w = nan_f(N_ROWS * IN), *dw_w = copy_f(dw0, OUT * IN), *db_w = copy_f(db0, OUT);
    float *din_g = nan_f(N_ROWS * IN), *dw_g = copy_f(dw0, OUT * IN), *db_g = copy_f(db0, OUT);
    cpu->linear_backward(cpu, din_w, dw_w, db_w, dout_r, in_r, (WeightRef){.f32 = w_r}, N_ROWS, IN,
                         OUT);
    CHECK(gemm_linear_backward(g, din_g, dw_g, db_g, dout16, in16, w16, N_ROWS, IN, OUT, GEMM_BF16,
                               GEMM_F32) == 0,
          "gemm_linear_backward bf16: %s", err_msg());
    CHECK(count_off(din_g, din_w, N_ROWS * IN, 1e-5) == 0, "linear_backward bf16: din off");
    CHECK(count_off(dw_g, dw_w, OUT * IN, 1e-5) == 0, "linear_backward bf16: dW off");
    CHECK(count_off(db_g, db_w, OUT, 1e-5) == 0, "linear_backward bf16: dbias off");

    free(in_r), free(w_r), free(dout_r), free(in16), free(w16), free(dout16), free(want_r);
    free(want_f), free(got), free(got16), free(got16f), free(dw0), free(db0), free(din_w);
    free(dw_w), free(db_w), free(din_g), free(dw_g), free(db_g);
    layer_free(&d);
}

int main(void) {
    GemmLt *g = gemm_lt_reference_new();
    CHECK(strcmp(gemm_lt_name(g), "reference") == 0, "name %s", gemm_lt_name(g));
    test_gemm_definition(g);
    test_gemm_checks(g);
    test_gemm_thread_count(g);
    test_linear_ops(g);
    test_lora_ops(g);
    test_lm_head_ops(g);
    test_bf16_ops(g);
    gemm_lt_free(g);
    return harness_finish("test_gemm_lt");
}
