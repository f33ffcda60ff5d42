/* The backend table (kernels/backend.h), checked two ways on every backend this build has:
 *
 * 1. Op by op, against naive references written here in double (not the kernels), on fresh
 *    random inputs, with outputs poisoned (NaN) before the call: an entry wired to the wrong
 *    kernel, or passing its arguments in the wrong order, gives wrong numbers.
 * 2. End to end through "emu": the CPU's ops behind a table that claims device memory
 *    (host_memory false). Its allocations are poisoned, every op checks that each tensor it is
 *    given lies in memory the backend allocated or was given (the model's weights), and every
 *    call is counted. A forward, the training tape and its backward, the cached forward and an
 *    optimizer step must give bitwise the CPU backend's results, every op of the table must be
 *    reached, and one decoder layer must call each op as often as its architecture says: a
 *    model/ file that calls a kernel around the table, reads device memory from the host, or
 *    relies on zeroed allocations fails here. */
#include "common/error.h"
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/adamw8bit.h"
#include "model/activations.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/forward_cached.h"
#include "train/optimizer.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the emulated device backend */

enum {
    OP_LINEAR,
    OP_LINEAR_BACKWARD,
    OP_LORA,
    OP_LORA_BACKWARD,
    OP_RMSNORM,
    OP_RMSNORM_BACKWARD,
    OP_ROPE,
    OP_ROPE_BACKWARD,
    OP_SWIGLU,
    OP_SWIGLU_BACKWARD,
    OP_ADD,
    OP_SCALE,
    OP_ATTENTION,
    OP_ATTENTION_BACKWARD,
    OP_ATTENTION_CACHED,
    OP_LOGPROB,
    OP_LOGPROB_BACKWARD,
    OP_EMBEDDING_GATHER,
    OP_EMBEDDING_SCATTER_ADD,
    OP_ROWS_GATHER,
    OP_ROWS_SCATTER_ADD,
    OP_ADAMW,
    OP_ADAMW8BIT,
    OP_SUM_SQUARES,
    OP_MEMSET,
    OP_COPY,
    N_OPS
};
static const char *const op_names[N_OPS] = {"linear",
                                            "linear_backward",
                                            "lora",
                                            "lora_backward",
                                            "rmsnorm",
                                            "rmsnorm_backward",
                                            "rope",
                                            "rope_backward",
                                            "swiglu",
                                            "swiglu_backward",
                                            "add",
                                            "scale",
                                            "attention",
                                            "attention_backward",
                                            "attention_cached",
                                            "logprob",
                                            "logprob_backward",
                                            "embedding_gather",
                                            "embedding_scatter_add",
                                            "rows_gather",
                                            "rows_scatter_add",
                                            "adamw",
                                            "adamw8bit",
                                            "sum_squares",
                                            "memset",
                                            "copy"};

/* Memory the emulated device owns: its allocations and the ranges registered as its own. */
typedef struct {
    const char *base;
    size_t bytes;
} Range;
static Range ranges[4096];
static int n_ranges;
static long op_calls[N_OPS];
static int foreign_pointers; /* tensors given to an op that the device does not own */

static void emu_own(const void *p, size_t bytes) {
    if (n_ranges < (int)(sizeof ranges / sizeof *ranges))
        ranges[n_ranges++] = (Range){(const char *)p, bytes};
}

static void emu_disown(const void *p) {
    for (int i = 0; i < n_ranges; i++)
        if (ranges[i].base == p) {
            ranges[i] = ranges[--n_ranges];
            return;
        }
}

/* Whether p (NULL allowed) points into device memory. */
static void dev(const void *p) {
    if (!p) return;
    const char *c = p;
    for (int i = 0; i < n_ranges; i++)
        if (c >= ranges[i].base && c < ranges[i].base + ranges[i].bytes) return;
    foreign_pointers++;
}

#define CPU backend_cpu()

static void *emu_alloc(const Backend *be, size_t bytes, const char *what) {
    (void)be;
    void *p = xmalloc_checked(bytes, what);
    if (p) {
        memset(p, 0xff, bytes ? bytes : 1); /* NaN in every float: nothing may rely on zeros */
        emu_own(p, bytes ? bytes : 1);
    }
    return p;
}

static void emu_free(const Backend *be, void *p) {
    (void)be;
    if (!p) return;
    emu_disown(p);
    free(p);
}

static void emu_copy(const Backend *be, void *dst, const void *src, size_t bytes, BackendCopy dir) {
    (void)be;
    op_calls[OP_COPY]++;
    if (dir != BACKEND_HOST_TO_DEVICE) dev(src);
    if (dir != BACKEND_DEVICE_TO_HOST) dev(dst);
    if (bytes) memcpy(dst, src, bytes);
}

