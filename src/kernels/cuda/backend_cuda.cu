// The CUDA backend's table (backend_cuda.h): each op is the launch of an own kernel
// (cuda_kernels.h) or a product on gemm_ops.h, with the scratch it needs. The same text is the
// device backend under nvcc and the emulated one under cuda-emu; only the GemmLt (cuBLASLt or the
// host reference) and the lm_head chunk width differ, chosen in the constructors at the end.
// Under bf16 autocast (backend_cuda.h invariant 6) the dense ops and attention are the ac_*
// entries of "bf16 autocast" below, the rest the same.
#include "kernels/cuda/backend_cuda.h"

#include "kernels/cuda/attention_mma.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_pool.h"
#include "kernels/cuda/gemm_ops.h"
#include "kernels/cuda/weight_cache.h"
#ifndef RLHF_CUDA_EMU
#include "kernels/cuda/gemm_cublaslt.h"
#endif

extern "C" {
#include "common/error.h"
#include "kernels/cpu/adamw8bit.h" // q8_map_dynamic: the map NF4's absmax codes index
#include "kernels/cpu/nf4.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Rows of one lm_head chunk on the device, and its vocabulary columns: 1024 x 8192 fp32 logits,
// 32 MiB, a GEMM big enough to run at full rate.
#define LM_HEAD_CHUNK_ROWS     1024
#define LM_HEAD_CHUNK_COLS     8192
#define CUDA_EMU_LM_HEAD_CHUNK 96

enum {
    SCRATCH_RSTD,     // rmsnorm_backward's rstd
    SCRATCH_ATTN,     // attention_backward's statistics
    SCRATCH_PARTIALS, // sum_squares' partials and its double
    SCRATCH_LORA_X,   // the dropped input
    SCRATCH_LORA_T,   // x A^T
    SCRATCH_LORA_DT,  // its gradient
    SCRATCH_LORA_DX,  // the dropped input's gradient
    SCRATCH_WIDEN,    // a bf16 weight (or lm_head chunk) widened to fp32, or an NF4 one
    SCRATCH_NF4_MAP,  // the 256 values NF4's absmax codes index, uploaded once
    SCRATCH_LOGITS,   // one lm_head chunk
    SCRATCH_LSE,      // the chunk rows' running log-sum-exp
    // bf16 autocast (invariant 6)
    SCRATCH_AC_W,    // an NF4 weight (or lm_head chunk) dequantised to bf16 for one product
    SCRATCH_AC_X,    // an activation (a linear's input, the lm_head's hidden) in bf16
    SCRATCH_AC_G,    // a linear's incoming gradient, or a part of the lm_head's dlogits, in bf16
    SCRATCH_AC_BIAS, // a bias rounded to bf16 values (fp32, the product's output type)
    SCRATCH_AC_Q,    // attention's q, k, v and dout rounded to bf16 values (fp32)
    SCRATCH_AC_K,
    SCRATCH_AC_V,
    SCRATCH_AC_DOUT,
    // multi-tensor optimizer ops: their tables, kept between calls (invariant 10)
    SCRATCH_SUMSQ_TABLE,
    SCRATCH_ADAMW_TABLE,
    N_SCRATCH
};

typedef struct {
    GemmLt *gemm;
    DevicePool *pool;     // the memory alloc and scratch hand out (device_pool.h)
    WeightCache *weights; // fp32 weights narrowed to bf16 under autocast (invariant 8)
    bool autocast;        // invariant 6
    int chunk_rows, chunk_cols;
    void *scratch[N_SCRATCH];
    size_t scratch_bytes[N_SCRATCH];
    // invariant 10: what a table slot holds, as uploaded (host copy, its bytes, the slot's
    // address then); NULL where nothing was uploaded
    void *uploaded[N_SCRATCH];
    size_t uploaded_bytes[N_SCRATCH];
    void *uploaded_to[N_SCRATCH];
    char error[320]; // invariant 4: the first failure, "" while none
} CudaCtx;

static CudaCtx *ctx_of(const Backend *be) {
    return (CudaCtx *)be->ctx;
}

// Records the first failure (invariant 4); returns whether the backend is still good.
static bool fail(const Backend *be, const char *op, const char *what) {
    CudaCtx *c = ctx_of(be);
    if (!c->error[0]) snprintf(c->error, sizeof c->error, "cuda backend: %s: %s", op, what);
    return false;
}

static bool ok(const Backend *be) {
    return ctx_of(be)->error[0] == 0;
}

// A kernel launch's result: true when it launched.
static bool launched(const Backend *be, const char *op, int rc) {
    return rc == 0 || fail(be, op, cudaGetErrorString((cudaError_t)rc));
}

// A product's result (gemm_ops' err_set message).
static bool multiplied(const Backend *be, const char *op, int rc) {
    return rc == 0 || fail(be, op, err_msg());
}

// A block of the pool for alloc (called between ops, never inside one, so no op holds a copy of
// the weight cache then); where the device cannot serve it, the cache's copies are dropped and
// it is tried once more (weight_cache.h invariant 4).
static void *device_alloc(CudaCtx *c, size_t bytes, const char **why) {
    void *p = device_pool_alloc(c->pool, bytes, why);
    if (!p && weight_cache_drop_all(c->weights) > 0) p = device_pool_alloc(c->pool, bytes, why);
    return p;
}

// At least bytes of scratch slot s (invariant 2), or NULL after recording the failure. A slot
// that grows goes back to the pool (reused in stream order, device_pool.h invariant 3), so the
// pool's high-water marks count scratch too.
static void *scratch(const Backend *be, int s, size_t bytes, const char *op) {
    CudaCtx *c = ctx_of(be);
    if (bytes <= c->scratch_bytes[s] && c->scratch[s]) return c->scratch[s];
    device_pool_free(c->pool, c->scratch[s]);
    c->scratch[s] = NULL, c->scratch_bytes[s] = 0;
    const char *why = "";
    // not device_alloc: an op may hold one of the weight cache's copies while it asks for scratch
    void *p = device_pool_alloc(c->pool, bytes ? bytes : 1, &why);
    if (!p) {
        char msg[160];
        snprintf(msg, sizeof msg, "no %zu bytes of device memory for scratch (%s)", bytes, why);
        fail(be, op, msg);
        return NULL;
    }
    c->scratch[s] = p, c->scratch_bytes[s] = bytes;
    return p;
}

// ---- memory ----

static void *cuda_alloc(const Backend *be, size_t bytes, const char *what) {
    const char *why = "";
    void *p = device_alloc(ctx_of(be), bytes, &why);
    if (!p) err_set("%s: cannot allocate %zu bytes of CUDA device memory (%s)", what, bytes, why);
    return p;
}

static void cuda_free_mem(const Backend *be, void *p) {
    CudaCtx *c = ctx_of(be);
    // the pool hands the block out again: no bf16 copy of what it held may outlive it (invariant 8)
    weight_cache_written(c->weights, p, device_pool_block_bytes(c->pool, p));
    // memory the pool did not hand out (none should reach here) goes straight back
    if (device_pool_free(c->pool, p) != 0) cudaFree(p);
}

static void cuda_copy(const Backend *be, void *dst, const void *src, size_t bytes,
                      BackendCopy dir) {
    if (!bytes) return;
    if (dir != BACKEND_DEVICE_TO_HOST) weight_cache_written(ctx_of(be)->weights, dst, bytes);
    cudaMemcpyKind kind = dir == BACKEND_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                          : dir == BACKEND_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                          : cudaMemcpyDeviceToDevice;
    cudaError_t rc = cudaMemcpy(dst, src, bytes, kind);
    if (rc != cudaSuccess) fail(be, "copy", cudaGetErrorString(rc));
}

// Memory a collective wrote (NCCL, or MPI on cuda-emu): the bf16 copies of weights there go
// (invariant 8), as for a copy; a ZeRO-1 all-gather brings the other ranks' updated slices.
static void cuda_written(const Backend *be, const void *p, size_t bytes) {
    if (bytes) weight_cache_written(ctx_of(be)->weights, p, bytes);
}

static void cuda_memset_mem(const Backend *be, void *dst, int value, size_t bytes) {
    if (!bytes || !ok(be)) return;
    weight_cache_written(ctx_of(be)->weights, dst, bytes);
    cudaError_t rc = cudaMemset(dst, value, bytes);
    if (rc != cudaSuccess) fail(be, "memset", cudaGetErrorString(rc));
}

static void cuda_sync(const Backend *be) {
    cudaError_t rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) fail(be, "sync", cudaGetErrorString(rc));
}

