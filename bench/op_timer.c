/* op_timer.h: each timed op is a function of the same signature as the table's that brackets
 * the inner op with be->sync. The wrapper's ctx is the inner backend's, so the ops it passes
 * through untimed (and the inner ops it calls with the wrapper as `be`) see their own state. */
#include "op_timer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    T_LINEAR,
    T_LINEAR_BWD,
    T_LORA,
    T_LORA_BWD,
    T_RMSNORM,
    T_RMSNORM_BWD,
    T_ADD_RMSNORM,
    T_RMSNORM_BWD_ADD,
    T_ROPE,
    T_ROPE_BWD,
    T_SWIGLU,
    T_SWIGLU_BWD,
    T_SWIGLU_BWD_ACT,
    T_ATTN,
    T_ATTN_BWD,
    T_ATTN_CACHED,
    T_LOGPROB,
    T_LOGPROB_BWD,
    T_EMBED,
    T_EMBED_BWD,
    T_ROWS_GATHER,
    T_ROWS_SCATTER,
    T_ADAMW,
    T_SUMSQ,
    T_ADAMW_MULTI,
    T_SUMSQ_MULTI,
    T_ROPE_QK,
    N_TIMED
};

static const char *const op_names[N_TIMED] = {"linear",
                                              "linear_backward",
                                              "lora",
                                              "lora_backward",
                                              "rmsnorm",
                                              "rmsnorm_backward",
                                              "add_rmsnorm",
                                              "rmsnorm_backward_add",
                                              "rope",
                                              "rope_backward",
                                              "swiglu",
                                              "swiglu_backward",
                                              "swiglu_backward_act",
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
                                              "sum_squares",
                                              "adamw_multi",
                                              "sum_squares_multi",
                                              "rope_qk"};

static const Backend *inner;
static Backend timed;
static double total[N_TIMED];
static long calls[N_TIMED];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double begin(void) {
    inner->sync(inner);
    return now();
}

static void end(int op, double t0) {
    inner->sync(inner);
    total[op] += now() - t0;
    calls[op]++;
}

/* The body every timed op shares: time the inner op's call. */
#define TIMED(op, call)                                                                            \
    do {                                                                                           \
        double t0_ = begin();                                                                      \
        call;                                                                                      \
        end(op, t0_);                                                                              \
    } while (0)