static void emu_memset(const Backend *be, void *dst, int value, size_t bytes) {
    (void)be;
    op_calls[OP_MEMSET]++;
    dev(dst);
    CPU->memset(CPU, dst, value, bytes);
}

static void emu_sync(const Backend *be) {
    (void)be;
}

static void emu_linear(const Backend *be, float *out, const float *in, WeightRef w,
                       const struct PackedWeight *packed, const float *bias, int n, int in_dim,
                       int out_dim) {
    (void)be;
    op_calls[OP_LINEAR]++;
    dev(out), dev(in), dev(w.f32), dev(w.bf16), dev(bias);
    CPU->linear(CPU, out, in, w, packed, bias, n, in_dim, out_dim);
}

static void emu_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                                const float *dout, const float *in, const float *w, int n,
                                int in_dim, int out_dim) {
    (void)be;
    op_calls[OP_LINEAR_BACKWARD]++;
    dev(din), dev(dw), dev(dbias), dev(dout), dev(in), dev(w);
    CPU->linear_backward(CPU, din, dw, dbias, dout, in, w, n, in_dim, out_dim);
}

static void emu_lora(const Backend *be, float *out, const float *in, const float *A, const float *B,
                     int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                     uint64_t dropout_key) {
    (void)be;
    op_calls[OP_LORA]++;
    dev(out), dev(in), dev(A), dev(B);
    CPU->lora(CPU, out, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p, dropout_key);
}

static void emu_lora_backward(const Backend *be, float *din, float *dA, float *dB,
                              const float *dout, const float *in, const float *A, const float *B,
                              int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                              uint64_t dropout_key) {
    (void)be;
    op_calls[OP_LORA_BACKWARD]++;
    dev(din), dev(dA), dev(dB), dev(dout), dev(in), dev(A), dev(B);
    CPU->lora_backward(CPU, din, dA, dB, dout, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p,
                       dropout_key);
}

static void emu_rmsnorm(const Backend *be, float *out, const float *in, const float *w, int n,
                        int c, float eps) {
    (void)be;
    op_calls[OP_RMSNORM]++;
    dev(out), dev(in), dev(w);
    CPU->rmsnorm(CPU, out, in, w, n, c, eps);
}

static void emu_rmsnorm_backward(const Backend *be, float *din, float *dw, const float *dout,
                                 const float *in, const float *w, int n, int c, float eps) {
    (void)be;
    op_calls[OP_RMSNORM_BACKWARD]++;
    dev(din), dev(dw), dev(dout), dev(in), dev(w);
    CPU->rmsnorm_backward(CPU, din, dw, dout, in, w, n, c, eps);
}

static void emu_rope(const Backend *be, float *x, const int32_t *positions, const float *cos_t,
                     const float *sin_t, int n, int heads, int hd) {
    (void)be;
    op_calls[OP_ROPE]++;
    dev(x), dev(positions), dev(cos_t), dev(sin_t);
    CPU->rope(CPU, x, positions, cos_t, sin_t, n, heads, hd);
}

static void emu_rope_backward(const Backend *be, float *dx, const int32_t *positions,
                              const float *cos_t, const float *sin_t, int n, int heads, int hd) {
    (void)be;
    op_calls[OP_ROPE_BACKWARD]++;
    dev(dx), dev(positions), dev(cos_t), dev(sin_t);
    CPU->rope_backward(CPU, dx, positions, cos_t, sin_t, n, heads, hd);
}

static void emu_swiglu(const Backend *be, float *out, const float *gate, const float *up,
                       size_t n) {
    (void)be;
    op_calls[OP_SWIGLU]++;
    dev(out), dev(gate), dev(up);
    CPU->swiglu(CPU, out, gate, up, n);
}

static void emu_swiglu_backward(const Backend *be, float *dgate, float *dup, const float *dout,
                                const float *gate, const float *up, size_t n) {
    (void)be;
    op_calls[OP_SWIGLU_BACKWARD]++;
    dev(dgate), dev(dup), dev(dout), dev(gate), dev(up);
    CPU->swiglu_backward(CPU, dgate, dup, dout, gate, up, n);
}

static void emu_add(const Backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
    op_calls[OP_ADD]++;
    dev(out), dev(a), dev(b);
    CPU->add(CPU, out, a, b, n);
}

static void emu_scale(const Backend *be, float *x, float f, size_t n) {
    (void)be;
    op_calls[OP_SCALE]++;
    dev(x);
    CPU->scale(CPU, x, f, n);
}