// ---- dense layers ----

// Values first .. first+numel-1 of an NF4 W (QLoRA's base, its arrays in device memory:
// backend_cuda.h invariant 7) dequantised into out32 (fp32) or, when that is NULL, out16 (bf16);
// false after recording a failure.
static bool nf4_dequantized(const Backend *be, const Nf4Weight *q, size_t first, float *out32,
                            uint16_t *out16, size_t numel, const char *op) {
    CudaCtx *c = ctx_of(be);
    bool fresh = !c->scratch[SCRATCH_NF4_MAP];
    float *map = (float *)scratch(be, SCRATCH_NF4_MAP, 256 * sizeof(float), op);
    if (!map) return false;
    if (fresh) {
        Q8Map host;
        q8_map_dynamic(&host, true);
        cudaError_t rc = cudaMemcpy(map, host.value, sizeof host.value, cudaMemcpyHostToDevice);
        if (rc != cudaSuccess) return fail(be, op, cudaGetErrorString(rc));
    }
    if (first + numel > q->numel)
        return fail(be, op, "an NF4 weight smaller than the product's shape");
    return launched(be, op,
                    cuda_nf4_dequantize(out32, out16, q->packed, q->qabsmax, q->absmax2, q->offset,
                                        map, nf4_values, first, numel, NULL));
}

// W as fp32 device memory: itself, or a bf16 W widened (an NF4 one dequantised) into scratch.
static const float *weight_f32(const Backend *be, WeightRef w, size_t numel, const char *op) {
    if (w.f32) return w.f32;
    if (w.nf4) {
        float *wide = (float *)scratch(be, SCRATCH_WIDEN, numel * sizeof(float), op);
        if (!wide || !nf4_dequantized(be, w.nf4, 0, wide, NULL, numel, op)) return NULL;
        return wide;
    }
    float *wide = (float *)scratch(be, SCRATCH_WIDEN, numel * sizeof(float), op);
    if (!wide || !launched(be, op, cuda_bf16_widen(wide, w.bf16, numel, NULL))) return NULL;
    return wide;
}

static void cuda_linear(const Backend *be, float *out, const float *in, WeightRef w,
                        const struct PackedWeight *packed, const float *bias, int n, int in_dim,
                        int out_dim) {
    (void)packed; // only the CPU packs weights (backend.h: any backend accepts NULL)
    if (!ok(be) || n == 0) return;
    const float *wf = weight_f32(be, w, (size_t)out_dim * in_dim, "linear");
    if (!wf) return;
    multiplied(
        be, "linear",
        gemm_linear(ctx_of(be)->gemm, out, in, wf, bias, n, in_dim, out_dim, GEMM_F32, GEMM_F32));
}

// W frozen and narrower (bf16, backend.h): widened as the forward does; dw is then NULL.
static void cuda_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                                 const float *dout, const float *in, WeightRef w, int n, int in_dim,
                                 int out_dim) {
    if (!ok(be) || n == 0) return;
    const float *wf = weight_f32(be, w, (size_t)out_dim * in_dim, "linear_backward");
    if (!wf) return;
    multiplied(be, "linear_backward",
               gemm_linear_backward(ctx_of(be)->gemm, din, dw, dbias, dout, in, wf, n, in_dim,
                                    out_dim, GEMM_F32, GEMM_F32));
}

// The branch's input after dropout: in itself, or the masked copy in scratch.
static const float *dropped(const Backend *be, const float *in, size_t count, float p, uint64_t key,
                            const char *op) {
    if (p <= 0) return in;
    float *x = (float *)scratch(be, SCRATCH_LORA_X, count * sizeof(float), op);
    if (!x || !launched(be, op, cuda_lora_dropout(x, in, count, p, key, 0, NULL))) return NULL;
    return x;
}

static void cuda_lora(const Backend *be, float *out, const float *in, const float *A,
                      const float *B, int n, int in_dim, int out_dim, int r, float scaling,
                      float dropout_p, uint64_t dropout_key) {
    if (!ok(be) || n == 0) return;
    const float *x = dropped(be, in, (size_t)n * in_dim, dropout_p, dropout_key, "lora");
    void *t = scratch(be, SCRATCH_LORA_T, (size_t)n * r * sizeof(float), "lora");
    if (!x || !t) return;
    multiplied(be, "lora",
               gemm_lora(ctx_of(be)->gemm, out, x, A, B, t, n, in_dim, out_dim, r, scaling,
                         GEMM_F32, GEMM_F32));
}

