/* kernels/cuda/gemm.h over cuBLASLt against its host reference (which test_gemm_lt checks against
 * the definition and the CPU backend): the same calls with the same inputs on both, on odd shapes,
 * all four op combinations, padded leading dimensions (C's padding must survive), beta 0 over a
 * NaN C, fp32 and bf16, a bias; then every row-major product of gemm_ops.h, including an lm_head
 * chunk at a 4-byte-aligned offset. fp32 to 1e-5 relative (no TF32: with it the fp32 products
 * would be off by about 1e-3); every GPU result twice, bitwise equal. Exits 77 (skipped) where no
 * CUDA device is present, so CI without a GPU still builds it. */
#include "common/error.h"
#include "common/float16.h"
#include "harness.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/gemm_ops.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x853c49e6748fea9bull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ---- one side of the comparison: the reference (host memory) or cuBLASLt (device memory) ---- */

typedef struct {
    GemmLt *g;
    bool device;
} Side;

static void *put(const Side *s, const void *host, size_t bytes) {
    void *p = NULL;
    if (!s->device) {
        p = malloc(bytes ? bytes : 1);
        memcpy(p, host, bytes);
    } else if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess ||
               cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "test_cuda_gemm: cudaMalloc/cudaMemcpy of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

/* Copies p back into host and releases p. */
static void take(const Side *s, void *host, void *p, size_t bytes) {
    if (!s->device) {
        memcpy(host, p, bytes);
        free(p);
        return;
    }
    CHECK(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy back: %s",
          cudaGetErrorString(cudaGetLastError()));
    cudaFree(p);
}

static void drop(const Side *s, void *p) {
    if (s->device)
        cudaFree(p);
    else
        free(p);
}

static size_t type_bytes(GemmType t) {
    return t == GEMM_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* n random values in type t (bf16: rounded), or NaN / sentinel as asked. */
static void *rand_t(size_t n, GemmType t) {
    void *p = malloc((n ? n : 1) * type_bytes(t));
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (t == GEMM_F32)
            ((float *)p)[i] = v;
        else
            ((uint16_t *)p)[i] = f32_to_bf16(v);
    }
    return p;
}

static float value_at(const void *p, GemmType t, size_t i) {
    return t == GEMM_F32 ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}

/* Values of got off want by more than rel (|want| + rms(want)); NaN counts. */
static int count_off(const void *got, const void *want, GemmType t, size_t n, double rel) {
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)value_at(want, t, i) * value_at(want, t, i);
    double rms = n ? sqrt(ss / (double)n) : 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double w = value_at(want, t, i), d = fabs((double)value_at(got, t, i) - w);
        if (!(d <= rel * (fabs(w) + rms))) bad++;
    }
    return bad;
}

/* ------------------------------------------------------------------- gemm_lt, call by call */

typedef struct {
    GemmOp oa, ob;
    int m, n, k, pad;
    float alpha, beta;
    GemmType ab, c;
    bool bias;
} Call;

/* Runs call on side s with the host inputs A, B, C0 (C's initial contents), bias; D into out. */
static void run_call(const Side *s, const Call *c, const void *A, size_t na, const void *B,
                     size_t nb, const void *C0, size_t nc, const void *bias, void *out) {
    int a_rows = c->oa == GEMM_OP_N ? c->m : c->k, b_rows = c->ob == GEMM_OP_N ? c->k : c->n;
    void *a = put(s, A, na * type_bytes(c->ab)), *b = put(s, B, nb * type_bytes(c->ab));
    void *cc = put(s, C0, nc * type_bytes(c->c));
    void *bi = c->bias ? put(s, bias, (size_t)c->m * type_bytes(c->c)) : NULL;
    int rc = gemm_lt_bias(s->g, c->oa, c->ob, c->m, c->n, c->k, c->alpha, a, c->ab, a_rows + c->pad,
                          b, c->ab, b_rows + c->pad, c->beta, cc, c->c, c->m + c->pad, bi);
    CHECK(rc == 0, "%s: %s", gemm_lt_name(s->g), err_msg());
    take(s, out, cc, nc * type_bytes(c->c));
    drop(s, a), drop(s, b);
    if (bi) drop(s, bi);
}

