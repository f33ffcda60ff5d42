#include "kernels/cpu/kernels.h"

#include "common/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* Every row's sums run in double, one add after another in column order, as they always have
 * (so every bit is what the one-row loops gave). One such chain waits on each add's latency;
 * RMS_ROWS rows side by side are as many independent chains, which the core overlaps. */
#define RMS_ROWS 8

/* ss[k] = Σ_j x[k][j]² for the rows x[k] = x + k c, k < rows <= RMS_ROWS. */
static void rows_sum_squares(const float *x, int rows, int c, double *ss) {
    if (rows == RMS_ROWS) {
        /* a whole group: the chains in registers (a loop over a row count known only at run
         * time kept them in ss[], each add waiting on a store and a load: 3.7 cycles a value,
         * 1.6% of a bf16 DPO step) */
        double acc[RMS_ROWS] = {0};
        for (int j = 0; j < c; j++)
#pragma GCC unroll 8
            for (int k = 0; k < RMS_ROWS; k++) {
                double v = x[(size_t)k * c + j];
                acc[k] += v * v;
            }
        for (int k = 0; k < RMS_ROWS; k++)
            ss[k] = acc[k];
        return;
    }
    for (int k = 0; k < rows; k++)
        ss[k] = 0.0;
    for (int j = 0; j < c; j++)
        for (int k = 0; k < rows; k++) {
            double v = x[(size_t)k * c + j];
            ss[k] += v * v;
        }
}

static float rstd_of(double ss, int c, float eps) {
    return 1.0f / sqrtf((float)(ss / c) + eps);
}

/* Rows r0 .. r0 + rows - 1 (rows <= RMS_ROWS) of the norm with gain (offset + w): 0 for Llama's
 * w, 1 for Gemma's (1 + w) (one fp32 add, as transformers' 1.0 + weight.float()). */
static void rmsnorm_offset_group(float *out, const float *in, const float *w, float offset, int r0,
                                 int rows, int c, float eps) {
    /* transformers accumulates the mean of squares in fp32; summing in double here keeps us
     * within its rounding for any width. */
    double ss[RMS_ROWS];
    rows_sum_squares(in + (size_t)r0 * c, rows, c, ss);
    for (int k = 0; k < rows; k++) {
        const float *x = in + (size_t)(r0 + k) * c;
        float *y = out + (size_t)(r0 + k) * c;
        float rstd = rstd_of(ss[k], c, eps);
        /* simd: out may be in itself, the same element (the compiler would not vectorise a loop
         * it cannot prove free of partial overlap) */
#pragma omp simd
        for (int j = 0; j < c; j++)
            y[j] = (offset + w[j]) * (x[j] * rstd);
    }
}

static void rmsnorm_offset_forward(float *out, const float *in, const float *w, float offset, int n,
                                   int c, float eps) {
    int groups = (n + RMS_ROWS - 1) / RMS_ROWS;
#pragma omp parallel for schedule(static)
    for (int grp = 0; grp < groups; grp++) {
        int r0 = grp * RMS_ROWS, rows = n - r0 < RMS_ROWS ? n - r0 : RMS_ROWS;
        rmsnorm_offset_group(out, in, w, offset, r0, rows, c, eps);
    }
}

void rmsnorm_forward(float *out, const float *in, const float *w, int n, int c, float eps) {
    rmsnorm_offset_forward(out, in, w, 0.0f, n, c, eps);
}

void rmsnorm_1p_forward(float *out, const float *in, const float *w, int n, int c, float eps) {
    rmsnorm_offset_forward(out, in, w, 1.0f, n, c, eps);
}

/* One region, one pass over a and b: a group of RMS_ROWS rows is added (sum), and the norm then
 * reads those rows while they are still in the core's cache. Each element of sum is a + b and
 * each row of out rmsnorm_forward's, whatever the grouping, so the bits are those of the add
 * followed by the norm. */
void add_rmsnorm_forward(float *sum, float *out, const float *a, const float *b, const float *w,
                         int n, int c, float eps) {
    int groups = (n + RMS_ROWS - 1) / RMS_ROWS;
#pragma omp parallel for schedule(static)
    for (int grp = 0; grp < groups; grp++) {
        int r0 = grp * RMS_ROWS, rows = n - r0 < RMS_ROWS ? n - r0 : RMS_ROWS;
        size_t off = (size_t)r0 * c, len = (size_t)rows * c;
        /* simd: sum may be a or b, the same element */
#pragma omp simd
        for (size_t i = 0; i < len; i++)
            sum[off + i] = a[off + i] + b[off + i];
        rmsnorm_offset_group(out, sum, w, 0.0f, r0, rows, c, eps);
    }
}

