/* The backend table (kernels/backend.h) op by op, on every backend this build has (the CPU, and
 * tests/backend_emu.h's emulated device), against naive references written here in double (not
 * the kernels), on fresh random inputs, outputs poisoned (NaN) before each call: an entry wired
 * to the wrong kernel, or passing its arguments in the wrong order, gives wrong numbers. */
#include "backend_emu.h"
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/adamw8bit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    return harness_frand(&rng_state);
}

static float *rand_host(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

/* A device copy of n host floats (or bytes, for up_bytes). */
static void *up_bytes(const Backend *be, const void *host, size_t bytes) {
    void *d = be->alloc(be, bytes ? bytes : 1, "test input");
    be->copy(be, d, host, bytes, BACKEND_HOST_TO_DEVICE);
    return d;
}
static float *up(const Backend *be, const float *host, size_t n) {
    return up_bytes(be, host, n * sizeof(float));
}
/* A device output of n floats, poisoned with NaN. */
static float *poisoned(const Backend *be, size_t n) {
    float *d = be->alloc(be, (n ? n : 1) * sizeof(float), "test output");
    be->memset(be, d, 0xff, (n ? n : 1) * sizeof(float));
    return d;
}
/* A fresh host copy of n device floats. */
static float *down(const Backend *be, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    be->copy(be, h, d, n * sizeof(float), BACKEND_DEVICE_TO_HOST);
    return h;
}

/* Counts the entries of got (device) that differ from want beyond fp32 rounding. */
static int compare_dev(const Backend *be, const float *got_dev, const double *want, size_t n,
                       double rel, const char *what) {
    float *got = down(be, got_dev, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!harness_close(got[i], want[i], rel, rel)) {
            if (bad < 3)
                fprintf(stderr, "%s: %s[%zu] = %.8g, want %.8g\n", be->name, what, i, got[i],
                        want[i]);
            bad++;
        }
    }
    free(got);
    CHECK(bad == 0, "%s: %s: %d of %zu values off", be->name, what, bad, n);
    return bad;
}

/* ----------------------------------------------------------- naive references (double) */

static void ref_linear(double *out, const float *in, const float *w, const float *bias, int n,
                       int in_dim, int out_dim) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out_dim; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < in_dim; i++)
                s += (double)in[r * in_dim + i] * w[o * in_dim + i];
            out[r * out_dim + o] = s;
        }
}

static double ref_rstd(const float *x, int c, float eps) {
    double ss = 0;
    for (int j = 0; j < c; j++)
        ss += (double)x[j] * x[j];
    return 1.0 / sqrt(ss / c + eps);
}

static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

/* The naive causal attention of the segments, in double, on the host arrays. */
/* scores sc.scale q·k, soft-capped as sc.softcap * tanh(s / sc.softcap) when it is > 0 */
static void ref_attention(double *out, const float *q, const float *k, const float *v,
                          const AttnSegment *segs, int n_segs, const int32_t *seq_index, int nh,
                          int nkv, int hd, int window, AttnScores sc) {
    int rep = nh / nkv;
    double *p = malloc(4096 * sizeof *p);
    for (int s = 0; s < n_segs; s++) {
        const AttnSegment *g = &segs[s];
        for (int i = 0; i < g->len; i++) {
            int row = g->start + i, n_keys = g->prefix_len + i + 1;
            for (int h = 0; h < nh; h++) {
                int kh = h / rep;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n_keys; j++) {
                    int key =
                        j < g->prefix_len ? g->prefix_start + j : g->start + j - g->prefix_len;
                    p[j] = -INFINITY;
                    if (window > 0 && seq_index[key] <= seq_index[row] - window) continue;
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += (double)q[((size_t)row * nh + h) * hd + e] *
                             k[((size_t)key * nkv + kh) * hd + e];
                    p[j] = d * sc.scale;
                    if (sc.softcap > 0) p[j] = sc.softcap * tanh(p[j] / sc.softcap);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j < n_keys; j++)
                    sum += p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int j = 0; j < n_keys; j++) {
                        int key =
                            j < g->prefix_len ? g->prefix_start + j : g->start + j - g->prefix_len;
                        o += p[j] / sum * v[((size_t)key * nkv + kh) * hd + e];
                    }
                    out[((size_t)row * nh + h) * hd + e] = o;
                }
            }
        }
    }
    free(p);
}

/* ----------------------------------------------------------------------- op-by-op checks */