static void emu_attention(const Backend *be, float *out, const float *q, const float *k,
                          const float *v, const AttnSegment *segs, int n_segs,
                          const int32_t *seq_index, int nh, int nkv, int hd, int window) {
    (void)be;
    op_calls[OP_ATTENTION]++;
    dev(out), dev(q), dev(k), dev(v), dev(segs), dev(seq_index);
    CPU->attention(CPU, out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window);
}

static void emu_attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const AttnSegment *segs, int n_segs,
                                   const int32_t *seq_index, int n_rows, int nh, int nkv, int hd,
                                   int window) {
    (void)be;
    op_calls[OP_ATTENTION_BACKWARD]++;
    dev(dq), dev(dk), dev(dv), dev(dout), dev(q), dev(k), dev(v), dev(segs), dev(seq_index);
    CPU->attention_backward(CPU, dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, nh,
                            nkv, hd, window);
}

static void emu_attention_cached(const Backend *be, float *out, const float *q,
                                 const float *k_cache, const float *v_cache, const int32_t *slot,
                                 const int32_t *pos, int n, int max_len, int nh, int nkv, int hd,
                                 int window) {
    (void)be;
    op_calls[OP_ATTENTION_CACHED]++;
    dev(out), dev(q), dev(k_cache), dev(v_cache), dev(slot), dev(pos);
    CPU->attention_cached(CPU, out, q, k_cache, v_cache, slot, pos, n, max_len, nh, nkv, hd,
                          window);
}

static void emu_logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                        const int32_t *target, WeightRef lm_head, int n, int h, int vocab) {
    (void)be;
    op_calls[OP_LOGPROB]++;
    dev(logp), dev(stats), dev(hidden), dev(target), dev(lm_head.f32), dev(lm_head.bf16);
    CPU->logprob(CPU, logp, stats, hidden, target, lm_head, n, h, vocab);
}

static void emu_logprob_backward(const Backend *be, float *dhidden, float *dlm_head,
                                 const float *dlogp, const float *hidden, const int32_t *target,
                                 const float *lm_head, int n, int h, int vocab) {
    (void)be;
    op_calls[OP_LOGPROB_BACKWARD]++;
    dev(dhidden), dev(dlm_head), dev(dlogp), dev(hidden), dev(target), dev(lm_head);
    CPU->logprob_backward(CPU, dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h, vocab);
}

static void emu_embedding_gather(const Backend *be, float *out, WeightRef table, const int32_t *ids,
                                 int n, int h) {
    (void)be;
    op_calls[OP_EMBEDDING_GATHER]++;
    dev(out), dev(table.f32), dev(table.bf16), dev(ids);
    CPU->embedding_gather(CPU, out, table, ids, n, h);
}

static void emu_embedding_scatter_add(const Backend *be, float *dtable, const float *dx,
                                      const int32_t *ids, int n, int h, int32_t skip_id) {
    (void)be;
    op_calls[OP_EMBEDDING_SCATTER_ADD]++;
    dev(dtable), dev(dx), dev(ids);
    CPU->embedding_scatter_add(CPU, dtable, dx, ids, n, h, skip_id);
}

static void emu_rows_gather(const Backend *be, float *dst, const float *src, const int32_t *idx,
                            int n, int width) {
    (void)be;
    op_calls[OP_ROWS_GATHER]++;
    dev(dst), dev(src), dev(idx);
    CPU->rows_gather(CPU, dst, src, idx, n, width);
}

static void emu_rows_scatter_add(const Backend *be, float *dst, const float *src,
                                 const int32_t *idx, int n, int width) {
    (void)be;
    op_calls[OP_ROWS_SCATTER_ADD]++;
    dev(dst), dev(src), dev(idx);
    CPU->rows_scatter_add(CPU, dst, src, idx, n, width);
}

static void emu_adamw(const Backend *be, float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    (void)be;
    op_calls[OP_ADAMW]++;
    dev(p), dev(m), dev(v), dev(g);
    CPU->adamw(CPU, p, m, v, g, numel, c, step_size, inv_bc2_sqrt);
}

static void emu_adamw8bit(const Backend *be, struct Q8Moments *q, const struct Q8Map *m_map,
                          const struct Q8Map *v_map, float *p, const float *g,
                          const AdamWStepCoefs *c) {
    (void)be;
    op_calls[OP_ADAMW8BIT]++;
    dev(p), dev(g), dev(q->code_m), dev(q->code_v), dev(q->absmax_m), dev(q->absmax_v);
    CPU->adamw8bit(CPU, q, m_map, v_map, p, g, c);
}

static double emu_sum_squares(const Backend *be, const float *g, size_t n) {
    (void)be;
    op_calls[OP_SUM_SQUARES]++;
    dev(g);
    return CPU->sum_squares(CPU, g, n);
}

