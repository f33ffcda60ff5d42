/* The host reference of kernels/cuda/gemm.h: cuBLASLt's semantics computed plainly, the GEMM of
 * the emulated CUDA backend. Its job is to be right, then fast enough for the tiny models the
 * emulated backend trains: op(A) and op(B) are first widened to fp32 rows of k contiguous values
 * (which also makes rule 1's indexing happen in exactly one place), then each element of D is
 * one fused multiply-add chain over l = 0 .. k-1 (rule 6). */
#include "kernels/cuda/gemm_impl.h"

#include "common/error.h"
#include "common/float16.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    GemmLt base;   /* first: a GemmLt * is a RefGemm * */
    void *ones[2]; /* by GemmType */
    int ones_n[2];
} RefGemm;

static float load(const void *x, GemmType t, size_t i) {
    return t == GEMM_F32 ? ((const float *)x)[i] : bf16_to_f32(((const uint16_t *)x)[i]);
}

static void store(void *x, GemmType t, size_t i, float v) {
    if (t == GEMM_F32)
        ((float *)x)[i] = v;
    else
        ((uint16_t *)x)[i] = f32_to_bf16(v);
}

/* rows (rows x k, row r contiguous) = op(X) (rows x k) for X stored column-major with leading
 * dimension ld: op N reads X[r + l ld], op T reads X[l + r ld] (X stored k x rows). */
static void widen_op(float *rows_out, const void *x, GemmType t, GemmOp op, int rows, int k,
                     int ld) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int l = 0; l < k; l++) {
            size_t at = op == GEMM_OP_N ? (size_t)r + (size_t)l * ld : (size_t)l + (size_t)r * ld;
            rows_out[(size_t)r * k + l] = load(x, t, at);
        }
}

static int ref_run(GemmLt *g, const GemmCall *c) {
    int m = c->m, n = c->n, k = c->k;
    float *a = malloc((size_t)m * k * sizeof *a); /* row i: op(A)'s row i */
    float *b = malloc((size_t)n * k * sizeof *b); /* row j: op(B)'s column j */
    if (!a || !b) {
        free(a), free(b);
        snprintf(g->error, sizeof g->error, "out of memory for %zu bytes of widened operands",
                 ((size_t)m + n) * k * sizeof(float));
        return GEMM_FAILED;
    }
    widen_op(a, c->A, c->ab_type, c->op_a, m, k, c->lda);
    /* op(B)'s column j is row j of op(B)^T, which is B itself under op T and B^T under op N */
    widen_op(b, c->B, c->ab_type, c->op_b == GEMM_OP_N ? GEMM_OP_T : GEMM_OP_N, n, k, c->ldb);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        const float *bj = b + (size_t)j * k;
        for (int i = 0; i < m; i++) {
            const float *ai = a + (size_t)i * k;
            float acc = 0.0f;
            for (int l = 0; l < k; l++)
                acc = fmaf(ai[l], bj[l], acc);
            size_t at = (size_t)i + (size_t)j * c->ldc;
            float v = c->alpha * acc;
            if (c->beta != 0.0f) /* rule 4: C is not read under beta 0 */
                v = fmaf(c->beta, load(c->C, c->c_type, at), v);
            if (c->bias) v += load(c->bias, c->c_type, (size_t)i);
            store(c->C, c->c_type, at, v);
        }
    }
    free(a);
    free(b);
    return 0;
}

static const void *ref_ones(GemmLt *g, int n, GemmType t) {
    RefGemm *r = (RefGemm *)g;
    if (n <= r->ones_n[t]) return r->ones[t];
    size_t width = t == GEMM_F32 ? sizeof(float) : sizeof(uint16_t);
    void *p = realloc(r->ones[t], (size_t)n * width);
    if (!p) {
        snprintf(g->error, sizeof g->error, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        store(p, t, (size_t)i, 1.0f);
    r->ones[t] = p, r->ones_n[t] = n;
    return p;
}

static void ref_destroy(GemmLt *g) {
    RefGemm *r = (RefGemm *)g;
    free(r->ones[0]);
    free(r->ones[1]);
    free(r);
}

GemmLt *gemm_lt_reference_new(void) {
    RefGemm *r = xcalloc(1, sizeof *r);
    r->base.name = "reference";
    r->base.run = ref_run;
    r->base.ones = ref_ones;
    r->base.destroy = ref_destroy;
    return &r->base;
}