// With dropout the product's dx goes to zeroed scratch and din += mask ⊙ dx (the mask's
// derivative); without, the product accumulates into din itself.
static void cuda_lora_backward(const Backend *be, float *din, float *dA, float *dB,
                               const float *dout, const float *in, const float *A, const float *B,
                               int n, int in_dim, int out_dim, int r, float scaling,
                               float dropout_p, uint64_t dropout_key) {
    const char *op = "lora_backward";
    if (!ok(be) || n == 0) return;
    size_t count = (size_t)n * in_dim;
    const float *x = dropped(be, in, count, dropout_p, dropout_key, op);
    void *t = scratch(be, SCRATCH_LORA_T, (size_t)n * r * sizeof(float), op);
    void *dt = scratch(be, SCRATCH_LORA_DT, (size_t)n * r * sizeof(float), op);
    float *dx = din;
    if (din && dropout_p > 0) {
        dx = (float *)scratch(be, SCRATCH_LORA_DX, count * sizeof(float), op);
        if (dx) cuda_memset_mem(be, dx, 0, count * sizeof(float));
    }
    if (!x || !t || !dt || (din && !dx) || !ok(be)) return;
    if (!multiplied(be, op,
                    gemm_lora_backward(ctx_of(be)->gemm, dx, dA, dB, dout, x, A, B, t, dt, n,
                                       in_dim, out_dim, r, scaling, GEMM_F32, GEMM_F32)))
        return;
    if (dx != din)
        launched(be, op, cuda_lora_dropout(din, dx, count, dropout_p, dropout_key, 1, NULL));
}

// ---- elementwise and per-row ----

static void cuda_rmsnorm_op(const Backend *be, float *out, const float *in, const float *w, int n,
                            int c, float eps) {
    if (ok(be) && n > 0) launched(be, "rmsnorm", cuda_rmsnorm_forward(out, in, w, n, c, eps, NULL));
}

static void cuda_rmsnorm_backward_op(const Backend *be, float *din, float *dw, const float *dout,
                                     const float *in, const float *w, int n, int c, float eps) {
    if (!ok(be) || n == 0) return;
    float *rstd = (float *)scratch(be, SCRATCH_RSTD, (size_t)n * sizeof(float), "rmsnorm_backward");
    if (rstd)
        launched(be, "rmsnorm_backward",
                 cuda_rmsnorm_backward(din, dw, dout, in, w, n, c, eps, rstd, NULL));
}

static void cuda_rope_op(const Backend *be, float *x, const int32_t *positions, const float *cos_t,
                         const float *sin_t, int n, int heads, int hd, int rot) {
    if (ok(be) && n > 0)
        launched(be, "rope",
                 cuda_rope_forward(x, positions, cos_t, sin_t, n, heads, hd, rot, NULL));
}

static void cuda_rope_backward_op(const Backend *be, float *dx, const int32_t *positions,
                                  const float *cos_t, const float *sin_t, int n, int heads, int hd,
                                  int rot) {
    if (ok(be) && n > 0)
        launched(be, "rope_backward",
                 cuda_rope_backward(dx, positions, cos_t, sin_t, n, heads, hd, rot, NULL));
}

static void cuda_rope_qk_op(const Backend *be, float *q, float *k, const int32_t *positions,
                            const float *cos_t, const float *sin_t, int n, int q_heads, int k_heads,
                            int hd, int rot, bool backward) {
    if (ok(be) && n > 0)
        launched(be, backward ? "rope_qk backward" : "rope_qk",
                 cuda_rope_qk(q, k, positions, cos_t, sin_t, n, q_heads, k_heads, hd, rot, backward,
                              NULL));
}

static void cuda_swiglu_op(const Backend *be, float *out, const float *gate, const float *up,
                           size_t n) {
    if (ok(be)) launched(be, "swiglu", cuda_swiglu_forward(out, gate, up, n, NULL));
}

static void cuda_swiglu_backward_op(const Backend *be, float *dgate, float *dup, const float *dout,
                                    const float *gate, const float *up, size_t n) {
    if (ok(be))
        launched(be, "swiglu_backward", cuda_swiglu_backward(dgate, dup, dout, gate, up, n, NULL));
}

static void cuda_add_op(const Backend *be, float *out, const float *a, const float *b, size_t n) {
    if (ok(be)) launched(be, "add", cuda_add(out, a, b, n, NULL));
}

static void cuda_scale_op(const Backend *be, float *x, float f, size_t n) {
    if (ok(be)) launched(be, "scale", cuda_scale(x, f, n, NULL));
}

// ---- attention ----

// A host copy of the segments (backend memory, n_segs small structs) that the caller frees, or
// NULL after recording the failure (n_segs <= 0: NULL, and nothing is wrong).
static AttnSegment *segments_down(const Backend *be, const AttnSegment *segs, int n_segs,
                                  const char *op) {
    if (n_segs <= 0) return NULL;
    AttnSegment *h = (AttnSegment *)malloc((size_t)n_segs * sizeof *h);
    if (!h) {
        fail(be, op, "no host memory for the segments");
        return NULL;
    }
    cuda_copy(be, h, segs, (size_t)n_segs * sizeof *h, BACKEND_DEVICE_TO_HOST);
    if (!ok(be)) free(h), h = NULL;
    return h;
}

// The longest segment's len, which the kernels' grids need on the host.
static bool longest_segment(const Backend *be, const AttnSegment *segs, int n_segs, int *max_len,
                            const char *op) {
    *max_len = 0;
    if (n_segs <= 0) return true;
    AttnSegment *h = segments_down(be, segs, n_segs, op);
    if (!h) return false;
    *max_len = attn_segments_longest(h, n_segs);
    free(h);
    return true;
}

static void cuda_attention_op(const Backend *be, float *out, const float *q, const float *k,
                              const float *v, const AttnSegment *segs, int n_segs,
                              const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                              int window) {
    int max_len;
    if (!ok(be) || !longest_segment(be, segs, n_segs, &max_len, "attention") || max_len == 0)
        return;
    launched(be, "attention",
             cuda_attention_forward(out, q, k, v, segs, n_segs, max_len, seq_index, n_heads,
                                    n_kv_heads, hd, window, NULL));
}

