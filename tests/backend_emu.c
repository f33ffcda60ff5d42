/* The emulated device backend of tests/backend_emu.h. */
#include "backend_emu.h"

#include "common/error.h"
#include "kernels/cpu/adamw8bit.h"

#include <stdlib.h>
#include <string.h>

const char *const emu_op_names[N_OPS] = {"linear",
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
long emu_op_calls[N_OPS];
int emu_foreign_pointers; /* tensors given to an op that the device does not own */

void emu_own(const void *p, size_t bytes) {
    if (n_ranges < (int)(sizeof ranges / sizeof *ranges))
        ranges[n_ranges++] = (Range){(const char *)p, bytes};
}

void emu_disown(const void *p) {
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
    emu_foreign_pointers++;
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
    emu_op_calls[OP_COPY]++;
    if (dir != BACKEND_HOST_TO_DEVICE) dev(src);
    if (dir != BACKEND_DEVICE_TO_HOST) dev(dst);
    if (bytes) memcpy(dst, src, bytes);
}

static void emu_memset(const Backend *be, void *dst, int value, size_t bytes) {
    (void)be;
    emu_op_calls[OP_MEMSET]++;
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
    emu_op_calls[OP_LINEAR]++;
    dev(out), dev(in), dev(w.f32), dev(w.bf16), dev(bias);
    CPU->linear(CPU, out, in, w, packed, bias, n, in_dim, out_dim);
}

static void emu_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                                const float *dout, const float *in, WeightRef w, int n, int in_dim,
                                int out_dim) {
    (void)be;
    emu_op_calls[OP_LINEAR_BACKWARD]++;
    dev(din), dev(dw), dev(dbias), dev(dout), dev(in), dev(w.f32), dev(w.bf16);
    CPU->linear_backward(CPU, din, dw, dbias, dout, in, w, n, in_dim, out_dim);
}

static void emu_lora(const Backend *be, float *out, const float *in, const float *A, const float *B,
                     int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                     uint64_t dropout_key) {
    (void)be;
    emu_op_calls[OP_LORA]++;
    dev(out), dev(in), dev(A), dev(B);
    CPU->lora(CPU, out, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p, dropout_key);
}

static void emu_lora_backward(const Backend *be, float *din, float *dA, float *dB,
                              const float *dout, const float *in, const float *A, const float *B,
                              int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                              uint64_t dropout_key) {
    (void)be;
    emu_op_calls[OP_LORA_BACKWARD]++;
    dev(din), dev(dA), dev(dB), dev(dout), dev(in), dev(A), dev(B);
    CPU->lora_backward(CPU, din, dA, dB, dout, in, A, B, n, in_dim, out_dim, r, scaling, dropout_p,
                       dropout_key);
}

static void emu_rmsnorm(const Backend *be, float *out, const float *in, const float *w, int n,
                        int c, float eps) {
    (void)be;
    emu_op_calls[OP_RMSNORM]++;
    dev(out), dev(in), dev(w);
    CPU->rmsnorm(CPU, out, in, w, n, c, eps);
}

static void emu_rmsnorm_backward(const Backend *be, float *din, float *dw, const float *dout,
                                 const float *in, const float *w, int n, int c, float eps) {
    (void)be;
    emu_op_calls[OP_RMSNORM_BACKWARD]++;
    dev(din), dev(dw), dev(dout), dev(in), dev(w);
    CPU->rmsnorm_backward(CPU, din, dw, dout, in, w, n, c, eps);
}

static void emu_rope(const Backend *be, float *x, const int32_t *positions, const float *cos_t,
                     const float *sin_t, int n, int heads, int hd, int rot) {
    (void)be;
    emu_op_calls[OP_ROPE]++;
    dev(x), dev(positions), dev(cos_t), dev(sin_t);
    CPU->rope(CPU, x, positions, cos_t, sin_t, n, heads, hd, rot);
}

static void emu_rope_backward(const Backend *be, float *dx, const int32_t *positions,
                              const float *cos_t, const float *sin_t, int n, int heads, int hd,
                              int rot) {
    (void)be;
    emu_op_calls[OP_ROPE_BACKWARD]++;
    dev(dx), dev(positions), dev(cos_t), dev(sin_t);
    CPU->rope_backward(CPU, dx, positions, cos_t, sin_t, n, heads, hd, rot);
}

static void emu_swiglu(const Backend *be, float *out, const float *gate, const float *up,
                       size_t n) {
    (void)be;
    emu_op_calls[OP_SWIGLU]++;
    dev(out), dev(gate), dev(up);
    CPU->swiglu(CPU, out, gate, up, n);
}

static void emu_swiglu_backward(const Backend *be, float *dgate, float *dup, const float *dout,
                                const float *gate, const float *up, size_t n) {
    (void)be;
    emu_op_calls[OP_SWIGLU_BACKWARD]++;
    dev(dgate), dev(dup), dev(dout), dev(gate), dev(up);
    CPU->swiglu_backward(CPU, dgate, dup, dout, gate, up, n);
}

static void emu_add(const Backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
    emu_op_calls[OP_ADD]++;
    dev(out), dev(a), dev(b);
    CPU->add(CPU, out, a, b, n);
}

static void emu_scale(const Backend *be, float *x, float f, size_t n) {
    (void)be;
    emu_op_calls[OP_SCALE]++;
    dev(x);
    CPU->scale(CPU, x, f, n);
}