static void check_dense(const Backend *be) {
    int n = 7, in_dim = 24, out_dim = 20, r = 4;
    float *in = rand_host((size_t)n * in_dim), *w = rand_host((size_t)out_dim * in_dim);
    float *bias = rand_host(out_dim), *dout = rand_host((size_t)n * out_dim);
    double *want = malloc((size_t)n * out_dim * 2 * sizeof *want);
    float *d_in = up(be, in, (size_t)n * in_dim), *d_w = up(be, w, (size_t)out_dim * in_dim);
    float *d_bias = up(be, bias, out_dim), *d_dout = up(be, dout, (size_t)n * out_dim);

    float *out = poisoned(be, (size_t)n * out_dim);
    be->linear(be, out, d_in, (WeightRef){.f32 = d_w}, NULL, d_bias, n, in_dim, out_dim);
    ref_linear(want, in, w, bias, n, in_dim, out_dim);
    compare_dev(be, out, want, (size_t)n * out_dim, 1e-5, "linear");

    /* bf16 weights: the reference multiplies the same rounded values */
    uint16_t *w16 = malloc((size_t)out_dim * in_dim * sizeof *w16);
    float *w16f = malloc((size_t)out_dim * in_dim * sizeof *w16f);
    for (int i = 0; i < out_dim * in_dim; i++)
        w16[i] = f32_to_bf16(w[i]), w16f[i] = bf16_to_f32(w16[i]);
    uint16_t *d_w16 = up_bytes(be, w16, (size_t)out_dim * in_dim * sizeof *w16);
    be->linear(be, out, d_in, (WeightRef){.bf16 = d_w16}, NULL, NULL, n, in_dim, out_dim);
    ref_linear(want, in, w16f, NULL, n, in_dim, out_dim);
    compare_dev(be, out, want, (size_t)n * out_dim, 1e-5, "linear bf16");

    /* backward: din written, dw and dbias accumulated onto what they held */
    float *dw0 = rand_host((size_t)out_dim * in_dim), *db0 = rand_host(out_dim);
    float *din = poisoned(be, (size_t)n * in_dim), *dw = up(be, dw0, (size_t)out_dim * in_dim);
    float *db = up(be, db0, out_dim);
    be->linear_backward(be, din, dw, db, d_dout, d_in, (WeightRef){.f32 = d_w}, n, in_dim, out_dim);
    double *w_din = calloc((size_t)n * in_dim, sizeof *w_din);
    double *w_dw = calloc((size_t)out_dim * in_dim, sizeof *w_dw), *w_db = calloc(out_dim, 8);
    for (int o = 0; o < out_dim; o++) {
        w_db[o] = db0[o];
        for (int i = 0; i < in_dim; i++)
            w_dw[o * in_dim + i] = dw0[o * in_dim + i];
    }
    for (int q = 0; q < n; q++)
        for (int o = 0; o < out_dim; o++) {
            double g = dout[q * out_dim + o];
            w_db[o] += g;
            for (int i = 0; i < in_dim; i++) {
                w_din[q * in_dim + i] += g * w[o * in_dim + i];
                w_dw[o * in_dim + i] += g * in[q * in_dim + i];
            }
        }
    compare_dev(be, din, w_din, (size_t)n * in_dim, 1e-5, "linear_backward din");
    compare_dev(be, dw, w_dw, (size_t)out_dim * in_dim, 1e-5, "linear_backward dw");
    compare_dev(be, db, w_db, out_dim, 1e-5, "linear_backward dbias");

    /* LoRA without dropout: out += s (in A^T) B^T; its backward accumulates din, dA, dB */
    float s = 0.75f, *A = rand_host((size_t)r * in_dim), *B = rand_host((size_t)out_dim * r);
    float *base = rand_host((size_t)n * out_dim), *din0 = rand_host((size_t)n * in_dim);
    float *d_A = up(be, A, (size_t)r * in_dim), *d_B = up(be, B, (size_t)out_dim * r);
    float *lo = up(be, base, (size_t)n * out_dim);
    be->lora(be, lo, d_in, d_A, d_B, n, in_dim, out_dim, r, s, 0.0f, 7);
    double *u = calloc((size_t)n * r, sizeof *u);
    for (int q = 0; q < n; q++)
        for (int k = 0; k < r; k++)
            for (int i = 0; i < in_dim; i++)
                u[q * r + k] += (double)in[q * in_dim + i] * A[k * in_dim + i];
    for (int q = 0; q < n; q++)
        for (int o = 0; o < out_dim; o++) {
            double t = 0;
            for (int k = 0; k < r; k++)
                t += u[q * r + k] * B[o * r + k];
            want[q * out_dim + o] = base[q * out_dim + o] + s * t;
        }
    compare_dev(be, lo, want, (size_t)n * out_dim, 1e-5, "lora");
    float *l_din = up(be, din0, (size_t)n * in_dim), *dA = poisoned(be, (size_t)r * in_dim);
    float *dB = poisoned(be, (size_t)out_dim * r);
    be->memset(be, dA, 0, (size_t)r * in_dim * sizeof(float));
    be->memset(be, dB, 0, (size_t)out_dim * r * sizeof(float));
    be->lora_backward(be, l_din, dA, dB, d_dout, d_in, d_A, d_B, n, in_dim, out_dim, r, s, 0.0f, 7);
    double *du = calloc((size_t)n * r, sizeof *du), *w_dA = calloc((size_t)r * in_dim, 8);
    double *w_dB = calloc((size_t)out_dim * r, 8), *w_ldin = calloc((size_t)n * in_dim, 8);
    for (int q = 0; q < n; q++)
        for (int o = 0; o < out_dim; o++)
            for (int k = 0; k < r; k++) {
                w_dB[o * r + k] += s * dout[q * out_dim + o] * u[q * r + k];
                du[q * r + k] += s * dout[q * out_dim + o] * B[o * r + k];
            }
    for (int q = 0; q < n; q++)
        for (int i = 0; i < in_dim; i++) {
            w_ldin[q * in_dim + i] = din0[q * in_dim + i];
            for (int k = 0; k < r; k++) {
                w_dA[k * in_dim + i] += du[q * r + k] * in[q * in_dim + i];
                w_ldin[q * in_dim + i] += du[q * r + k] * A[k * in_dim + i];
            }
        }
    compare_dev(be, l_din, w_ldin, (size_t)n * in_dim, 1e-5, "lora_backward din");
    compare_dev(be, dA, w_dA, (size_t)r * in_dim, 1e-5, "lora_backward dA");
    compare_dev(be, dB, w_dB, (size_t)out_dim * r, 1e-5, "lora_backward dB");

    void *dev_bufs[] = {d_in, d_w, d_bias, d_dout, out,   d_w16, din, dw,
                        db,   d_A, d_B,    lo,     l_din, dA,    dB};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {in,   w, bias, dout, want, w16, w16f, dw0,  db0,  w_din, w_dw,
                    w_db, A, B,    base, din0, u,   du,   w_dA, w_dB, w_ldin};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The Gemma 2 group's elementwise and per-row ops: rmsnorm_1p (gain 1 + w) and its backward,
 * geglu_tanh (torch's gelu(approximate="tanh") times up) and its backward, softcap. */
static void check_gemma_rowwise(const Backend *be) {
    int n = 5, c = 32;
    size_t nc = (size_t)n * c;
    float eps = 1e-6f;
    float *x = rand_host(nc), *w = rand_host(c), *dout = rand_host(nc), *dw0 = rand_host(c);
    float *up_h = rand_host(nc);
    double *want = malloc(nc * sizeof *want), *want2 = malloc(nc * sizeof *want2);
    double *w_dw = malloc(c * sizeof *w_dw);
    float *d_x = up(be, x, nc), *d_w = up(be, w, c), *d_dout = up(be, dout, nc);
    float *d_up = up(be, up_h, nc);

    float *out = poisoned(be, nc);
    be->rmsnorm_1p(be, out, d_x, d_w, n, c, eps);
    for (int r = 0; r < n; r++) {
        double rstd = ref_rstd(x + r * c, c, eps);
        for (int j = 0; j < c; j++)
            want[r * c + j] = (1.0 + w[j]) * x[r * c + j] * rstd;
    }
    compare_dev(be, out, want, nc, 1e-5, "rmsnorm_1p");
    float *din = poisoned(be, nc), *dw = up(be, dw0, c);
    be->rmsnorm_1p_backward(be, din, dw, d_dout, d_x, d_w, n, c, eps);
    for (int j = 0; j < c; j++)
        w_dw[j] = dw0[j];
    for (int r = 0; r < n; r++) {
        const float *xr = x + r * c, *dr = dout + r * c;
        double rstd = ref_rstd(xr, c, eps), gx = 0;
        for (int j = 0; j < c; j++)
            gx += (double)dr[j] * (1.0 + w[j]) * xr[j];
        for (int j = 0; j < c; j++) {
            want[r * c + j] = rstd * (dr[j] * (1.0 + w[j]) - xr[j] * rstd * rstd * gx / c);
            w_dw[j] += (double)dr[j] * xr[j] * rstd;
        }
    }
    compare_dev(be, din, want, nc, 1e-5, "rmsnorm_1p_backward din");
    compare_dev(be, dw, w_dw, c, 1e-5, "rmsnorm_1p_backward dw");

    /* gate values over [-4, 4): both tails of the tanh */
    float *gate = rand_host(nc);
    for (size_t i = 0; i < nc; i++)
        gate[i] *= 4.0f;
    float *d_gate = up(be, gate, nc), *act = poisoned(be, nc);
    be->geglu_tanh(be, act, d_gate, d_up, nc);
    const double beta = sqrt(2.0 / acos(-1.0)), kappa = 0.044715;
    for (size_t i = 0; i < nc; i++) {
        double g = gate[i], t = tanh(beta * (g + kappa * g * g * g));
        double gelu = 0.5 * g * (1 + t);
        double dgelu = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * beta * (1 + 3 * kappa * g * g);
        want[i] = gelu * up_h[i];
        want2[i] = dout[i] * up_h[i] * dgelu; /* dgate */
    }
    compare_dev(be, act, want, nc, 1e-5, "geglu_tanh");
    float *dgate = poisoned(be, nc), *dup = poisoned(be, nc);
    be->geglu_tanh_backward(be, dgate, dup, d_dout, d_gate, d_up, nc);
    compare_dev(be, dgate, want2, nc, 1e-5, "geglu_tanh_backward dgate");
    for (size_t i = 0; i < nc; i++) {
        double g = gate[i], t = tanh(beta * (g + kappa * g * g * g));
        want[i] = dout[i] * 0.5 * g * (1 + t);
    }
    compare_dev(be, dup, want, nc, 1e-5, "geglu_tanh_backward dup");

    float *capped = up(be, gate, nc);
    be->softcap(be, capped, nc, 1.5f);
    for (size_t i = 0; i < nc; i++)
        want[i] = 1.5 * tanh(gate[i] / 1.5);
    compare_dev(be, capped, want, nc, 1e-5, "softcap");

    void *dev_bufs[] = {d_x, d_w, d_dout, d_up, out, din, dw, d_gate, act, dgate, dup, capped};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {x, w, dout, dw0, up_h, want, want2, w_dw, gate};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void check_rowwise(const Backend *be) {
    int n = 5, c = 32, heads = 2, hd = 16, max_pos = 9;
    size_t nc = (size_t)n * c;
    float eps = 1e-5f;
    float *x = rand_host(nc), *w = rand_host(c), *dout = rand_host(nc), *dw0 = rand_host(c);
    double *want = malloc(nc * sizeof *want), *want2 = malloc(nc * sizeof *want2);
    float *d_x = up(be, x, nc), *d_w = up(be, w, c), *d_dout = up(be, dout, nc);

    float *out = poisoned(be, nc);
    be->rmsnorm(be, out, d_x, d_w, n, c, eps);
    for (int r = 0; r < n; r++) {
        double rstd = ref_rstd(x + r * c, c, eps);
        for (int j = 0; j < c; j++)
            want[r * c + j] = w[j] * x[r * c + j] * rstd;
    }
    compare_dev(be, out, want, nc, 1e-5, "rmsnorm");

    float *din = poisoned(be, nc), *dw = up(be, dw0, c);
    be->rmsnorm_backward(be, din, dw, d_dout, d_x, d_w, n, c, eps);
    double *w_dw = malloc(c * sizeof *w_dw);
    for (int j = 0; j < c; j++)
        w_dw[j] = dw0[j];
    for (int r = 0; r < n; r++) {
        const float *xr = x + r * c, *dr = dout + r * c;
        double rstd = ref_rstd(xr, c, eps), gx = 0;
        for (int j = 0; j < c; j++)
            gx += (double)dr[j] * w[j] * xr[j];
        for (int j = 0; j < c; j++) {
            want[r * c + j] = rstd * (dr[j] * w[j] - xr[j] * rstd * rstd * gx / c);
            w_dw[j] += (double)dr[j] * xr[j] * rstd;
        }
    }
    compare_dev(be, din, want, nc, 1e-5, "rmsnorm_backward din");
    compare_dev(be, dw, w_dw, c, 1e-5, "rmsnorm_backward dw");

    /* RoPE (rotate_half) at positions over the first `rot` dims of each head (partial rotary:
     * rot = 3/4 of hd, the rest unchanged), then its backward as the transposed rotation:
     * <rope_backward(y), x> = <y, rope(x)> */
    int32_t pos[5] = {3, 0, 8, 8, 1};
    int rot = 3 * hd / 4, half = rot / 2;
    float *cos_t = rand_host((size_t)max_pos * half), *sin_t = rand_host((size_t)max_pos * half);
    float *d_cos = up(be, cos_t, (size_t)max_pos * half);
    float *d_sin = up(be, sin_t, (size_t)max_pos * half);
    int32_t *d_pos = up_bytes(be, pos, sizeof pos);
    float *rx = up(be, x, nc);
    be->rope(be, rx, d_pos, d_cos, d_sin, n, heads, hd, rot);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            const float *v = x + (r * heads + h) * hd;
            for (int i = rot; i < hd; i++)
                want[(r * heads + h) * hd + i] = v[i];
            for (int i = 0; i < half; i++) {
                double co = cos_t[pos[r] * half + i], si = sin_t[pos[r] * half + i];
                want[(r * heads + h) * hd + i] = v[i] * co - v[i + half] * si;
                want[(r * heads + h) * hd + i + half] = v[i + half] * co + v[i] * si;
            }
        }
    compare_dev(be, rx, want, nc, 1e-5, "rope");
    float *ry = up(be, dout, nc);
    be->rope_backward(be, ry, d_pos, d_cos, d_sin, n, heads, hd, rot);
    float *back = down(be, ry, nc);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < nc; i++)
        lhs += (double)back[i] * x[i], rhs += (double)dout[i] * want[i];
    CHECK(harness_close(lhs, rhs, 1e-5, 1e-5),
          "%s: rope_backward is not rope's transpose: %g vs %g", be->name, lhs, rhs);
    free(back);

    /* SwiGLU and its backward; add; scale */
    float *up_h = rand_host(nc), *d_up = up(be, up_h, nc);
    float *act = poisoned(be, nc);
    be->swiglu(be, act, d_x, d_up, nc);
    for (size_t i = 0; i < nc; i++)
        want[i] = x[i] * sigmoid(x[i]) * up_h[i];
    compare_dev(be, act, want, nc, 1e-5, "swiglu");
    float *dg = poisoned(be, nc), *du = poisoned(be, nc);
    be->swiglu_backward(be, dg, du, d_dout, d_x, d_up, nc);
    for (size_t i = 0; i < nc; i++) {
        double s = sigmoid(x[i]);
        want[i] = dout[i] * up_h[i] * s * (1 + x[i] * (1 - s));
        want2[i] = dout[i] * x[i] * s;
    }
    compare_dev(be, dg, want, nc, 1e-5, "swiglu_backward dgate");
    compare_dev(be, du, want2, nc, 1e-5, "swiglu_backward dup");
    float *sum = poisoned(be, nc);
    be->add(be, sum, d_x, d_up, nc);
    for (size_t i = 0; i < nc; i++)
        want[i] = (double)x[i] + up_h[i];
    compare_dev(be, sum, want, nc, 1e-6, "add");
    be->scale(be, sum, -0.5f, nc);
    for (size_t i = 0; i < nc; i++)
        want[i] = ((double)x[i] + up_h[i]) * -0.5;
    compare_dev(be, sum, want, nc, 1e-6, "scale");

    void *dev_bufs[] = {d_x,   d_w, d_dout, out,  din, dw, d_cos, d_sin,
                        d_pos, rx,  ry,     d_up, act, dg, du,    sum};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {x, w, dout, dw0, want, want2, w_dw, cos_t, sin_t, up_h};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* Σ dout · attention(q, k, v) in double: what attention_backward differentiates. */
static double attention_loss(const float *q, const float *k, const float *v, const float *dout,
                             const AttnSegment *segs, int n_segs, const int32_t *seq_index, int n,
                             int nh, int nkv, int hd, int window, AttnScores sc) {
    double *o = calloc((size_t)n * nh * hd, sizeof *o), l = 0;
    ref_attention(o, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window, sc);
    for (size_t i = 0; i < (size_t)n * nh * hd; i++)
        l += o[i] * dout[i];
    free(o);
    return l;
}

/* scored: the Gemma 2 entries (attention_scored, its backward, attention_cached_scored) with a
 * scale of their own and a soft cap that bends these scores; else the plain ones (1/sqrt(hd)). */
static void check_attention(const Backend *be, bool scored) {
    /* two sequences: rows 0-5, and rows 6-9 continuing rows 0-2 (a shared prefix) */
    int n = 10, nh = 4, nkv = 2, hd = 16, window = 4;
    AttnScores sc = scored ? (AttnScores){0.9f, 1.5f} : (AttnScores){0.25f, 0.0f};
    const char *tag = scored ? " (scored)" : "";
    char what[96];
    AttnSegment segs[2] = {{0, 6, 0, 0}, {6, 4, 0, 3}};
    int32_t seq_index[10] = {0, 1, 2, 3, 4, 5, 3, 4, 5, 6};
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = rand_host(nq), *k = rand_host(nk), *v = rand_host(nk), *dout = rand_host(nq);
    float *d_q = up(be, q, nq), *d_k = up(be, k, nk), *d_v = up(be, v, nk);
    float *d_dout = up(be, dout, nq);
    AttnSegment *d_segs = up_bytes(be, segs, sizeof segs);
    int32_t *d_si = up_bytes(be, seq_index, sizeof seq_index);
    double *want = malloc(nq * sizeof *want);
    for (int win = 0; win <= window; win += window) {
        float *out = poisoned(be, nq);
        if (scored)
            be->attention_scored(be, out, d_q, d_k, d_v, d_segs, 2, d_si, nh, nkv, hd, win, sc);
        else
            be->attention(be, out, d_q, d_k, d_v, d_segs, 2, d_si, nh, nkv, hd, win);
        ref_attention(want, q, k, v, segs, 2, seq_index, nh, nkv, hd, win, sc);
        snprintf(what, sizeof what, "attention%s%s", win ? " (window)" : "", tag);
        compare_dev(be, out, want, nq, 1e-5, what);
        be->free(be, out);

        /* the backward against central differences of the double reference */
        float *dq = poisoned(be, nq), *dk = poisoned(be, nk), *dv = poisoned(be, nk);
        if (scored)
            be->attention_scored_backward(be, dq, dk, dv, d_dout, d_q, d_k, d_v, d_segs, 2, d_si, n,
                                          nh, nkv, hd, win, sc);
        else
            be->attention_backward(be, dq, dk, dv, d_dout, d_q, d_k, d_v, d_segs, 2, d_si, n, nh,
                                   nkv, hd, win);
        float *g[3] = {down(be, dq, nq), down(be, dk, nk), down(be, dv, nk)};
        float *x[3] = {q, k, v};
        const char *name[3] = {"dq", "dk", "dv"};
        for (int t = 0; t < 3; t++) {
            size_t len = t ? nk : nq;
            for (size_t i = 0; i < len; i += len / 23 + 1) {
                float keep = x[t][i];
                double h = 1e-3;
                x[t][i] = (float)(keep + h);
                double lp =
                    attention_loss(q, k, v, dout, segs, 2, seq_index, n, nh, nkv, hd, win, sc);
                x[t][i] = (float)(keep - h);
                double lm =
                    attention_loss(q, k, v, dout, segs, 2, seq_index, n, nh, nkv, hd, win, sc);
                x[t][i] = keep;
                double fd = (lp - lm) / ((double)(float)(keep + h) - (double)(float)(keep - h));
                CHECK(harness_close(g[t][i], fd, 1e-3, 1e-4),
                      "%s: attention_backward%s %s[%zu] = %g, differences give %g (window %d)",
                      be->name, tag, name[t], i, g[t][i], fd, win);
            }
            free(g[t]);
        }
        be->free(be, dq), be->free(be, dk), be->free(be, dv);
    }

    /* decoding: rows of two slots over a cache equal the full attention of those rows */
    int max_len = 8, slots = 2, kvd = nkv * hd;
    float *kc = calloc((size_t)slots * max_len * kvd, sizeof *kc);
    float *vc = calloc((size_t)slots * max_len * kvd, sizeof *vc);
    /* slot 1 holds sequence 0's rows 0..5, slot 0 the first 4 rows of sequence 1 (as keys:
     * prefix rows 0-2 then row 6) */
    int seq1[4] = {0, 1, 2, 6};
    for (int p = 0; p < 6; p++) {
        memcpy(kc + ((size_t)1 * max_len + p) * kvd, k + (size_t)p * kvd, kvd * sizeof(float));
        memcpy(vc + ((size_t)1 * max_len + p) * kvd, v + (size_t)p * kvd, kvd * sizeof(float));
    }
    for (int p = 0; p < 4; p++) {
        memcpy(kc + (size_t)p * kvd, k + (size_t)seq1[p] * kvd, kvd * sizeof(float));
        memcpy(vc + (size_t)p * kvd, v + (size_t)seq1[p] * kvd, kvd * sizeof(float));
    }
    int32_t slot[2] = {1, 0}, pos[2] = {5, 3}; /* rows 5 and 6 of the batch */
    float *d_kc = up(be, kc, (size_t)slots * max_len * kvd);
    float *d_vc = up(be, vc, (size_t)slots * max_len * kvd);
    int32_t *d_slot = up_bytes(be, slot, sizeof slot), *d_pos = up_bytes(be, pos, sizeof pos);
    float *d_q2 = up(be, q + (size_t)5 * nh * hd, (size_t)2 * nh * hd);
    for (int win = 0; win <= window; win += window) {
        float *out = poisoned(be, (size_t)2 * nh * hd);
        if (scored)
            be->attention_cached_scored(be, out, d_q2, d_kc, d_vc, d_slot, d_pos, 2, max_len, nh,
                                        nkv, hd, win, sc);
        else
            be->attention_cached(be, out, d_q2, d_kc, d_vc, d_slot, d_pos, 2, max_len, nh, nkv, hd,
                                 win);
        ref_attention(want, q, k, v, segs, 2, seq_index, nh, nkv, hd, win, sc);
        snprintf(what, sizeof what, "attention_cached%s%s", win ? " (window)" : "", tag);
        compare_dev(be, out, want + (size_t)5 * nh * hd, (size_t)2 * nh * hd, 1e-5, what);
        be->free(be, out);
    }
    void *dev_bufs[] = {d_q, d_k, d_v, d_dout, d_segs, d_si, d_kc, d_vc, d_slot, d_pos, d_q2};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {q, k, v, dout, want, kc, vc};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* cap.softcap > 0: logprob_capped and its backward (Gemma 2's final soft cap, then 1/T), against
 * the reference's logits finished the same way; else the plain entries. */
static void check_lm_head(const Backend *be, LogitCap cap) {
    bool capped = cap.softcap > 0;
    int n = 6, h = 16, V = 300;
    float *hid = rand_host((size_t)n * h), *W = rand_host((size_t)V * h), *dl = rand_host(n);
    float *dW0 = rand_host((size_t)V * h);
    int32_t tgt[6] = {0, 299, 17, 17, 150, 3};
    float *d_hid = up(be, hid, (size_t)n * h), *d_W = up(be, W, (size_t)V * h);
    float *d_dl = up(be, dl, n);
    int32_t *d_tgt = up_bytes(be, tgt, sizeof tgt);
    float *logp = poisoned(be, n);
    LogitStats *st = be->alloc(be, n * sizeof *st, "stats");
    if (capped)
        be->logprob_capped(be, logp, st, d_hid, d_tgt, (WeightRef){.f32 = d_W}, n, h, V, cap);
    else
        be->logprob(be, logp, st, d_hid, d_tgt, (WeightRef){.f32 = d_W}, n, h, V);
    double want[6], mean[6], ent[6], *p = malloc(V * sizeof *p), *dzdraw = malloc(V * sizeof *p);
    double *w_dh = calloc((size_t)n * h, 8), *w_dW = malloc((size_t)V * h * 8);
    int amax[6];
    for (int i = 0; i < V * h; i++)
        w_dW[i] = dW0[i];
    for (int r = 0; r < n; r++) {
        double mx = -INFINITY, sum = 0;
        mean[r] = 0, amax[r] = 0;
        for (int t = 0; t < V; t++) {
            double z = 0;
            for (int j = 0; j < h; j++)
                z += (double)hid[r * h + j] * W[t * h + j];
            dzdraw[t] = 1.0;
            if (capped) { /* z -> post * c tanh(z / c): d/dz = post (1 - tanh²) */
                double th = tanh(z / cap.softcap);
                z = cap.post_scale * cap.softcap * th;
                dzdraw[t] = cap.post_scale * (1.0 - th * th);
            }
            p[t] = z, mean[r] += z / V;
            if (z > mx) mx = z, amax[r] = t;
        }
        for (int t = 0; t < V; t++)
            sum += exp(p[t] - mx);
        double lse = mx + log(sum);
        want[r] = p[tgt[r]] - lse;
        ent[r] = 0;
        for (int t = 0; t < V; t++) {
            double pr = exp(p[t] - lse);
            ent[r] -= pr * (p[t] - lse);
            double g = dl[r] * ((t == tgt[r]) - pr) * dzdraw[t]; /* d logp / d raw logit_t */
            for (int j = 0; j < h; j++) {
                w_dh[r * h + j] += g * W[t * h + j];
                w_dW[t * h + j] += g * hid[r * h + j];
            }
        }
    }
    const char *tag = capped ? " (capped)" : "";
    char what[64];
    snprintf(what, sizeof what, "logprob%s", tag);
    compare_dev(be, logp, want, n, 1e-5, what);
    LogitStats hs[6];
    be->copy(be, hs, st, sizeof hs, BACKEND_DEVICE_TO_HOST);
    for (int r = 0; r < n; r++)
        CHECK(hs[r].argmax == amax[r] && harness_close(hs[r].mean_logit, mean[r], 1e-5, 1e-5) &&
                  harness_close(hs[r].entropy, ent[r], 1e-5, 1e-5),
              "%s: logprob%s stats row %d: argmax %d mean %g entropy %g, want %d %g %g", be->name,
              tag, r, hs[r].argmax, hs[r].mean_logit, hs[r].entropy, amax[r], mean[r], ent[r]);
    float *dh = poisoned(be, (size_t)n * h), *dW = up(be, dW0, (size_t)V * h);
    if (capped)
        be->logprob_capped_backward(be, dh, dW, d_dl, d_hid, d_tgt, (WeightRef){.f32 = d_W}, n, h,
                                    V, cap);
    else
        be->logprob_backward(be, dh, dW, d_dl, d_hid, d_tgt, (WeightRef){.f32 = d_W}, n, h, V);
    snprintf(what, sizeof what, "logprob_backward%s dhidden", tag);
    compare_dev(be, dh, w_dh, (size_t)n * h, 1e-5, what);
    snprintf(what, sizeof what, "logprob_backward%s dlm_head", tag);
    compare_dev(be, dW, w_dW, (size_t)V * h, 1e-5, what);
    void *dev_bufs[] = {d_hid, d_W, d_dl, d_tgt, logp, st, dh, dW};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {hid, W, dl, dW0, p, dzdraw, w_dh, w_dW};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void check_gather_scatter(const Backend *be) {
    int V = 9, h = 8, n = 6;
    int32_t ids[6] = {4, 0, 8, 4, 2, 4};
    float *table = rand_host((size_t)V * h), *dx = rand_host((size_t)n * h);
    float *d_table = up(be, table, (size_t)V * h), *d_dx = up(be, dx, (size_t)n * h);
    int32_t *d_ids = up_bytes(be, ids, sizeof ids);
    double *want = malloc((size_t)V * h * sizeof *want);
    float *out = poisoned(be, (size_t)n * h);
    be->embedding_gather(be, out, (WeightRef){.f32 = d_table}, d_ids, n, h);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < h; j++)
            want[r * h + j] = table[ids[r] * h + j];
    compare_dev(be, out, want, (size_t)n * h, 0, "embedding_gather");
    be->rows_gather(be, out, d_table, d_ids, n, h);
    compare_dev(be, out, want, (size_t)n * h, 0, "rows_gather");

    /* scatter-adds: repeated rows sum; the embedding's leaves id 4 (padding) out */
    float *acc = up(be, table, (size_t)V * h);
    be->embedding_scatter_add(be, acc, d_dx, d_ids, n, h, 4);
    for (int i = 0; i < V * h; i++)
        want[i] = table[i];
    for (int r = 0; r < n; r++)
        for (int j = 0; ids[r] != 4 && j < h; j++)
            want[ids[r] * h + j] += dx[r * h + j];
    compare_dev(be, acc, want, (size_t)V * h, 1e-6, "embedding_scatter_add");
    be->copy(be, acc, table, (size_t)V * h * sizeof(float), BACKEND_HOST_TO_DEVICE);
    be->rows_scatter_add(be, acc, d_dx, d_ids, n, h);
    for (int r = 0; r < n; r++)
        for (int j = 0; ids[r] == 4 && j < h; j++)
            want[ids[r] * h + j] += dx[r * h + j];
    compare_dev(be, acc, want, (size_t)V * h, 1e-6, "rows_scatter_add");

    /* memory: memset then a copy back */
    be->memset(be, acc, 0, (size_t)V * h * sizeof(float));
    for (int i = 0; i < V * h; i++)
        want[i] = 0;
    compare_dev(be, acc, want, (size_t)V * h, 0, "memset");
    /* a span large enough for the CPU's threads to share (backend_cpu.c), cut at odd bytes: every
     * byte of it set, none around it */
    size_t big = ((size_t)40 << 20) + 4099, from = 7, span = big - from - 5;
    uint8_t *bytes = be->alloc(be, big, "test memset"), *seen = malloc(big);
    be->memset(be, bytes, 0xff, big);
    be->memset(be, bytes + from, 0x5a, span);
    be->copy(be, seen, bytes, big, BACKEND_DEVICE_TO_HOST);
    size_t wrong = 0;
    for (size_t i = 0; i < big; i++)
        wrong += seen[i] != (i >= from && i < from + span ? 0x5a : 0xff);
    CHECK(wrong == 0, "%s: a %zu-byte memset left %zu bytes wrong", be->name, span, wrong);
    be->free(be, bytes);
    free(seen);
    be->sync(be);
    be->free(be, d_table), be->free(be, d_dx), be->free(be, d_ids), be->free(be, out);
    be->free(be, acc);
    free(table), free(dx), free(want);
}

static void check_optimizer(const Backend *be) {
    size_t n = 1000;
    float *p = rand_host(n), *m = rand_host(n), *v = rand_host(n), *g = rand_host(n);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    AdamWStepCoefs c = {.beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .one_minus_beta1 = 0.1f,
                        .one_minus_beta2 = 0.001f,
                        .eps = 1e-8f,
                        .shrink = 0.99f,
                        .neg_step = -0.01f,
                        .bc2_sqrt = 0.5f,
                        .grad_scale = 0.75f}; /* a clip folded into the gradient's read */
    float step = 0.02f, inv_bc2 = 3.0f;
    float *d_p = up(be, p, n), *d_m = up(be, m, n), *d_v = up(be, v, n), *d_g = up(be, g, n);
    be->adamw(be, d_p, d_m, d_v, d_g, n, &c, step, inv_bc2);
    double *wp = malloc(n * 8), *wm = malloc(n * 8), *wv = malloc(n * 8), ss = 0;
    for (size_t i = 0; i < n; i++) {
        double gs = g[i] * c.grad_scale; /* the clipped gradient, stored in fp32 */
        wm[i] = m[i] + (1 - (double)c.beta1) * (gs - m[i]);
        wv[i] = c.beta2 * (double)v[i] + (1 - (double)c.beta2) * gs * gs;
        wp[i] = p[i] * (double)c.shrink - step * wm[i] / (sqrt(wv[i]) * inv_bc2 + c.eps);
        ss += (double)g[i] * g[i];
    }
    compare_dev(be, d_m, wm, n, 1e-5, "adamw m");
    compare_dev(be, d_v, wv, n, 1e-5, "adamw v");
    compare_dev(be, d_p, wp, n, 1e-5, "adamw p");
    double got = be->sum_squares(be, d_g, n);
    CHECK(harness_close(got, ss, 1e-12, 0), "%s: sum_squares %.17g, want %.17g", be->name, got, ss);

    /* 8-bit AdamW: the table's entry is bitsandbytes' update (tested against bitsandbytes in
     * test_optimizer), bit for bit */
    size_t big = 2 * Q8_BLOCK + 17;
    float *p8 = rand_host(big), *g8 = rand_host(big), *p8_ref = malloc(big * sizeof *p8_ref);
    memcpy(p8_ref, p8, big * sizeof *p8);
    Q8Map maps[2];
    q8_map_dynamic(&maps[0], true), q8_map_dynamic(&maps[1], false);
    Q8Moments q_ref, q_dev;
    CHECK(q8_moments_init(&q_ref, big) == 0 && q8_moments_init(&q_dev, big) == 0, "q8 init");
    emu_own(q_dev.code_m, big), emu_own(q_dev.code_v, big);
    emu_own(q_dev.absmax_m, q8_blocks(big) * 4), emu_own(q_dev.absmax_v, q8_blocks(big) * 4);
    float *d_p8 = up(be, p8, big), *d_g8 = up(be, g8, big);
    for (int s = 0; s < 2; s++) {
        adamw8bit_update(&q_ref, &maps[0], &maps[1], p8_ref, g8, &c);
        be->adamw8bit(be, &q_dev, &maps[0], &maps[1], d_p8, d_g8, &c);
    }
    float *got8 = down(be, d_p8, big);
    CHECK(memcmp(got8, p8_ref, big * sizeof *got8) == 0 &&
              memcmp(q_dev.code_m, q_ref.code_m, big) == 0 &&
              memcmp(q_dev.code_v, q_ref.code_v, big) == 0,
          "%s: adamw8bit differs from adamw8bit_update", be->name);
    emu_disown(q_dev.code_m), emu_disown(q_dev.code_v);
    emu_disown(q_dev.absmax_m), emu_disown(q_dev.absmax_v);
    q8_moments_free(&q_ref), q8_moments_free(&q_dev);
    void *dev_bufs[] = {d_p, d_m, d_v, d_g, d_p8, d_g8};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {p, m, v, g, wp, wm, wv, p8, g8, p8_ref, got8};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

int main(void) {
    const Backend *backends[] = {backend_cpu(), &emu_backend};
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        check_dense(backends[i]);
        check_rowwise(backends[i]);
        check_attention(backends[i], false);
        check_lm_head(backends[i], (LogitCap){0.0f, 1.0f});
        if (backends[i]->attention_scored) { /* the Gemma 2 group, where the backend has it */
            check_gemma_rowwise(backends[i]);
            check_attention(backends[i], true);
            check_lm_head(backends[i], (LogitCap){2.0f, 1.0f / 0.7f});
        }
        check_gather_scatter(backends[i]);
        check_optimizer(backends[i]);
    }
    CHECK(emu_foreign_pointers == 0, "%d tensors given to emu's ops were not device memory",
          emu_foreign_pointers);
    CHECK(emu_live_ranges() == 0, "%d emu allocations left", emu_live_ranges());
    return harness_finish("test_kernel_backend");
}