static void cuda_attention_backward_op(const Backend *be, float *dq, float *dk, float *dv,
                                       const float *dout, const float *q, const float *k,
                                       const float *v, const AttnSegment *segs, int n_segs,
                                       const int32_t *seq_index, int n_rows, int n_heads,
                                       int n_kv_heads, int hd, int window) {
    const char *op = "attention_backward";
    int max_len;
    if (!ok(be) || n_rows == 0 || !longest_segment(be, segs, n_segs, &max_len, op)) return;
    float *stats =
        (float *)scratch(be, SCRATCH_ATTN, 2 * (size_t)n_rows * n_heads * sizeof(float), op);
    if (stats)
        launched(be, op,
                 cuda_attention_backward(dq, dk, dv, dout, q, k, v, segs, n_segs, max_len,
                                         seq_index, n_rows, n_heads, n_kv_heads, hd, window, stats,
                                         NULL));
}

static void cuda_attention_cached_op(const Backend *be, float *out, const float *q,
                                     const float *k_cache, const float *v_cache,
                                     const int32_t *slot, const int32_t *pos, int n, int max_len,
                                     int n_heads, int n_kv_heads, int hd, int window) {
    if (ok(be) && n > 0)
        launched(be, "attention_cached",
                 cuda_attention_cached(out, q, k_cache, v_cache, slot, pos, n, max_len, n_heads,
                                       n_kv_heads, hd, window, NULL));
}

static void cuda_kv_cache_write_op(const Backend *be, float *k_cache, float *v_cache,
                                   const float *k, const float *v, const int32_t *slot,
                                   const int32_t *pos, int n, int max_len, int kvd) {
    if (ok(be) && n > 0)
        launched(be, "kv_cache_write",
                 cuda_kv_cache_write(k_cache, v_cache, k, v, slot, pos, n, max_len, kvd, NULL));
}

// ---- lm_head (invariant 3) ----

// The lm_head's products take operands of one type t: fp32 (a bf16 W widened), or under autocast
// bf16 (invariant 6: hidden narrowed once per call, W chunk by chunk unless stored bf16); the
// logits are fp32 either way.
static GemmType lm_head_type(const Backend *be) {
    return ctx_of(be)->autocast ? GEMM_BF16 : GEMM_F32;
}

// Element i of an operand of type t.
static const void *at(const void *x, GemmType t, size_t i) {
    return (const char *)x + i * (t == GEMM_F32 ? sizeof(float) : sizeof(uint16_t));
}

// n values of x in bf16 (scratch slot s), or NULL after recording the failure.
static const uint16_t *narrowed(const Backend *be, int s, const float *x, size_t n,
                                const char *op) {
    uint16_t *x16 = (uint16_t *)scratch(be, s, n * sizeof(uint16_t), op);
    if (!x16 || !launched(be, op, cuda_bf16_narrow(x16, x, n, NULL))) return NULL;
    return x16;
}

// W as bf16 device memory: itself when stored bf16, else the fp32 W's rounding, narrowed once
// per optimizer step (invariant 8).
static const uint16_t *weight_bf16(const Backend *be, WeightRef w, size_t numel, const char *op) {
    if (w.bf16) return w.bf16;
    if (w.nf4) {
        uint16_t *w16 = (uint16_t *)scratch(be, SCRATCH_AC_W, numel * sizeof(uint16_t), op);
        if (!w16 || !nf4_dequantized(be, w.nf4, 0, NULL, w16, numel, op)) return NULL;
        return w16;
    }
    const char *why = "";
    const uint16_t *w16 = weight_cache_bf16(ctx_of(be)->weights, w.f32, numel, &why);
    if (!w16) fail(be, op, why);
    return w16;
}

// The lm_head's hidden states as the products' operand: hidden itself, or its bf16 copy.
static const void *lm_head_hidden(const Backend *be, const float *hidden, size_t n,
                                  const char *op) {
    if (lm_head_type(be) == GEMM_F32) return hidden;
    return narrowed(be, SCRATCH_AC_X, hidden, n, op);
}

// The lm_head's rows c0 .. c0+cols-1 as an operand of lm_head_type.
static const void *chunk_weight(const Backend *be, WeightRef w, int c0, int cols, int h,
                                const char *op) {
    size_t numel = (size_t)cols * h;
    if (w.nf4) { // its rows from value c0 * h on (an offset pointer cannot say that)
        bool f32 = lm_head_type(be) == GEMM_F32;
        void *out = scratch(be, f32 ? SCRATCH_WIDEN : SCRATCH_AC_W,
                            numel * (f32 ? sizeof(float) : sizeof(uint16_t)), op);
        if (!out || !nf4_dequantized(be, w.nf4, (size_t)c0 * h, f32 ? (float *)out : NULL,
                                     f32 ? NULL : (uint16_t *)out, numel, op))
            return NULL;
        return out;
    }
    WeightRef part = {.f32 = w.f32 ? w.f32 + (size_t)c0 * h : NULL,
                      .bf16 = w.bf16 ? w.bf16 + (size_t)c0 * h : NULL,
                      .nf4 = NULL};
    if (lm_head_type(be) == GEMM_F32) return weight_f32(be, part, numel, op);
    return weight_bf16(be, part, numel, op);
}

// Logits of rows .. rows+n-1 x vocabulary columns c0 .. c0+cols-1 into the chunk buffer (ld
// cols): hidden (lm_head_hidden's) times the lm_head's rows c0...
static bool chunk_logits(const Backend *be, float *logits, const void *hidden, WeightRef w,
                         int rows, int c0, int cols, int h, const char *op) {
    const void *wc = chunk_weight(be, w, c0, cols, h, op);
    GemmType t = lm_head_type(be);
    return wc && multiplied(be, op,
                            gemm_lm_head_logits(ctx_of(be)->gemm, logits, cols, hidden, wc, rows,
                                                cols, h, t, GEMM_F32));
}

// st (rows) = the running log-sum-exp of rows of hidden over the whole vocabulary.
static bool rows_logsumexp(const Backend *be, CudaLseRow *st, float *logits, const void *hidden,
                           const int32_t *target, WeightRef w, int rows, int h, int vocab,
                           const char *op) {
    int chunk = ctx_of(be)->chunk_cols;
    if (!launched(be, op, cuda_lse_init(st, rows, NULL))) return false;
    for (int c0 = 0; c0 < vocab; c0 += chunk) {
        int cols = vocab - c0 < chunk ? vocab - c0 : chunk;
        if (!chunk_logits(be, logits, hidden, w, rows, c0, cols, h, op) ||
            !launched(be, op, cuda_lse_chunk(st, logits, cols, rows, cols, c0, target, NULL)))
            return false;
    }
    return true;
}