static void emu_attention(const Backend *be, float *out, const float *q, const float *k,
                          const float *v, const AttnSegment *segs, int n_segs,
                          const int32_t *seq_index, int nh, int nkv, int hd, int window) {
    (void)be;
    emu_op_calls[OP_ATTENTION]++;
    dev(out), dev(q), dev(k), dev(v), dev(segs), dev(seq_index);
    CPU->attention(CPU, out, q, k, v, segs, n_segs, seq_index, nh, nkv, hd, window);
}

static void emu_attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const AttnSegment *segs, int n_segs,
                                   const int32_t *seq_index, int n_rows, int nh, int nkv, int hd,
                                   int window) {
    (void)be;
    emu_op_calls[OP_ATTENTION_BACKWARD]++;
    dev(dq), dev(dk), dev(dv), dev(dout), dev(q), dev(k), dev(v), dev(segs), dev(seq_index);
    CPU->attention_backward(CPU, dq, dk, dv, dout, q, k, v, segs, n_segs, seq_index, n_rows, nh,
                            nkv, hd, window);
}

static void emu_attention_cached(const Backend *be, float *out, const float *q,
                                 const float *k_cache, const float *v_cache, const int32_t *slot,
                                 const int32_t *pos, int n, int max_len, int nh, int nkv, int hd,
                                 int window) {
    (void)be;
    emu_op_calls[OP_ATTENTION_CACHED]++;
    dev(out), dev(q), dev(k_cache), dev(v_cache), dev(slot), dev(pos);
    CPU->attention_cached(CPU, out, q, k_cache, v_cache, slot, pos, n, max_len, nh, nkv, hd,
                          window);
}

static void emu_logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                        const int32_t *target, WeightRef lm_head, int n, int h, int vocab) {
    (void)be;
    emu_op_calls[OP_LOGPROB]++;
    dev(logp), dev(stats), dev(hidden), dev(target), dev(lm_head.f32), dev(lm_head.bf16);
    CPU->logprob(CPU, logp, stats, hidden, target, lm_head, n, h, vocab);
}

static void emu_logprob_backward(const Backend *be, float *dhidden, float *dlm_head,
                                 const float *dlogp, const float *hidden, const int32_t *target,
                                 WeightRef lm_head, int n, int h, int vocab) {
    (void)be;
    emu_op_calls[OP_LOGPROB_BACKWARD]++;
    dev(dhidden), dev(dlm_head), dev(dlogp), dev(hidden), dev(target), dev(lm_head.f32),
        dev(lm_head.bf16);
    CPU->logprob_backward(CPU, dhidden, dlm_head, dlogp, hidden, target, lm_head, n, h, vocab);
}

static void emu_embedding_gather(const Backend *be, float *out, WeightRef table, const int32_t *ids,
                                 int n, int h) {
    (void)be;
    emu_op_calls[OP_EMBEDDING_GATHER]++;
    dev(out), dev(table.f32), dev(table.bf16), dev(ids);
    CPU->embedding_gather(CPU, out, table, ids, n, h);
}

static void emu_embedding_scatter_add(const Backend *be, float *dtable, const float *dx,
                                      const int32_t *ids, int n, int h, int32_t skip_id) {
    (void)be;
    emu_op_calls[OP_EMBEDDING_SCATTER_ADD]++;
    dev(dtable), dev(dx), dev(ids);
    CPU->embedding_scatter_add(CPU, dtable, dx, ids, n, h, skip_id);
}

static void emu_rows_gather(const Backend *be, float *dst, const float *src, const int32_t *idx,
                            int n, int width) {
    (void)be;
    emu_op_calls[OP_ROWS_GATHER]++;
    dev(dst), dev(src), dev(idx);
    CPU->rows_gather(CPU, dst, src, idx, n, width);
}

static void emu_rows_scatter_add(const Backend *be, float *dst, const float *src,
                                 const int32_t *idx, int n, int width) {
    (void)be;
    emu_op_calls[OP_ROWS_SCATTER_ADD]++;
    dev(dst), dev(src), dev(idx);
    CPU->rows_scatter_add(CPU, dst, src, idx, n, width);
}

static void emu_adamw(const Backend *be, float *p, float *m, float *v, const float *g, size_t numel,
                      const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    (void)be;
    emu_op_calls[OP_ADAMW]++;
    dev(p), dev(m), dev(v), dev(g);
    CPU->adamw(CPU, p, m, v, g, numel, c, step_size, inv_bc2_sqrt);
}

static void emu_adamw8bit(const Backend *be, struct Q8Moments *q, const struct Q8Map *m_map,
                          const struct Q8Map *v_map, float *p, const float *g,
                          const AdamWStepCoefs *c) {
    (void)be;
    emu_op_calls[OP_ADAMW8BIT]++;
    dev(p), dev(g), dev(q->code_m), dev(q->code_v), dev(q->absmax_m), dev(q->absmax_v);
    CPU->adamw8bit(CPU, q, m_map, v_map, p, g, c);
}

static double emu_sum_squares(const Backend *be, const float *g, size_t n) {
    (void)be;
    emu_op_calls[OP_SUM_SQUARES]++;
    dev(g);
    return CPU->sum_squares(CPU, g, n);
}

const Backend emu_backend = {
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

int emu_live_ranges(void) {
    return n_ranges;
}
