/* kernels/cuda/gemm_ops.h: row-major products on the column-major gemm_lt.
 *
 * Every product goes through rm_gemm, the one place where row-major meets column-major: a
 * row-major matrix X (rows x cols, row stride ld) is, read column-major with leading dimension
 * ld, X^T. So the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: the same
 * ops, the operands swapped, m and n swapped, and every leading dimension a row stride. */
#include "kernels/cuda/gemm_ops.h"

#include "common/error.h"

#include <stddef.h>

/* Row-major: C (M x N, row stride ldc) = alpha op(A) op(B) + beta C (+ bias (N) on every row),
 * op(A) M x K, op(B) K x N, A and B row-major with row strides lda, ldb. */
static int rm_gemm(GemmLt *g, GemmOp op_a, GemmOp op_b, int M, int N, int K, float alpha,
                   const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                   GemmType t, GemmType out_t, const void *bias) {
    return gemm_lt_bias(g, op_b, op_a, N, M, K, alpha, B, t, ldb, A, t, lda, beta, C, out_t, ldc,
                        bias);
}

/* err_prefix's context for a failed product, passing the code on. */
static int failed(int rc, const char *what) {
    err_prefix("%s", what);
    return rc;
}

int gemm_linear(GemmLt *g, void *out, const void *in, const void *w, const void *bias, int n,
                int in_dim, int out_dim, GemmType t, GemmType out_t) {
    if (n == 0) return 0;
    int rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_T, n, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim, 0.0f,
                     out, out_dim, t, out_t, bias);
    return rc ? failed(rc, "linear: out = in W^T") : 0;
}

int gemm_linear_backward(GemmLt *g, void *din, void *dw, void *dbias, const void *dout,
                         const void *in, const void *w, int n, int in_dim, int out_dim, GemmType t,
                         GemmType out_t) {
    if (n == 0) return 0;
    int rc;
    if (din && (rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_N, n, in_dim, out_dim, 1.0f, dout, out_dim, w,
                             in_dim, 0.0f, din, in_dim, t, out_t, NULL)))
        return failed(rc, "linear_backward: din = dout W");
    if (dw && (rc = rm_gemm(g, GEMM_OP_T, GEMM_OP_N, out_dim, in_dim, n, 1.0f, dout, out_dim, in,
                            in_dim, 1.0f, dw, in_dim, t, out_t, NULL)))
        return failed(rc, "linear_backward: dW += dout^T in");
    if (dbias) { /* (1 x out_dim) += ones (1 x n) dout: each column summed over the rows */
        const void *ones = gemm_lt_ones(g, n, t);
        if (!ones) return failed(GEMM_FAILED, "linear_backward: dbias");
        if ((rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_N, 1, out_dim, n, 1.0f, ones, n, dout, out_dim,
                          1.0f, dbias, out_dim, t, out_t, NULL)))
            return failed(rc, "linear_backward: dbias += ones dout");
    }
    return 0;
}

int gemm_lora(GemmLt *g, void *out, const void *x, const void *A, const void *B, void *tmp, int n,
              int in_dim, int out_dim, int r, float scaling, GemmType t, GemmType out_t) {
    if (n == 0) return 0;
    int rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_T, n, r, in_dim, 1.0f, x, in_dim, A, in_dim, 0.0f, tmp,
                     r, t, t, NULL);
    if (rc) return failed(rc, "lora: tmp = x A^T");
    rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_T, n, out_dim, r, scaling, tmp, r, B, r, 1.0f, out, out_dim,
                 t, out_t, NULL);
    return rc ? failed(rc, "lora: out += scaling tmp B^T") : 0;
}

int gemm_lora_backward(GemmLt *g, void *dx, void *dA, void *dB, const void *dout, const void *x,
                       const void *A, const void *B, void *tmp, void *dtmp, int n, int in_dim,
                       int out_dim, int r, float scaling, GemmType t, GemmType out_t) {
    if (n == 0) return 0;
    int rc;
    if (dB) {
        if ((rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_T, n, r, in_dim, 1.0f, x, in_dim, A, in_dim, 0.0f,
                          tmp, r, t, t, NULL)))
            return failed(rc, "lora_backward: tmp = x A^T");
        if ((rc = rm_gemm(g, GEMM_OP_T, GEMM_OP_N, out_dim, r, n, scaling, dout, out_dim, tmp, r,
                          1.0f, dB, r, t, out_t, NULL)))
            return failed(rc, "lora_backward: dB += scaling dout^T tmp");
    }
    if (!dA && !dx) return 0;
    if ((rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_N, n, r, out_dim, scaling, dout, out_dim, B, r, 0.0f,
                      dtmp, r, t, t, NULL)))
        return failed(rc, "lora_backward: dtmp = scaling dout B");
    if (dA && (rc = rm_gemm(g, GEMM_OP_T, GEMM_OP_N, r, in_dim, n, 1.0f, dtmp, r, x, in_dim, 1.0f,
                            dA, in_dim, t, out_t, NULL)))
        return failed(rc, "lora_backward: dA += dtmp^T x");
    if (dx && (rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_N, n, in_dim, r, 1.0f, dtmp, r, A, in_dim, 1.0f,
                            dx, in_dim, t, out_t, NULL)))
        return failed(rc, "lora_backward: dx += dtmp A");
    return 0;
}

int gemm_lm_head_logits(GemmLt *g, void *logits, int ld_logits, const void *hidden, const void *w,
                        int rows, int cols, int h, GemmType t, GemmType out_t) {
    if (rows == 0) return 0;
    int rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_T, rows, cols, h, 1.0f, hidden, h, w, h, 0.0f, logits,
                     ld_logits, t, out_t, NULL);
    return rc ? failed(rc, "lm_head: logits = hidden W^T") : 0;
}

int gemm_lm_head_backward(GemmLt *g, void *dhidden, void *dw, const void *dlogits, int ld_dlogits,
                          const void *hidden, const void *w, int rows, int cols, int h, GemmType t,
                          GemmType out_t) {
    if (rows == 0) return 0;
    int rc = rm_gemm(g, GEMM_OP_N, GEMM_OP_N, rows, h, cols, 1.0f, dlogits, ld_dlogits, w, h, 1.0f,
                     dhidden, h, t, out_t, NULL);
    if (rc) return failed(rc, "lm_head backward: dhidden += dlogits W");
    if (dw && (rc = rm_gemm(g, GEMM_OP_T, GEMM_OP_N, cols, h, rows, 1.0f, dlogits, ld_dlogits,
                            hidden, h, 1.0f, dw, h, t, out_t, NULL)))
        return failed(rc, "lm_head backward: dW += dlogits^T hidden");
    return 0;
}