// The chunk buffers for up to rows rows: logits and the running state, or false.
static bool lm_head_scratch(const Backend *be, int rows, int vocab, float **logits, CudaLseRow **st,
                            const char *op) {
    int cols = vocab < ctx_of(be)->chunk_cols ? vocab : ctx_of(be)->chunk_cols;
    *logits = (float *)scratch(be, SCRATCH_LOGITS, (size_t)rows * cols * sizeof(float), op);
    *st = (CudaLseRow *)scratch(be, SCRATCH_LSE, (size_t)rows * sizeof(CudaLseRow), op);
    return *logits && *st;
}

static void cuda_logprob(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                         const int32_t *target, WeightRef lm_head, int n, int h, int vocab) {
    const char *op = "logprob";
    if (!ok(be) || n == 0) return;
    int block = ctx_of(be)->chunk_rows;
    float *logits;
    CudaLseRow *st;
    if (!lm_head_scratch(be, n < block ? n : block, vocab, &logits, &st, op)) return;
    const void *hid = lm_head_hidden(be, hidden, (size_t)n * h, op);
    if (!hid) return;
    for (int r0 = 0; r0 < n; r0 += block) {
        int rows = n - r0 < block ? n - r0 : block;
        if (!rows_logsumexp(be, st, logits, at(hid, lm_head_type(be), (size_t)r0 * h), target + r0,
                            lm_head, rows, h, vocab, op) ||
            !launched(be, op,
                      cuda_lse_finish(logp + r0, stats ? stats + r0 : NULL, st, rows, vocab, NULL)))
            return;
    }
}

// dlogits (rows, cols, packed) times the chunk's operands, accumulated into dhidden (rows, h) and
// dw (NULL: a frozen lm_head). Under autocast the fp32 dlogits are rounded to bf16 first (one
// cuda_bf16_split part; the remainder left in dlogits is dropped), then one bf16 product summed in
// fp32: the CPU autocast's rule (kernels/cpu/fused_logprob_autocast.c rounding 2: torch's logits
// are bf16, so the gradient reaching its lm_head is bf16; invariant 6). DLOGIT_PARTS 3 would give
// the fp32 dlogits' products to fp32 rounding, the CPU's rule before the lm_head moved to AMX.
#define DLOGIT_PARTS 1
static bool dlogits_products(const Backend *be, float *dhidden, float *dw, float *dlogits,
                             const void *hidden, const void *wc, int rows, int cols, int h,
                             const char *op) {
    GemmLt *g = ctx_of(be)->gemm;
    if (lm_head_type(be) == GEMM_F32)
        return multiplied(be, op,
                          gemm_lm_head_backward(g, dhidden, dw, dlogits, cols, hidden, wc, rows,
                                                cols, h, GEMM_F32, GEMM_F32));
    size_t count = (size_t)rows * cols;
    uint16_t *part = (uint16_t *)scratch(be, SCRATCH_AC_G, count * sizeof(uint16_t), op);
    if (!part) return false;
    for (int p = 0; p < DLOGIT_PARTS; p++)
        if (!launched(be, op, cuda_bf16_split(part, dlogits, count, NULL)) ||
            !multiplied(be, op,
                        gemm_lm_head_backward(g, dhidden, dw, part, cols, hidden, wc, rows, cols, h,
                                              GEMM_BF16, GEMM_F32)))
            return false;
    return true;
}

// Per block of rows: a first pass for the log-sum-exp, then each chunk again, turned into
// dlogits in place and multiplied into dhidden (zeroed first: the chunks add up) and dlm_head.
// Under autocast dhidden is then rounded (the gradient of the bf16 hidden states torch's lm_head
// read).
static void cuda_logprob_backward(const Backend *be, float *dhidden, float *dlm_head,
                                  const float *dlogp, const float *hidden, const int32_t *target,
                                  WeightRef lm_head, int n, int h, int vocab) {
    const char *op = "logprob_backward";
    if (!ok(be) || n == 0) return;
    int block = ctx_of(be)->chunk_rows, chunk = ctx_of(be)->chunk_cols;
    GemmType t = lm_head_type(be);
    float *logits;
    CudaLseRow *st;
    if (!lm_head_scratch(be, n < block ? n : block, vocab, &logits, &st, op)) return;
    const void *hid = lm_head_hidden(be, hidden, (size_t)n * h, op);
    if (!hid) return;
    cuda_memset_mem(be, dhidden, 0, (size_t)n * h * sizeof(float));
    for (int r0 = 0; r0 < n && ok(be); r0 += block) {
        int rows = n - r0 < block ? n - r0 : block;
        const void *hb = at(hid, t, (size_t)r0 * h);
        if (!rows_logsumexp(be, st, logits, hb, target + r0, lm_head, rows, h, vocab, op)) return;
        for (int c0 = 0; c0 < vocab; c0 += chunk) {
            int cols = vocab - c0 < chunk ? vocab - c0 : chunk;
            // the chunk's rows of W as an operand once, for the three products (a frozen bf16
            // lm_head widened under fp32; dlm_head is then NULL)
            const void *wc = chunk_weight(be, lm_head, c0, cols, h, op);
            if (!wc) return;
            if (!multiplied(be, op,
                            gemm_lm_head_logits(ctx_of(be)->gemm, logits, cols, hb, wc, rows, cols,
                                                h, t, GEMM_F32)) ||
                !launched(be, op,
                          cuda_dlogits(logits, cols, st, dlogp + r0, target + r0, rows, cols, c0,
                                       NULL)) ||
                !dlogits_products(be, dhidden + (size_t)r0 * h,
                                  dlm_head ? dlm_head + (size_t)c0 * h : NULL, logits, hb, wc, rows,
                                  cols, h, op))
                return;
        }
    }
    if (t == GEMM_BF16 && ok(be))
        launched(be, op, cuda_bf16_round(dhidden, dhidden, (size_t)n * h, NULL));
}

// ---- gathers and scatters ----