static void check_call(const Side *ref, const Side *gpu, const Call *c) {
    int a_cols = c->oa == GEMM_OP_N ? c->k : c->m, b_cols = c->ob == GEMM_OP_N ? c->n : c->k;
    int a_rows = c->oa == GEMM_OP_N ? c->m : c->k, b_rows = c->ob == GEMM_OP_N ? c->k : c->n;
    int ldc = c->m + c->pad;
    size_t na = (size_t)(a_rows + c->pad) * a_cols, nb = (size_t)(b_rows + c->pad) * b_cols;
    size_t nc = (size_t)ldc * c->n;
    void *A = rand_t(na, c->ab), *B = rand_t(nb, c->ab), *C0 = rand_t(nc, c->c);
    void *bias = rand_t((size_t)c->m, c->c);
    for (int j = 0; j < c->n; j++) /* padding rows: a sentinel; under beta 0, C itself NaN */
        for (int i = 0; i < ldc; i++) {
            size_t at = (size_t)i + (size_t)j * ldc;
            float v = i >= c->m ? 1024.0f : c->beta == 0.0f ? NAN : value_at(C0, c->c, at);
            if (c->c == GEMM_F32)
                ((float *)C0)[at] = v;
            else
                ((uint16_t *)C0)[at] = f32_to_bf16(v);
        }
    size_t bytes = nc * type_bytes(c->c);
    void *want = malloc(bytes), *got = malloc(bytes), *again = malloc(bytes);
    run_call(ref, c, A, na, B, nb, C0, nc, bias, want);
    run_call(gpu, c, A, na, B, nb, C0, nc, bias, got);
    run_call(gpu, c, A, na, B, nb, C0, nc, bias, again);
    /* fp32: 1e-5; a bf16 D: the two fp32 results may round to neighbouring bf16 values */
    int bad = count_off(got, want, c->c, nc, c->c == GEMM_F32 ? 1e-5 : 1.0 / 128);
    int padding = 0;
    for (int j = 0; j < c->n; j++)
        for (int i = c->m; i < ldc; i++)
            padding += value_at(got, c->c, (size_t)i + (size_t)j * ldc) != 1024.0f;
    CHECK(bad == 0 && padding == 0,
          "cublaslt op %s%s m %d n %d k %d pad %d beta %g %s->%s%s: %d values off the "
          "reference, %d padding values changed",
          c->oa ? "T" : "N", c->ob ? "T" : "N", c->m, c->n, c->k, c->pad, c->beta,
          c->ab ? "bf16" : "fp32", c->c ? "bf16" : "fp32", c->bias ? " +bias" : "", bad, padding);
    CHECK(memcmp(got, again, bytes) == 0, "cublaslt op %s%s m %d n %d k %d: two runs differ",
          c->oa ? "T" : "N", c->ob ? "T" : "N", c->m, c->n, c->k);
    free(A), free(B), free(C0), free(bias), free(want), free(got), free(again);
}

static void test_calls(const Side *ref, const Side *gpu) {
    static const int shapes[][3] = {
        {1, 1, 1}, {3, 5, 7}, {17, 4, 33}, {64, 48, 96}, {127, 65, 257}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ops = 0; ops < 4; ops++) {
            GemmOp oa = ops & 1 ? GEMM_OP_T : GEMM_OP_N, ob = ops & 2 ? GEMM_OP_T : GEMM_OP_N;
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            Call calls[] = {
                {oa, ob, m, n, k, 0, 1.0f, 0.0f, GEMM_F32, GEMM_F32, false},
                {oa, ob, m, n, k, 3, 1.0f, 1.0f, GEMM_F32, GEMM_F32, false},
                {oa, ob, m, n, k, 5, -0.75f, 0.5f, GEMM_F32, GEMM_F32, true},
                {oa, ob, m, n, k, 8, 1.0f, 0.0f, GEMM_BF16, GEMM_F32, false},
                /* bf16 autocast's linear: bf16 operands, an fp32 bias and D */
                {oa, ob, m, n, k, 4, 1.0f, 0.0f, GEMM_BF16, GEMM_F32, true},
                {oa, ob, m, n, k, 8, 0.5f, 1.0f, GEMM_BF16, GEMM_BF16, true},
            };
            for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
                check_call(ref, gpu, &calls[i]);
        }
    /* A one-row D with a bias and ldc far above its row: cuBLASLt 11.1-11.8 left the bias off
     * some elements of exactly this fp32 case on pre-A100 GPUs (github.com/dfyz/
     * cublaslt-bias-epilogue). */
    Call one_row = {GEMM_OP_T, GEMM_OP_N, 1, 4, 768, 63, 1.0f, 0.0f, GEMM_F32, GEMM_F32, true};
    check_call(ref, gpu, &one_row);
}

/* --------------------------------------------------------------- the row-major products */

#define N_ROWS 37
#define IN     96
#define OUT    80
#define RANK   8
#define LM_H   25 /* odd: the chunk at row 3 is only 4-byte aligned */
#define LM_V   70
#define LD     40