static void linear(const Backend *be, float *out, const float *in, WeightRef w,
                   const struct PackedWeight *packed, const float *bias, int n, int in_dim,
                   int out_dim) {
    TIMED(T_LINEAR, inner->linear(be, out, in, w, packed, bias, n, in_dim, out_dim));
}
static void linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                            const float *dout, const float *in, WeightRef w, int n, int in_dim,
                            int out_dim) {
    TIMED(T_LINEAR_BWD,
          inner->linear_backward(be, din, dw, dbias, dout, in, w, n, in_dim, out_dim));
}
static void lora(const Backend *be, float *out, const float *in, const float *A, const float *B,
                 int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                 uint64_t key) {
    TIMED(T_LORA, inner->lora(be, out, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p, key));
}
static void lora_backward(const Backend *be, float *din, float *dA, float *dB, const float *dout,
                          const float *in, const float *A, const float *B, int n, int in_dim,
                          int out_dim, int r, float scaling, float dropout_p, uint64_t key) {
    TIMED(T_LORA_BWD, inner->lora_backward(be, din, dA, dB, dout, in, A, B, n, in_dim, out_dim, r,
                                           scaling, dropout_p, key));
}
static void rmsnorm(const Backend *be, float *out, const float *in, const float *w, int n, int c,
                    float eps) {
    TIMED(T_RMSNORM, inner->rmsnorm(be, out, in, w, n, c, eps));
}
static void rmsnorm_backward(const Backend *be, float *din, float *dw, const float *dout,
                             const float *in, const float *w, int n, int c, float eps) {
    TIMED(T_RMSNORM_BWD, inner->rmsnorm_backward(be, din, dw, dout, in, w, n, c, eps));
}
static void add_rmsnorm(const Backend *be, float *sum, float *out, const float *a, const float *b,
                        const float *w, int n, int c, float eps) {
    TIMED(T_ADD_RMSNORM, inner->add_rmsnorm(be, sum, out, a, b, w, n, c, eps));
}
static void rmsnorm_backward_add(const Backend *be, float *dres, float *dw, const float *dout,
                                 const float *in, const float *w, int n, int c, float eps) {
    TIMED(T_RMSNORM_BWD_ADD, inner->rmsnorm_backward_add(be, dres, dw, dout, in, w, n, c, eps));
}
static void rope(const Backend *be, float *x, const int32_t *pos, const float *cos_t,
                 const float *sin_t, int n, int heads, int hd, int rot) {
    TIMED(T_ROPE, inner->rope(be, x, pos, cos_t, sin_t, n, heads, hd, rot));
}
static void rope_backward(const Backend *be, float *dx, const int32_t *pos, const float *cos_t,
                          const float *sin_t, int n, int heads, int hd, int rot) {
    TIMED(T_ROPE_BWD, inner->rope_backward(be, dx, pos, cos_t, sin_t, n, heads, hd, rot));
}
static void swiglu(const Backend *be, float *out, const float *gate, const float *up, size_t n) {
    TIMED(T_SWIGLU, inner->swiglu(be, out, gate, up, n));
}
static void swiglu_backward(const Backend *be, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n) {
    TIMED(T_SWIGLU_BWD, inner->swiglu_backward(be, dgate, dup, dout, gate, up, n));
}
static void swiglu_backward_act(const Backend *be, float *act, float *dgate, float *dup,
                                const float *dout, const float *gate, const float *up, size_t n) {
    TIMED(T_SWIGLU_BWD_ACT, inner->swiglu_backward_act(be, act, dgate, dup, dout, gate, up, n));
}
static void attention(const Backend *be, float *out, const float *q, const float *k, const float *v,
                      const AttnSegment *segs, int n_segs, const int32_t *seq, int nh, int nkv,
                      int hd, int window) {
    TIMED(T_ATTN, inner->attention(be, out, q, k, v, segs, n_segs, seq, nh, nkv, hd, window));
}
static void attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                               const float *dout, const float *q, const float *k, const float *v,
                               const AttnSegment *segs, int n_segs, const int32_t *seq, int rows,
                               int nh, int nkv, int hd, int window) {
    TIMED(T_ATTN_BWD, inner->attention_backward(be, dq, dk, dv, dout, q, k, v, segs, n_segs, seq,
                                                rows, nh, nkv, hd, window));
}
static void attention_cached(const Backend *be, float *out, const float *q, const float *kc,
                             const float *vc, const int32_t *slot, const int32_t *pos, int n,
                             int max_len, int nh, int nkv, int hd, int window) {
    TIMED(T_ATTN_CACHED,
          inner->attention_cached(be, out, q, kc, vc, slot, pos, n, max_len, nh, nkv, hd, window));
}
static void logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                    const int32_t *target, WeightRef w, int n, int h, int vocab) {
    TIMED(T_LOGPROB, inner->logprob(be, logp, stats, hidden, target, w, n, h, vocab));
}
static void logprob_backward(const Backend *be, float *dhidden, float *dw, const float *dlogp,
                             const float *hidden, const int32_t *target, WeightRef w, int n, int h,
                             int vocab) {
    TIMED(T_LOGPROB_BWD,
          inner->logprob_backward(be, dhidden, dw, dlogp, hidden, target, w, n, h, vocab));
}
static void embedding_gather(const Backend *be, float *out, WeightRef table, const int32_t *ids,
                             int n, int h) {
    TIMED(T_EMBED, inner->embedding_gather(be, out, table, ids, n, h));
}
static void embedding_scatter_add(const Backend *be, float *dtable, const float *dx,
                                  const int32_t *ids, int n, int h, int32_t skip_id) {
    TIMED(T_EMBED_BWD, inner->embedding_scatter_add(be, dtable, dx, ids, n, h, skip_id));
}
static void rows_gather(const Backend *be, float *dst, const float *src, const int32_t *idx, int n,
                        int width) {
    TIMED(T_ROWS_GATHER, inner->rows_gather(be, dst, src, idx, n, width));
}
static void rows_scatter_add(const Backend *be, float *dst, const float *src, const int32_t *idx,
                             int n, int width) {
    TIMED(T_ROWS_SCATTER, inner->rows_scatter_add(be, dst, src, idx, n, width));
}
static void adamw(const Backend *be, float *p, float *m, float *v, const float *g, size_t numel,
                  const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    TIMED(T_ADAMW, inner->adamw(be, p, m, v, g, numel, c, step_size, inv_bc2_sqrt));
}
static double sum_squares(const Backend *be, const float *g, size_t n) {
    double t0 = begin(), s = inner->sum_squares(be, g, n);
    end(T_SUMSQ, t0);
    return s;
}