static void cuda_embedding_gather_op(const Backend *be, float *out, WeightRef table,
                                     const int32_t *ids, int n, int h) {
    if (ok(be) && n > 0)
        launched(be, "embedding_gather",
                 cuda_embedding_gather(out, table.f32, table.bf16, ids, n, h, NULL));
}

static void cuda_embedding_scatter_add_op(const Backend *be, float *dtable, const float *dx,
                                          const int32_t *ids, int n, int h, int32_t skip_id) {
    if (ok(be) && n > 0)
        launched(be, "embedding_scatter_add",
                 cuda_embedding_scatter_add(dtable, dx, ids, n, h, skip_id, NULL));
}

static void cuda_rows_gather_op(const Backend *be, float *dst, const float *src, const int32_t *idx,
                                int n, int width) {
    if (ok(be) && n > 0)
        launched(be, "rows_gather", cuda_rows_gather(dst, src, idx, n, width, NULL));
}

static void cuda_rows_scatter_add_op(const Backend *be, float *dst, const float *src,
                                     const int32_t *idx, int n, int width) {
    if (ok(be) && n > 0)
        launched(be, "rows_scatter_add", cuda_rows_scatter_add(dst, src, idx, n, width, NULL));
}

// ---- optimizer ----

static void cuda_adamw_op(const Backend *be, float *p, float *m, float *v, const float *g,
                          size_t numel, const AdamWStepCoefs *c, float step_size,
                          float inv_bc2_sqrt) {
    weight_cache_written(ctx_of(be)->weights, p, numel * sizeof(float)); // invariant 8
    if (ok(be) && numel > 0)
        launched(be, "adamw", cuda_adamw(p, m, v, g, numel, c, step_size, inv_bc2_sqrt, NULL));
}

// NaN once the backend has failed, so that no caller mistakes the value for a norm.
static double cuda_sum_squares_op(const Backend *be, const float *g, size_t n) {
    const char *op = "sum_squares";
    if (!ok(be)) return NAN;
    if (n == 0) return 0.0;
    char *s = (char *)scratch(be, SCRATCH_PARTIALS,
                              sizeof(double) + CUDA_SUM_SQUARES_PARTIALS * sizeof(float), op);
    if (!s ||
        !launched(be, op, cuda_sum_squares((double *)s, g, n, (float *)(s + sizeof(double)), NULL)))
        return NAN;
    double total = NAN;
    cuda_copy(be, &total, s, sizeof total, BACKEND_DEVICE_TO_HOST);
    return ok(be) ? total : NAN;
}

// ---- multi-tensor optimizer ops (backend.h's sum_squares_multi, adamw_multi) ----

// bytes of host table in scratch slot s (invariant 10): copied only where the slot does not
// already hold the same bytes (a run's tables are the same every step, so the copy, a host sync,
// happens once). The device address, or NULL after recording the failure.
static void *table_on_device(const Backend *be, int s, const void *host, size_t bytes,
                             const char *op) {
    CudaCtx *c = ctx_of(be);
    void *d = scratch(be, s, bytes, op);
    if (!d) return NULL;
    if (c->uploaded[s] && c->uploaded_to[s] == d && c->uploaded_bytes[s] == bytes &&
        memcmp(c->uploaded[s], host, bytes) == 0)
        return d;
    void *copy = realloc(c->uploaded[s], bytes);
    if (!copy) {
        free(c->uploaded[s]);
        c->uploaded[s] = NULL;
        fail(be, op, "out of host memory for the tensor table");
        return NULL;
    }
    memcpy(copy, host, bytes);
    c->uploaded[s] = copy, c->uploaded_bytes[s] = bytes, c->uploaded_to[s] = d;
    cuda_copy(be, d, host, bytes, BACKEND_HOST_TO_DEVICE);
    return ok(be) ? d : NULL;
}

// NaN once the backend has failed, as cuda_sum_squares_op.
static double cuda_sum_squares_multi_op(const Backend *be, const GradTensor *tensors, int count) {
    const char *op = "sum_squares_multi";
    if (!ok(be)) return NAN;
    if (count <= 0) return 0.0;
    CudaSumSqTensor *table = (CudaSumSqTensor *)calloc((size_t)count, sizeof *table);
    if (!table) {
        fail(be, op, "out of host memory for the tensor table");
        return NAN;
    }
    for (int t = 0; t < count; t++)
        table[t].g = tensors[t].g, table[t].n = tensors[t].n;
    int partials = cuda_sum_squares_multi_plan(table, count);
    const CudaSumSqTensor *dt = (const CudaSumSqTensor *)table_on_device(
        be, SCRATCH_SUMSQ_TABLE, table, (size_t)count * sizeof *table, op);
    free(table);
    // the total, the tensors' sums (doubles first: aligned), then the partials
    size_t sums_bytes = (1 + (size_t)count) * sizeof(double);
    char *s = dt ? (char *)scratch(be, SCRATCH_PARTIALS,
                                   sums_bytes + (size_t)partials * sizeof(float), op)
                 : NULL;
    if (!s || !launched(be, op,
                        cuda_sum_squares_multi((double *)s, dt, count, partials,
                                               (float *)(s + sums_bytes), (double *)s + 1, NULL)))
        return NAN;
    double total = NAN;
    cuda_copy(be, &total, s, sizeof total, BACKEND_DEVICE_TO_HOST);
    return ok(be) ? total : NAN;
}

static void cuda_adamw_multi_op(const Backend *be, const AdamWTensor *tensors, int count,
                                const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    const char *op = "adamw_multi";
    for (int t = 0; t < count; t++) // invariant 8
        weight_cache_written(ctx_of(be)->weights, tensors[t].p, tensors[t].numel * sizeof(float));
    if (!ok(be) || count <= 0) return;
    CudaAdamWTensor *table = (CudaAdamWTensor *)calloc((size_t)count, sizeof *table);
    if (!table) {
        fail(be, op, "out of host memory for the tensor table");
        return;
    }
    for (int t = 0; t < count; t++)
        table[t].p = tensors[t].p, table[t].m = tensors[t].m, table[t].v = tensors[t].v,
        table[t].g = tensors[t].g, table[t].numel = tensors[t].numel,
        table[t].shrink = tensors[t].shrink;
    size_t chunks = cuda_adamw_multi_plan(table, count);
    const CudaAdamWTensor *dt =
        chunks ? (const CudaAdamWTensor *)table_on_device(be, SCRATCH_ADAMW_TABLE, table,
                                                          (size_t)count * sizeof *table, op)
               : NULL;
    free(table);
    if (dt) launched(be, op, cuda_adamw_multi(dt, count, chunks, c, step_size, inv_bc2_sqrt, NULL));
}