typedef struct { /* host inputs, fp32 */
    float *in, *w, *bias, *dout, *A, *B, *dw0, *db0, *hid, *lm, *dz;
} Inputs;

typedef struct { /* host outputs */
    float *out, *din, *dw, *db, *lora_out, *dx, *dA, *dB, *logits, *dh, *dlm;
} Outputs;

static float *rand_f(size_t n) {
    return rand_t(n, GEMM_F32);
}

static float *zeros(size_t n) {
    return calloc(n ? n : 1, sizeof(float));
}

static Outputs outputs_new(void) {
    return (Outputs){zeros(N_ROWS * OUT),  zeros(N_ROWS * IN),  zeros(OUT * IN),
                     zeros(OUT),           zeros(N_ROWS * OUT), zeros(N_ROWS * IN),
                     zeros(RANK * IN),     zeros(OUT * RANK),   zeros(N_ROWS * LD),
                     zeros(N_ROWS * LM_H), zeros(LM_V * LM_H)};
}

static void outputs_free(Outputs *o) {
    free(o->out), free(o->din), free(o->dw), free(o->db), free(o->lora_out), free(o->dx);
    free(o->dA), free(o->dB), free(o->logits), free(o->dh), free(o->dlm);
}

#define F(n) ((size_t)(n) * sizeof(float))

/* Every product of gemm_ops.h, fp32, on side s; accumulated outputs start from dw0/db0 (dW,
 * dbias, dA, dB, dx, dlm) or the base output (LoRA), dhidden from zero. */
static void run_ops(const Side *s, const Inputs *x, Outputs *o) {
    GemmLt *g = s->g;
    void *in = put(s, x->in, F(N_ROWS * IN)), *w = put(s, x->w, F(OUT * IN));
    void *bias = put(s, x->bias, F(OUT)), *dout = put(s, x->dout, F(N_ROWS * OUT));
    void *A = put(s, x->A, F(RANK * IN)), *B = put(s, x->B, F(OUT * RANK));
    void *out = put(s, o->out, F(N_ROWS * OUT)), *din = put(s, o->din, F(N_ROWS * IN));
    void *dw = put(s, x->dw0, F(OUT * IN)), *db = put(s, x->db0, F(OUT));
    void *lo = put(s, x->dout, F(N_ROWS * OUT)); /* LoRA adds onto an existing output */
    void *dx = put(s, x->in, F(N_ROWS * IN)), *dA = put(s, x->dw0, F(RANK * IN));
    void *dB = put(s, x->dw0, F(OUT * RANK));
    void *tmp = put(s, o->out, F(N_ROWS * RANK)), *dtmp = put(s, o->out, F(N_ROWS * RANK));
    CHECK(gemm_linear(g, out, in, w, bias, N_ROWS, IN, OUT, GEMM_F32, GEMM_F32) == 0, "%s",
          err_msg());
    CHECK(gemm_linear_backward(g, din, dw, db, dout, in, w, N_ROWS, IN, OUT, GEMM_F32, GEMM_F32) ==
              0,
          "%s", err_msg());
    CHECK(gemm_lora(g, lo, in, A, B, tmp, N_ROWS, IN, OUT, RANK, 2.0f, GEMM_F32, GEMM_F32) == 0,
          "%s", err_msg());
    CHECK(gemm_lora_backward(g, dx, dA, dB, dout, in, A, B, tmp, dtmp, N_ROWS, IN, OUT, RANK, 2.0f,
                             GEMM_F32, GEMM_F32) == 0,
          "%s", err_msg());
    take(s, o->out, out, F(N_ROWS * OUT)), take(s, o->din, din, F(N_ROWS * IN));
    take(s, o->dw, dw, F(OUT * IN)), take(s, o->db, db, F(OUT));
    take(s, o->lora_out, lo, F(N_ROWS * OUT)), take(s, o->dx, dx, F(N_ROWS * IN));
    take(s, o->dA, dA, F(RANK * IN)), take(s, o->dB, dB, F(OUT * RANK));
    drop(s, in), drop(s, w), drop(s, bias), drop(s, dout), drop(s, A), drop(s, B), drop(s, tmp);
    drop(s, dtmp);

    /* the lm_head: chunk rows 3 .. 3+LD-1 of a (LM_V, LM_H) head, into an (N_ROWS, LD) tile */
    void *hid = put(s, x->hid, F(N_ROWS * LM_H)), *lm = put(s, x->lm, F(LM_V * LM_H));
    void *tile = put(s, o->logits, F(N_ROWS * LD)), *dz = put(s, x->dz, F(N_ROWS * LD));
    void *dh = put(s, o->dh, F(N_ROWS * LM_H)), *dlm = put(s, x->dw0, F(LM_V * LM_H));
    const int c0 = 3, cols = LD - 5; /* a tile row stride above the chunk's columns */
    float *lm_c = (float *)lm + (size_t)c0 * LM_H, *dlm_c = (float *)dlm + (size_t)c0 * LM_H;
    CHECK(gemm_lm_head_logits(g, tile, LD, hid, lm_c, N_ROWS, cols, LM_H, GEMM_F32, GEMM_F32) == 0,
          "%s", err_msg());
    CHECK(gemm_lm_head_backward(g, dh, dlm_c, dz, LD, hid, lm_c, N_ROWS, cols, LM_H, GEMM_F32,
                                GEMM_F32) == 0,
          "%s", err_msg());
    take(s, o->logits, tile, F(N_ROWS * LD)), take(s, o->dh, dh, F(N_ROWS * LM_H));
    take(s, o->dlm, dlm, F(LM_V * LM_H));
    drop(s, hid), drop(s, lm), drop(s, dz);
}