static const Backend emu_backend = {
    .name = "emu",
    .host_memory = false,
    .alloc = emu_alloc,
    .free = emu_free,
    .copy = emu_copy,
    .memset = emu_memset,
    .sync = emu_sync,
    .linear = emu_linear,
    .linear_backward = emu_linear_backward,
    .lora = emu_lora,
    .lora_backward = emu_lora_backward,
    .rmsnorm = emu_rmsnorm,
    .rmsnorm_backward = emu_rmsnorm_backward,
    .rope = emu_rope,
    .rope_backward = emu_rope_backward,
    .swiglu = emu_swiglu,
    .swiglu_backward = emu_swiglu_backward,
    .add = emu_add,
    .scale = emu_scale,
    .attention = emu_attention,
    .attention_backward = emu_attention_backward,
    .attention_cached = emu_attention_cached,
    .logprob = emu_logprob,
    .logprob_backward = emu_logprob_backward,
    .embedding_gather = emu_embedding_gather,
    .embedding_scatter_add = emu_embedding_scatter_add,
    .rows_gather = emu_rows_gather,
    .rows_scatter_add = emu_rows_scatter_add,
    .adamw = emu_adamw,
    .adamw8bit = emu_adamw8bit,
    .sum_squares = emu_sum_squares,
};

/* --------------------------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
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
static void ref_attention(double *out, const float *q, const float *k, const float *v,
                          const AttnSegment *segs, int n_segs, const int32_t *seq_index, int nh,
                          int nkv, int hd, int window) {
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
                    p[j] = d / sqrt((double)hd);
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
    be->linear(be, out, d_in, (WeightRef){d_w, NULL}, NULL, d_bias, n, in_dim, out_dim);
    ref_linear(want, in, w, bias, n, in_dim, out_dim);
    compare_dev(be, out, want, (size_t)n * out_dim, 1e-5, "linear");

    /* bf16 weights: the reference multiplies the same rounded values */
    uint16_t *w16 = malloc((size_t)out_dim * in_dim * sizeof *w16);
    float *w16f = malloc((size_t)out_dim * in_dim * sizeof *w16f);
    for (int i = 0; i < out_dim * in_dim; i++)
        w16[i] = f32_to_bf16(w[i]), w16f[i] = bf16_to_f32(w16[i]);
    uint16_t *d_w16 = up_bytes(be, w16, (size_t)out_dim * in_dim * sizeof *w16);
    be->linear(be, out, d_in, (WeightRef){NULL, d_w16}, NULL, NULL, n, in_dim, out_dim);
    ref_linear(want, in, w16f, NULL, n, in_dim, out_dim);
    compare_dev(be, out, want, (size_t)n * out_dim, 1e-5, "linear bf16");

    /* backward: din written, dw and dbias accumulated onto what they held */
    float *dw0 = rand_host((size_t)out_dim * in_dim), *db0 = rand_host(out_dim);
    float *din = poisoned(be, (size_t)n * in_dim), *dw = up(be, dw0, (size_t)out_dim * in_dim);
    float *db = up(be, db0, out_dim);
    be->linear_backward(be, din, dw, db, d_dout, d_in, d_w, n, in_dim, out_dim);
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

    /* RoPE (rotate_half) at positions, then its backward as the transposed rotation:
     * <rope_backward(y), x> = <y, rope(x)> */
    int32_t pos[5] = {3, 0, 8, 8, 1};
    float *cos_t = rand_host((size_t)max_pos * hd / 2),
          *sin_t = rand_host((size_t)max_pos * hd / 2);
    float *d_cos = up(be, cos_t, (size_t)max_pos * hd / 2);
    float *d_sin = up(be, sin_t, (size_t)max_pos * hd / 2);
    int32_t *d_pos = up_bytes(be, pos, sizeof pos);
    float *rx = up(be, x, nc);
    be->rope(be, rx, d_pos, d_cos, d_sin, n, heads, hd);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                const float *v = x + (r * heads + h) * hd;
                double co = cos_t[pos[r] * hd / 2 + i], si = sin_t[pos[r] * hd / 2 + i];
                want[(r * heads + h) * hd + i] = v[i] * co - v[i + hd / 2] * si;
                want[(r * heads + h) * hd + i + hd / 2] = v[i + hd / 2] * co + v[i] * si;
            }
    compare_dev(be, rx, want, nc, 1e-5, "rope");
    float *ry = up(be, dout, nc);
    be->rope_backward(be, ry, d_pos, d_cos, d_sin, n, heads, hd);
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
                             int nh, int nkv, int hd, int window) {
    double *o = calloc((size_t)n * nh * hd, sizeof *o), l = 0;
    ref_attention(o, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window);
    for (size_t i = 0; i < (size_t)n * nh * hd; i++)
        l += o[i] * dout[i];
    free(o);
    return l;
}