// ---- bf16 autocast (invariant 6): kernels/cpu/backend_autocast.c's rules, on the device ----

// n values of x rounded to bf16 values, fp32 (scratch slot s), or NULL after recording the
// failure.
static const float *rounded(const Backend *be, int s, const float *x, size_t n, const char *op) {
    float *r = (float *)scratch(be, s, n * sizeof(float), op);
    if (!r || !launched(be, op, cuda_bf16_round(r, x, n, NULL))) return NULL;
    return r;
}

// out = bf16(bf16(in) bf16(W)^T + bf16(bias)): one bf16 product summed in fp32, the bias added to
// the fp32 sums by the epilogue, then the output rounded (torch's output is a bf16 tensor).
static void ac_linear(const Backend *be, float *out, const float *in, WeightRef w,
                      const struct PackedWeight *packed, const float *bias, int n, int in_dim,
                      int out_dim) {
    const char *op = "linear";
    (void)packed;
    if (!ok(be) || n == 0) return;
    const uint16_t *x = narrowed(be, SCRATCH_AC_X, in, (size_t)n * in_dim, op);
    const uint16_t *w16 = weight_bf16(be, w, (size_t)out_dim * in_dim, op);
    const float *b = bias ? rounded(be, SCRATCH_AC_BIAS, bias, (size_t)out_dim, op) : NULL;
    if (!x || !w16 || (bias && !b)) return;
    if (multiplied(
            be, op,
            gemm_linear(ctx_of(be)->gemm, out, x, w16, b, n, in_dim, out_dim, GEMM_BF16, GEMM_F32)))
        launched(be, op, cuda_bf16_round(out, out, (size_t)n * out_dim, NULL));
}

// g = bf16(dout); din = bf16(g bf16(W)); dw += g^T bf16(in) in fp32, not rounded; dbias += the
// column sums of g (autocast.h's autocast_linear_backward).
static void ac_linear_backward(const Backend *be, float *din, float *dw, float *dbias,
                               const float *dout, const float *in, WeightRef w, int n, int in_dim,
                               int out_dim) {
    const char *op = "linear_backward";
    if (!ok(be) || n == 0) return;
    const uint16_t *g = narrowed(be, SCRATCH_AC_G, dout, (size_t)n * out_dim, op);
    const uint16_t *w16 = din ? weight_bf16(be, w, (size_t)out_dim * in_dim, op) : NULL;
    const uint16_t *x = dw ? narrowed(be, SCRATCH_AC_X, in, (size_t)n * in_dim, op) : NULL;
    if (!g || (din && !w16) || (dw && !x)) return;
    if (multiplied(be, op,
                   gemm_linear_backward(ctx_of(be)->gemm, din, dw, dbias, g, x, w16, n, in_dim,
                                        out_dim, GEMM_BF16, GEMM_F32)) &&
        din)
        launched(be, op, cuda_bf16_round(din, din, (size_t)n * in_dim, NULL));
}

// x's rows of the segments (width values a row) rounded in place: the rows attention writes.
static bool round_segment_rows(const Backend *be, float *x, const AttnSegment *h, int n_segs,
                               size_t width, const char *op) {
    for (int s = 0; s < n_segs; s++) {
        float *rows = x + (size_t)h[s].start * width;
        if (!launched(be, op, cuda_bf16_round(rows, rows, (size_t)h[s].len * width, NULL)))
            return false;
    }
    return true;
}

// The tensor-core attention (attention_mma.h) on q, k, v rounded to bf16 values, the output
// rounded; the softmax statistics stay fp32, the probabilities enter P V as bf16 (as torch's bf16
// SDPA; backend_autocast.c rule 3 keeps them fp32 on the CPU: the tests bound the difference).
static void ac_attention(const Backend *be, float *out, const float *q, const float *k,
                         const float *v, const AttnSegment *segs, int n_segs,
                         const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                         int window) {
    const char *op = "attention";
    if (!ok(be) || n_segs <= 0) return;
    AttnSegment *h = segments_down(be, segs, n_segs, op);
    if (!h) return;
    int max_len = attn_segments_longest(h, n_segs);
    size_t rows = (size_t)attn_segments_rows(h, n_segs), qw = (size_t)n_heads * hd,
           kw = (size_t)n_kv_heads * hd;
    const float *qr = rounded(be, SCRATCH_AC_Q, q, rows * qw, op);
    const float *kr = rounded(be, SCRATCH_AC_K, k, rows * kw, op);
    const float *vr = rounded(be, SCRATCH_AC_V, v, rows * kw, op);
    if (qr && kr && vr && max_len > 0 &&
        launched(be, op,
                 cuda_attention_mma_forward(out, qr, kr, vr, segs, n_segs, max_len, seq_index,
                                            n_heads, n_kv_heads, hd, window, NULL)))
        round_segment_rows(be, out, h, n_segs, qw, op);
    free(h);
}

// Its backward: dout rounded on the segments' rows (zero elsewhere: never read, but defined),
// q, k, v rounded; dq rounded on the segments' rows, dk and dv on every row.
static void ac_attention_backward(const Backend *be, float *dq, float *dk, float *dv,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                                  int n_rows, int n_heads, int n_kv_heads, int hd, int window) {
    const char *op = "attention_backward";
    if (!ok(be) || n_rows == 0) return;
    AttnSegment *h = segments_down(be, segs, n_segs, op);
    if (n_segs > 0 && !h) return;
    int max_len = attn_segments_longest(h, n_segs);
    size_t rows = (size_t)n_rows, qw = (size_t)n_heads * hd, kw = (size_t)n_kv_heads * hd;
    const float *qr = rounded(be, SCRATCH_AC_Q, q, rows * qw, op);
    const float *kr = rounded(be, SCRATCH_AC_K, k, rows * kw, op);
    const float *vr = rounded(be, SCRATCH_AC_V, v, rows * kw, op);
    float *g = (float *)scratch(be, SCRATCH_AC_DOUT, rows * qw * sizeof(float), op);
    float *stats = (float *)scratch(be, SCRATCH_ATTN, 2 * rows * n_heads * sizeof(float), op);
    bool good = qr && kr && vr && g && stats;
    if (good) cuda_memset_mem(be, g, 0, rows * qw * sizeof(float));
    for (int s = 0; good && s < n_segs; s++) {
        size_t from = (size_t)h[s].start * qw;
        good =
            launched(be, op, cuda_bf16_round(g + from, dout + from, (size_t)h[s].len * qw, NULL));
    }
    if (good && ok(be) &&
        launched(be, op,
                 cuda_attention_mma_backward(dq, dk, dv, g, qr, kr, vr, segs, n_segs, max_len,
                                             seq_index, n_rows, n_heads, n_kv_heads, hd, window,
                                             stats, NULL)) &&
        round_segment_rows(be, dq, h, n_segs, qw, op) &&
        launched(be, op, cuda_bf16_round(dk, dk, rows * kw, NULL)))
        launched(be, op, cuda_bf16_round(dv, dv, rows * kw, NULL));
    free(h);
}