static void test_ops(const Side *ref, const Side *gpu) {
    Inputs x = {.in = rand_f(N_ROWS * IN),
                .w = rand_f(OUT * IN),
                .bias = rand_f(OUT),
                .dout = rand_f(N_ROWS * OUT),
                .A = rand_f(RANK * IN),
                .B = rand_f(OUT * RANK),
                .dw0 = rand_f(LM_V * LM_H > OUT * IN ? LM_V * LM_H : OUT * IN),
                .db0 = rand_f(OUT),
                .hid = rand_f(N_ROWS * LM_H),
                .lm = rand_f(LM_V * LM_H),
                .dz = rand_f(N_ROWS * LD)};
    Outputs want = outputs_new(), got = outputs_new(), again = outputs_new();
    run_ops(ref, &x, &want);
    run_ops(gpu, &x, &got);
    run_ops(gpu, &x, &again);
    struct {
        const char *name;
        float *w, *g, *a;
        size_t n;
    } cmp[] = {
        {"linear out", want.out, got.out, again.out, N_ROWS * OUT},
        {"linear_backward din", want.din, got.din, again.din, N_ROWS * IN},
        {"linear_backward dW", want.dw, got.dw, again.dw, OUT * IN},
        {"linear_backward dbias", want.db, got.db, again.db, OUT},
        {"lora out", want.lora_out, got.lora_out, again.lora_out, N_ROWS * OUT},
        {"lora_backward dx", want.dx, got.dx, again.dx, N_ROWS * IN},
        {"lora_backward dA", want.dA, got.dA, again.dA, RANK * IN},
        {"lora_backward dB", want.dB, got.dB, again.dB, OUT * RANK},
        {"lm_head logits", want.logits, got.logits, again.logits, N_ROWS * LD},
        {"lm_head dhidden", want.dh, got.dh, again.dh, N_ROWS * LM_H},
        {"lm_head dW", want.dlm, got.dlm, again.dlm, LM_V * LM_H},
    };
    for (size_t i = 0; i < sizeof cmp / sizeof *cmp; i++) {
        int bad = count_off(cmp[i].g, cmp[i].w, GEMM_F32, cmp[i].n, 1e-5);
        CHECK(bad == 0, "%s: %d of %zu values off the reference", cmp[i].name, bad, cmp[i].n);
        CHECK(memcmp(cmp[i].g, cmp[i].a, F(cmp[i].n)) == 0, "%s: two runs differ", cmp[i].name);
    }
    outputs_free(&want), outputs_free(&got), outputs_free(&again);
    free(x.in), free(x.w), free(x.bias), free(x.dout), free(x.A), free(x.B), free(x.dw0);
    free(x.db0), free(x.hid), free(x.lm), free(x.dz);
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_cuda_gemm: no CUDA device, skipped\n");
        return 77;
    }
    char why[256];
    GemmLt *lt = gemm_lt_cublaslt_new(NULL, 0, why, sizeof why);
    CHECK(lt != NULL, "gemm_lt_cublaslt_new: %s", why);
    if (!lt) return harness_finish("test_cuda_gemm");
    Side ref = {gemm_lt_reference_new(), false}, gpu = {lt, true};
    test_calls(&ref, &gpu);
    test_ops(&ref, &gpu);
    gemm_lt_free(ref.g);
    gemm_lt_free(gpu.g);
    return harness_finish("test_cuda_gemm");
}