static void adamw_multi(const Backend *be, const AdamWTensor *tensors, int count,
                        const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    TIMED(T_ADAMW_MULTI, inner->adamw_multi(be, tensors, count, c, step_size, inv_bc2_sqrt));
}
static double sum_squares_multi(const Backend *be, const GradTensor *tensors, int count) {
    double t0 = begin(), s = inner->sum_squares_multi(be, tensors, count);
    end(T_SUMSQ_MULTI, t0);
    return s;
}

static void rope_qk(const Backend *be, float *q, float *k, const int32_t *positions,
                    const float *cos_table, const float *sin_table, int n, int q_heads, int k_heads,
                    int hd, int rot, bool backward) {
    TIMED(T_ROPE_QK, inner->rope_qk(be, q, k, positions, cos_table, sin_table, n, q_heads, k_heads,
                                    hd, rot, backward));
}

const Backend *op_timer_wrap(const Backend *in) {
    inner = in;
    timed = *in;
    timed.linear = linear, timed.linear_backward = linear_backward;
    timed.lora = lora, timed.lora_backward = lora_backward;
    timed.rmsnorm = rmsnorm, timed.rmsnorm_backward = rmsnorm_backward;
    /* the fused norms where the inner backend has them (NULL stays NULL: model/ falls back) */
    if (in->add_rmsnorm) timed.add_rmsnorm = add_rmsnorm;
    if (in->rmsnorm_backward_add) timed.rmsnorm_backward_add = rmsnorm_backward_add;
    if (in->swiglu_backward_act) timed.swiglu_backward_act = swiglu_backward_act;
    timed.rope = rope, timed.rope_backward = rope_backward;
    timed.swiglu = swiglu, timed.swiglu_backward = swiglu_backward;
    timed.attention = attention, timed.attention_backward = attention_backward;
    timed.attention_cached = attention_cached;
    timed.logprob = logprob, timed.logprob_backward = logprob_backward;
    /* the hand-over would bypass the timed logprob pair: off, so every lm_head pass is timed */
    timed.logprob_lse = NULL, timed.logprob_backward_lse = NULL;
    timed.embedding_gather = embedding_gather;
    timed.embedding_scatter_add = embedding_scatter_add;
    timed.rows_gather = rows_gather, timed.rows_scatter_add = rows_scatter_add;
    timed.adamw = adamw, timed.sum_squares = sum_squares;
    /* where the inner backend has none, the loops of backend.c call the timed per-tensor ops */
    timed.adamw_multi = in->adamw_multi ? adamw_multi : NULL;
    timed.sum_squares_multi = in->sum_squares_multi ? sum_squares_multi : NULL;
    timed.rope_qk = in->rope_qk ? rope_qk : NULL;
    return &timed;
}

void op_timer_reset(void) {
    memset(total, 0, sizeof total);
    memset(calls, 0, sizeof calls);
}

void op_timer_print(FILE *f, const char *label) {
    int order[N_TIMED], n = 0;
    for (int i = 0; i < N_TIMED; i++)
        if (calls[i]) order[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort, largest total first */
        for (int j = i; j > 0 && total[order[j]] > total[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    fprintf(f, "{\"bench\": \"op_times\", \"label\": \"%s\"", label);
    for (int i = 0; i < n; i++)
        fprintf(f, ", \"%s\": {\"s\": %.4f, \"calls\": %ld}", op_names[order[i]], total[order[i]],
                calls[order[i]]);
    fprintf(f, "}\n");
}