/* The columns of dw one thread sums at a time: a block of them side by side, each over the rows
 * in row order (the order the one-column loop had), so the adds are independent vector lanes. */
#define RMS_DW_COLS 64

/* With y = g ⊙ x r, g = offset + w, r = (mean(x²) + eps)^-1/2:
 * dx = r (g ⊙ dy) - x r³/C Σ_k g_k dy_k x_k,   dw = dg = Σ_rows dy ⊙ x r.
 * One parallel region, three loops, each ending in a barrier: the rows' r; dw's columns (reading
 * every row's r and dy); dx's rows, which may overwrite dy (din may alias dout), so not before
 * dw has read it. accumulate: din += dx instead of din = dx (the residual's gradient taking the
 * norm's share: each element din + dx, the bits of an add after a written din; din then
 * overlaps neither dout nor in). */
static void rmsnorm_offset_backward(float *din, float *dw, const float *dout, const float *in,
                                    const float *w, float offset, bool accumulate, int n, int c,
                                    float eps) {
    float *rstd = xmalloc((size_t)n * sizeof *rstd);
    int groups = (n + RMS_ROWS - 1) / RMS_ROWS, col_blocks = (c + RMS_DW_COLS - 1) / RMS_DW_COLS;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int grp = 0; grp < groups; grp++) {
            int r0 = grp * RMS_ROWS, rows = n - r0 < RMS_ROWS ? n - r0 : RMS_ROWS;
            double ss[RMS_ROWS];
            rows_sum_squares(in + (size_t)r0 * c, rows, c, ss);
            for (int k = 0; k < rows; k++)
                rstd[r0 + k] = rstd_of(ss[k], c, eps);
        }
        if (dw) {
#pragma omp for schedule(static)
            for (int cb = 0; cb < col_blocks; cb++) {
                int j0 = cb * RMS_DW_COLS, cols = c - j0 < RMS_DW_COLS ? c - j0 : RMS_DW_COLS;
                float s[RMS_DW_COLS] = {0};
                for (int r = 0; r < n; r++) {
                    const float *dy = dout + (size_t)r * c + j0, *x = in + (size_t)r * c + j0;
                    float rs = rstd[r];
#pragma omp simd
                    for (int j = 0; j < cols; j++)
                        s[j] += dy[j] * x[j] * rs;
                }
                for (int j = 0; j < cols; j++)
                    dw[j0 + j] += s[j];
            }
        }
#pragma omp for schedule(static)
        for (int grp = 0; grp < groups; grp++) {
            int r0 = grp * RMS_ROWS, rows = n - r0 < RMS_ROWS ? n - r0 : RMS_ROWS;
            double dot[RMS_ROWS] = {0};
            for (int j = 0; j < c; j++) {
                double g = offset + w[j];
                for (int k = 0; k < rows; k++)
                    dot[k] += g * dout[(size_t)(r0 + k) * c + j] * in[(size_t)(r0 + k) * c + j];
            }
            for (int k = 0; k < rows; k++) {
                const float *x = in + (size_t)(r0 + k) * c, *dy = dout + (size_t)(r0 + k) * c;
                float *dx = din + (size_t)(r0 + k) * c;
                float rs = rstd[r0 + k], kk = (float)(dot[k] / c) * rs * rs * rs;
                if (accumulate) {
#pragma omp simd
                    for (int j = 0; j < c; j++)
                        dx[j] = dx[j] + (rs * (offset + w[j]) * dy[j] - kk * x[j]);
                } else {
#pragma omp simd /* din may be dout, element for element */
                    for (int j = 0; j < c; j++)
                        dx[j] = rs * (offset + w[j]) * dy[j] - kk * x[j];
                }
            }
        }
    }
    free(rstd);
}

void rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                      int n, int c, float eps) {
    rmsnorm_offset_backward(din, dw, dout, in, w, 0.0f, false, n, c, eps);
}

void rmsnorm_1p_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                         int n, int c, float eps) {
    rmsnorm_offset_backward(din, dw, dout, in, w, 1.0f, false, n, c, eps);
}

void rmsnorm_backward_add(float *dres, float *dw, const float *dout, const float *in,
                          const float *w, int n, int c, float eps) {
    rmsnorm_offset_backward(dres, dw, dout, in, w, 0.0f, true, n, c, eps);
}