// ---- construction ----

// A backend named name over gemm (owned from here on), under bf16 autocast or not (invariant 6),
// or NULL when out of memory.
static Backend *backend_make(const char *name, GemmLt *gemm, bool autocast, int chunk_rows,
                             int chunk_cols) {
    Backend *be = (Backend *)calloc(1, sizeof *be);
    CudaCtx *c = (CudaCtx *)calloc(1, sizeof *c);
    DevicePool *pool = device_pool_new();
    WeightCache *weights = pool ? weight_cache_new(pool) : NULL;
    if (!be || !c || !pool || !weights) {
        weight_cache_free(weights);
        free(be), free(c), device_pool_free_all(pool), gemm_lt_free(gemm);
        err_set("cuda backend: out of host memory");
        return NULL;
    }
    c->gemm = gemm, c->pool = pool, c->weights = weights, c->autocast = autocast,
    c->chunk_rows = chunk_rows, c->chunk_cols = chunk_cols;
    be->name = name;
    be->host_memory = false;
    be->ctx = c;
    be->alloc = cuda_alloc;
    be->free = cuda_free_mem;
    be->copy = cuda_copy;
    be->memset = cuda_memset_mem;
    be->written = cuda_written;
    be->sync = cuda_sync;
    be->linear = cuda_linear;
    be->linear_backward = cuda_linear_backward;
    be->lora = cuda_lora;
    be->lora_backward = cuda_lora_backward;
    be->rmsnorm = cuda_rmsnorm_op;
    be->rmsnorm_backward = cuda_rmsnorm_backward_op;
    be->rope = cuda_rope_op;
    be->rope_backward = cuda_rope_backward_op;
    be->swiglu = cuda_swiglu_op;
    be->swiglu_backward = cuda_swiglu_backward_op;
    be->add = cuda_add_op;
    be->scale = cuda_scale_op;
    be->attention = cuda_attention_op;
    be->attention_backward = cuda_attention_backward_op;
    be->attention_cached = cuda_attention_cached_op;
    be->kv_cache_write = cuda_kv_cache_write_op;
    be->logprob = cuda_logprob;
    be->logprob_backward = cuda_logprob_backward;
    be->embedding_gather = cuda_embedding_gather_op;
    be->embedding_scatter_add = cuda_embedding_scatter_add_op;
    be->rows_gather = cuda_rows_gather_op;
    be->rows_scatter_add = cuda_rows_scatter_add_op;
    be->adamw = cuda_adamw_op;
    be->adamw8bit = NULL; // invariant 5
    be->sum_squares = cuda_sum_squares_op;
    be->sum_squares_multi = cuda_sum_squares_multi_op;
    be->adamw_multi = cuda_adamw_multi_op;
    be->rope_qk = cuda_rope_qk_op;
    if (autocast) { // logprob and logprob_backward branch on c->autocast themselves
        be->linear = ac_linear;
        be->linear_backward = ac_linear_backward;
        be->attention = ac_attention;
        be->attention_backward = ac_attention_backward;
    }
    return be;
}

extern "C" void backend_cuda_free(Backend *be) {
    if (!be) return;
    CudaCtx *c = ctx_of(be);
    weight_cache_free(c->weights);
    for (int s = 0; s < N_SCRATCH; s++)
        free(c->uploaded[s]);
    device_pool_free_all(c->pool); // the scratch slots are its blocks
    gemm_lt_free(c->gemm);
    free(c);
    free(be);
}

extern "C" void backend_cuda_memory(const Backend *be, BackendCudaMemory *out) {
    const CudaCtx *c = ctx_of(be);
    BackendCudaMemory m = {};
    m.in_use = device_pool_live_bytes(c->pool);
    m.reserved = m.in_use + device_pool_cached_bytes(c->pool);
    m.peak_in_use = device_pool_peak_live_bytes(c->pool);
    m.peak_reserved = device_pool_peak_reserved_bytes(c->pool);
    m.weight_cache = weight_cache_bytes(c->weights);
    m.weight_narrowings = weight_cache_misses(c->weights);
    m.weight_reuses = weight_cache_hits(c->weights);
    *out = m;
}

extern "C" int backend_cuda_status(const Backend *be) {
    cuda_sync(be);
    return ok(be) ? 0 : err_set("%s", ctx_of(be)->error);
}

#ifdef RLHF_CUDA_EMU
static Backend *emu_new(bool autocast) {
    return backend_make(autocast ? "cuda-emu-bf16-autocast" : "cuda-emu", gemm_lt_reference_new(),
                        autocast, LM_HEAD_CHUNK_ROWS, CUDA_EMU_LM_HEAD_CHUNK);
}

extern "C" Backend *backend_cuda_emu_new(void) {
    return emu_new(false);
}

extern "C" Backend *backend_cuda_emu_autocast_new(void) {
    return emu_new(true);
}
#else
static Backend *device_new(bool autocast) {
    int devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0) {
        err_set("cuda backend: no CUDA device (%s)",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount found none");
        return NULL;
    }
    char why[256];
    GemmLt *gemm = gemm_lt_cublaslt_new(NULL, 0, why, sizeof why);
    if (!gemm) {
        err_set("cuda backend: %s", why);
        return NULL;
    }
    return backend_make(autocast ? "cuda-bf16-autocast" : "cuda", gemm, autocast,
                        LM_HEAD_CHUNK_ROWS, LM_HEAD_CHUNK_COLS);
}

extern "C" Backend *backend_cuda_new(void) {
    return device_new(false);
}

extern "C" Backend *backend_cuda_autocast_new(void) {
    return device_new(true);
}
#endif