static void check_attention(const Backend *be) {
    /* two sequences: rows 0-5, and rows 6-9 continuing rows 0-2 (a shared prefix) */
    int n = 10, nh = 4, nkv = 2, hd = 16, window = 4;
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
        be->attention(be, out, d_q, d_k, d_v, d_segs, 2, d_si, nh, nkv, hd, win);
        ref_attention(want, q, k, v, segs, 2, seq_index, nh, nkv, hd, win);
        compare_dev(be, out, want, nq, 1e-5, win ? "attention (window)" : "attention");
        be->free(be, out);

        /* the backward against central differences of the double reference */
        float *dq = poisoned(be, nq), *dk = poisoned(be, nk), *dv = poisoned(be, nk);
        be->attention_backward(be, dq, dk, dv, d_dout, d_q, d_k, d_v, d_segs, 2, d_si, n, nh, nkv,
                               hd, win);
        float *g[3] = {down(be, dq, nq), down(be, dk, nk), down(be, dv, nk)};
        float *x[3] = {q, k, v};
        const char *name[3] = {"dq", "dk", "dv"};
        for (int t = 0; t < 3; t++) {
            size_t len = t ? nk : nq;
            for (size_t i = 0; i < len; i += len / 23 + 1) {
                float keep = x[t][i];
                double h = 1e-3;
                x[t][i] = (float)(keep + h);
                double lp = attention_loss(q, k, v, dout, segs, 2, seq_index, n, nh, nkv, hd, win);
                x[t][i] = (float)(keep - h);
                double lm = attention_loss(q, k, v, dout, segs, 2, seq_index, n, nh, nkv, hd, win);
                x[t][i] = keep;
                double fd = (lp - lm) / ((double)(float)(keep + h) - (double)(float)(keep - h));
                CHECK(harness_close(g[t][i], fd, 1e-3, 1e-4),
                      "%s: attention_backward %s[%zu] = %g, differences give %g (window %d)",
                      be->name, name[t], i, g[t][i], fd, win);
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
        be->attention_cached(be, out, d_q2, d_kc, d_vc, d_slot, d_pos, 2, max_len, nh, nkv, hd,
                             win);
        ref_attention(want, q, k, v, segs, 2, seq_index, nh, nkv, hd, win);
        compare_dev(be, out, want + (size_t)5 * nh * hd, (size_t)2 * nh * hd, 1e-5,
                    win ? "attention_cached (window)" : "attention_cached");
        be->free(be, out);
    }
    void *dev_bufs[] = {d_q, d_k, d_v, d_dout, d_segs, d_si, d_kc, d_vc, d_slot, d_pos, d_q2};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {q, k, v, dout, want, kc, vc};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void check_lm_head(const Backend *be) {
    int n = 6, h = 16, V = 300;
    float *hid = rand_host((size_t)n * h), *W = rand_host((size_t)V * h), *dl = rand_host(n);
    float *dW0 = rand_host((size_t)V * h);
    int32_t tgt[6] = {0, 299, 17, 17, 150, 3};
    float *d_hid = up(be, hid, (size_t)n * h), *d_W = up(be, W, (size_t)V * h);
    float *d_dl = up(be, dl, n);
    int32_t *d_tgt = up_bytes(be, tgt, sizeof tgt);
    float *logp = poisoned(be, n);
    LogitStats *st = be->alloc(be, n * sizeof *st, "stats");
    be->logprob(be, logp, st, d_hid, d_tgt, (WeightRef){d_W, NULL}, n, h, V);
    double want[6], mean[6], ent[6], *p = malloc(V * sizeof *p);
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
            double g = dl[r] * ((t == tgt[r]) - pr); /* d logp / d logit_t */
            for (int j = 0; j < h; j++) {
                w_dh[r * h + j] += g * W[t * h + j];
                w_dW[t * h + j] += g * hid[r * h + j];
            }
        }
    }
    compare_dev(be, logp, want, n, 1e-5, "logprob");
    LogitStats hs[6];
    be->copy(be, hs, st, sizeof hs, BACKEND_DEVICE_TO_HOST);
    for (int r = 0; r < n; r++)
        CHECK(hs[r].argmax == amax[r] && harness_close(hs[r].mean_logit, mean[r], 1e-5, 1e-5) &&
                  harness_close(hs[r].entropy, ent[r], 1e-5, 1e-5),
              "%s: logprob stats row %d: argmax %d mean %g entropy %g, want %d %g %g", be->name, r,
              hs[r].argmax, hs[r].mean_logit, hs[r].entropy, amax[r], mean[r], ent[r]);
    float *dh = poisoned(be, (size_t)n * h), *dW = up(be, dW0, (size_t)V * h);
    be->logprob_backward(be, dh, dW, d_dl, d_hid, d_tgt, d_W, n, h, V);
    compare_dev(be, dh, w_dh, (size_t)n * h, 1e-5, "logprob_backward dhidden");
    compare_dev(be, dW, w_dW, (size_t)V * h, 1e-5, "logprob_backward dlm_head");
    void *dev_bufs[] = {d_hid, d_W, d_dl, d_tgt, logp, st, dh, dW};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        be->free(be, dev_bufs[i]);
    void *host[] = {hid, W, dl, dW0, p, w_dh, w_dW};
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
    be->embedding_gather(be, out, (WeightRef){d_table, NULL}, d_ids, n, h);
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
                        .bc2_sqrt = 0.5f};
    float step = 0.02f, inv_bc2 = 3.0f;
    float *d_p = up(be, p, n), *d_m = up(be, m, n), *d_v = up(be, v, n), *d_g = up(be, g, n);
    be->adamw(be, d_p, d_m, d_v, d_g, n, &c, step, inv_bc2);
    double *wp = malloc(n * 8), *wm = malloc(n * 8), *wv = malloc(n * 8), ss = 0;
    for (size_t i = 0; i < n; i++) {
        wm[i] = m[i] + (1 - (double)c.beta1) * (g[i] - m[i]);
        wv[i] = c.beta2 * (double)v[i] + (1 - (double)c.beta2) * g[i] * g[i];
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

/* ------------------------------------------------------------------------- end to end */

/* What one run of the model computes, copied to the host. */
typedef struct {
    float *logp, *tape_logp, *grads, *lora_grads, *logits, *params_after;
    LogitStats *stats;
    double grad_norm;
} RunResult;

static void run_result_free(RunResult *r) {
    free(r->logp), free(r->tape_logp), free(r->grads), free(r->lora_grads), free(r->logits);
    free(r->params_after), free(r->stats);
}

/* Runs everything model/ and the optimizer do on m (its backend set to be); grads in be's
 * memory. Only the emu backend needs the model's weights registered as its own. */
static void run_model(Model *m, LoraAdapter *lora, const Backend *be, RunResult *res) {
    memset(res, 0, sizeof *res);
    m->backend = be;
    if (be == &emu_backend) {
        emu_own(m->params, m->n_params * sizeof(float));
        emu_own(lora->params, lora->n_params * sizeof(float));
    }
    int B = 3, T = 24, cells = B * T;
    int32_t tokens[72];
    uint8_t mask[72];
    for (int i = 0; i < cells; i++) {
        /* row 1 repeats row 0's first 18 tokens: a shared prefix (token_layout.h); row 2 has 4
         * cells of left padding */
        int t = i % T, b = i / T;
        tokens[i] = (b == 1 && t < 18) ? (int32_t)((t * 7 + 3) % m->cfg.vocab_size)
                                       : (int32_t)((i * 7 + 3 + b) % m->cfg.vocab_size);
        mask[i] = !(b == 2 && t < 4);
    }
    TokenBatch batch = {.batch = B, .t_len = T, .tokens = tokens, .attn_mask = mask};
    res->logp = malloc(cells * sizeof(float));
    CHECK(model_token_logprobs(m, &batch, NULL, res->logp) == 0, "%s: logprobs: %s", be->name,
          err_msg());

    /* the training tape with gradient checkpointing, its log-probs and the backward of both the
     * base and the adapter (lora dropout on) */
    lora->training = true;
    lora->dropout_key = 99;
    m->lora = lora;
    ForwardTape tape = {0};
    res->tape_logp = malloc(cells * sizeof(float));
    res->stats = malloc(cells * sizeof *res->stats);
    CHECK(model_forward_tape(m, &batch, true, &tape) == 0, "%s: tape: %s", be->name, err_msg());
    CHECK(model_tape_logprobs_stats(m, &tape, NULL, res->tape_logp, res->stats) == 0, "tape lp");
    float *dlogp = malloc(cells * sizeof *dlogp);
    for (int i = 0; i < cells; i++)
        dlogp[i] = 0.01f * (float)((i % 5) - 2);
    float *grads = be->alloc(be, m->n_params * sizeof(float), "grads");
    float *lgrads = be->alloc(be, lora->n_params * sizeof(float), "lora grads");
    be->memset(be, grads, 0, m->n_params * sizeof(float));
    be->memset(be, lgrads, 0, lora->n_params * sizeof(float));
    CHECK(model_backward(m, &tape, NULL, dlogp, grads, lgrads) == 0, "%s: backward", be->name);
    forward_tape_free(&tape);
    lora->training = false;

    /* an optimizer step of the base from those gradients */
    ParamSpan *spans = malloc((size_t)m->n_param_tensors * sizeof *spans);
    for (int i = 0; i < m->n_param_tensors; i++)
        spans[i] = (ParamSpan){m->param_info[i].offset, m->param_info[i].numel, i % 2 == 0, false};
    AdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    AdamW opt;
    CHECK(adamw_init(&opt, &cfg, spans, m->n_param_tensors) == 0, "adamw");
    emu_own(opt.m, opt.n * sizeof(float)), emu_own(opt.v, opt.n * sizeof(float));
    res->grad_norm = grad_global_norm(be, grads, spans, m->n_param_tensors);
    grad_clip(be, grads, spans, m->n_param_tensors, 0.5 * res->grad_norm, res->grad_norm);
    res->grads = down(be, grads, m->n_params);
    res->lora_grads = down(be, lgrads, lora->n_params);
    float *saved = malloc(m->n_params * sizeof *saved);
    memcpy(saved, m->params, m->n_params * sizeof *saved);
    adamw_step(&opt, be, m->params, grads, 1e-3);
    res->params_after = malloc(m->n_params * sizeof(float));
    memcpy(res->params_after, m->params, m->n_params * sizeof(float));
    memcpy(m->params, saved, m->n_params * sizeof *saved);
    emu_disown(opt.m), emu_disown(opt.v);
    adamw_free(&opt);

    /* the cached forward with the adapter: two prompts prefilled, then a decode step of both */
    KvCache kv;
    int V = m->cfg.vocab_size;
    res->logits = malloc((size_t)4 * V * sizeof(float));
    CHECK(kv_cache_init(&kv, be, &m->cfg, 2, 16) == 0, "kv");
    CachedChunk prefill[2] = {{1, tokens, 9}, {0, tokens + T, 5}};
    CHECK(model_forward_cached(m, NULL, &kv, prefill, 2, res->logits) == 0, "%s: prefill: %s",
          be->name, err_msg());
    CachedChunk decode[2] = {{0, tokens + 40, 1}, {1, tokens + 50, 1}};
    CHECK(model_forward_cached(m, NULL, &kv, decode, 2, res->logits + 2 * V) == 0, "%s: decode: %s",
          be->name, err_msg());
    kv_cache_free(&kv);
    m->lora = NULL;

    be->free(be, grads), be->free(be, lgrads);
    free(dlogp), free(spans), free(saved);
    if (be == &emu_backend) emu_disown(m->params), emu_disown(lora->params);
    m->backend = NULL;
}

static bool same(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

static void check_end_to_end(const char *fixture) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s", fixture);
    Model m;
    LoraAdapter lora;
    const char *all[] = {"all-linear"};
    if (model_load(&m, harness_source_path(path)) != 0 ||
        lora_create(&lora, &m.cfg, 4, 8.0, false, 0.1, all, 1, 5) != 0) {
        CHECK(false, "%s: %s", fixture, err_msg());
        return;
    }
    for (size_t i = 0; i < lora.n_params; i++) /* B starts at zero: make the adapter count */
        lora.params[i] += 0.01f * frand();
    RunResult cpu, emu;
    run_model(&m, &lora, backend_cpu(), &cpu);
    memset(op_calls, 0, sizeof op_calls);
    foreign_pointers = 0;
    run_model(&m, &lora, &emu_backend, &emu);
    int cells = 72, V = m.cfg.vocab_size;
    CHECK(same(cpu.logp, emu.logp, cells * 4), "%s: emu logprobs differ from cpu", fixture);
    CHECK(same(cpu.tape_logp, emu.tape_logp, cells * 4) &&
              same(cpu.stats, emu.stats, cells * sizeof *cpu.stats),
          "%s: emu tape log-probs differ", fixture);
    CHECK(same(cpu.grads, emu.grads, m.n_params * 4), "%s: emu gradients differ", fixture);
    CHECK(same(cpu.lora_grads, emu.lora_grads, lora.n_params * 4),
          "%s: emu adapter gradients differ", fixture);
    CHECK(cpu.grad_norm == emu.grad_norm && cpu.grad_norm > 0, "%s: grad norm %g vs %g", fixture,
          cpu.grad_norm, emu.grad_norm);
    CHECK(same(cpu.params_after, emu.params_after, m.n_params * 4), "%s: emu AdamW differs",
          fixture);
    CHECK(same(cpu.logits, emu.logits, (size_t)4 * V * 4), "%s: emu cached logits differ", fixture);
    CHECK(foreign_pointers == 0, "%s: %d tensors given to ops were not device memory", fixture,
          foreign_pointers);
    for (int op = 0; op < N_OPS; op++)
        CHECK(op_calls[op] > 0 || op == OP_ADAMW8BIT, "%s: the model never reached the table's %s",
              fixture, op_names[op]);

    /* one training tape without recomputation: each layer calls the table as the architecture
     * says, so a kernel called around the table shows as a missing call */
    memset(op_calls, 0, sizeof op_calls);
    m.backend = &emu_backend;
    emu_own(m.params, m.n_params * sizeof(float));
    emu_own(lora.params, lora.n_params * sizeof(float));
    m.lora = &lora;
    int32_t tokens[16];
    for (int i = 0; i < 16; i++)
        tokens[i] = (i * 5 + 1) % V;
    TokenBatch b = {.batch = 1, .t_len = 16, .tokens = tokens};
    ForwardTape tape = {0};
    CHECK(model_forward_tape(&m, &b, false, &tape) == 0, "tape");
    long L = m.cfg.n_layers, qk = m.cfg.qk_norm ? 2 : 0;
    long want_fwd[N_OPS] = {
        [OP_LINEAR] = 7 * L, [OP_LORA] = 7 * L,        [OP_RMSNORM] = (2 + qk) * L + 1,
        [OP_ROPE] = 2 * L,   [OP_ATTENTION] = L,       [OP_ADD] = 2 * L,
        [OP_SWIGLU] = L,     [OP_EMBEDDING_GATHER] = 1};
    for (int op = 0; op < N_OPS; op++)
        if (op != OP_COPY)
            CHECK(op_calls[op] == want_fwd[op], "%s: forward called %s %ld times, want %ld",
                  fixture, op_names[op], op_calls[op], want_fwd[op]);
    float dlogp[16] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    float *grads = emu_backend.alloc(&emu_backend, m.n_params * sizeof(float), "grads");
    emu_backend.memset(&emu_backend, grads, 0, m.n_params * sizeof(float));
    memset(op_calls, 0, sizeof op_calls);
    CHECK(model_backward(&m, &tape, NULL, dlogp, grads, NULL) == 0, "backward");
    long want_bwd[N_OPS] = {[OP_LINEAR_BACKWARD] = 7 * L,
                            [OP_LORA_BACKWARD] = 7 * L,
                            [OP_RMSNORM] = 2 * L,
                            [OP_RMSNORM_BACKWARD] = (2 + qk) * L + 1,
                            [OP_ROPE_BACKWARD] = 2 * L,
                            [OP_ATTENTION_BACKWARD] = L,
                            [OP_ADD] = 5 * L,
                            [OP_SWIGLU] = L,
                            [OP_SWIGLU_BACKWARD] = L,
                            [OP_ROWS_GATHER] = 1,
                            [OP_LOGPROB_BACKWARD] = 1,
                            [OP_MEMSET] = 1,
                            [OP_ROWS_SCATTER_ADD] = 1,
                            [OP_EMBEDDING_SCATTER_ADD] = 1};
    for (int op = 0; op < N_OPS; op++)
        if (op != OP_COPY)
            CHECK(op_calls[op] == want_bwd[op], "%s: backward called %s %ld times, want %ld",
                  fixture, op_names[op], op_calls[op], want_bwd[op]);
    emu_backend.free(&emu_backend, grads);
    forward_tape_free(&tape);
    emu_disown(m.params), emu_disown(lora.params);
    m.backend = NULL, m.lora = NULL;

    run_result_free(&cpu), run_result_free(&emu);
    lora_free(&lora);
    model_free(&m);
}

int main(void) {
    const Backend *backends[] = {backend_cpu(), &emu_backend};
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        check_dense(backends[i]);
        check_rowwise(backends[i]);
        check_attention(backends[i]);
        check_lm_head(backends[i]);
        check_gather_scatter(backends[i]);
        check_optimizer(backends[i]);
    }
    CHECK(foreign_pointers == 0, "op checks: %d tensors were not device memory", foreign_pointers);
    CHECK(n_ranges == 0, "op checks: %d device allocations left", n_ranges);
    /* biases and sliding windows (qwen2_bias, mistral_window), q/k norms (qwen3_qknorm) */
    check_end_to_end("qwen3_qknorm");
    check_end_to_end("mistral_window");
    check_end_to_end("qwen2_bias");
    return harness_finish("test_kernel_backend");
}
