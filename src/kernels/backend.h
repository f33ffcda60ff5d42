/* The backend seam: one table of function pointers for everything the model (src/model/) and the
 * optimizer (src/train/optimizer.c) compute, plus the memory they compute in, in the spirit of
 * ggml's ggml_backend_i. kernels/cpu is one implementation (backend_cpu); a device backend
 * (CUDA) fills the same table, and model/ then runs unchanged on it.
 *
 * Contract common to every op:
 *  1. Memory. Every float, uint16 and int32 tensor argument of an op is backend memory: a pointer
 *     that be->alloc returned (or an offset into one), or memory of the model's weights that the
 *     backend was given. Host code reads or writes backend memory only through be->copy. Where
 *     be->host_memory is true (the CPU), backend memory is ordinary host memory and host pointers
 *     may be passed directly; backend_mirror relies on this and no other code should.
 *  2. Host arguments. Scalars, shapes, and the small structs passed by value or marked "host"
 *     (PackedWeight, Q8Map) live in host memory.
 *  3. Layouts. Row-major, C order, rows contiguous unless a stride is given. N is the number of
 *     token rows; H hidden, I intermediate, nh / nkv query / key-value heads, hd head dim,
 *     qd = nh*hd, kvd = nkv*hd, V vocabulary. A weight matrix is (out_dim, in_dim) as
 *     torch.nn.Linear.weight, fp32 or (frozen) bf16 (WeightRef).
 *  4. Results. Outputs named "written" are overwritten in full; "accumulated" (+=) ones are added
 *     to, so a caller zeroes them first when it wants the bare value. Aliasing is allowed only
 *     where an op says so; otherwise outputs overlap no input.
 *  5. Order. Ops run in the order they are called (one stream); an op may return before its work
 *     is done only on a backend whose host_memory is false, and be->copy to the host and
 *     be->sync wait for all work before them. Every sum runs in an order fixed by the shapes (and
 *     the thread count), so two runs of the same op give the same bits.
 *  6. Errors. Only alloc can fail (NULL with err_set naming `what`); every other op takes
 *     arguments its caller has checked. */
#ifndef RLHF_KERNELS_BACKEND_H
#define RLHF_KERNELS_BACKEND_H

#include "kernels/tensor_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Backend Backend;
struct Q8Map;        /* kernels/cpu/adamw8bit.h */
struct Q8Moments;    /* kernels/cpu/adamw8bit.h */
struct PackedWeight; /* kernels/cpu/kernels.h: a CPU backend's prepacked weight */

/* One tensor of the multi-tensor optimizer ops (below): n values at g, backend memory. */
typedef struct {
    const float *g;
    size_t n;
} GradTensor;

/* One tensor of adamw_multi: p, m, v updated in place from g, numel values each (backend
 * memory); shrink is this tensor's AdamWStepCoefs.shrink (1 - lr*wd, or 1 without decay). */
typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t numel;
    float shrink;
} AdamWTensor;

typedef enum {
    BACKEND_HOST_TO_DEVICE,
    BACKEND_DEVICE_TO_HOST,
    BACKEND_DEVICE_TO_DEVICE,
} BackendCopy;

struct Backend {
    const char *name; /* "cpu", ... */
    bool host_memory; /* backend memory is host memory (rule 1) */
    void *ctx;        /* the implementation's own state */

    /* ---- memory ---- */
    /* bytes of backend memory (any alignment the ops need), or NULL with an error naming what. */
    void *(*alloc)(const Backend *be, size_t bytes, const char *what);
    /* Releases what alloc returned; NULL is ignored. */
    void (*free)(const Backend *be, void *p);
    /* bytes from src to dst in the direction given; the regions do not overlap. A copy to the
     * host returns when the bytes are there. */
    void (*copy)(const Backend *be, void *dst, const void *src, size_t bytes, BackendCopy dir);
    /* Sets bytes of backend memory to the byte value. */
    void (*memset)(const Backend *be, void *dst, int value, size_t bytes);
    /* Told that bytes at p of backend memory were written by something other than this table (a
     * collective of dist_device.h on several ranks): whatever the backend keeps derived from
     * them (bf16 copies of weights) is dropped, as a copy or memset over them would drop it.
     * NULL where the backend keeps nothing that could go stale. */
    void (*written)(const Backend *be, const void *p, size_t bytes);
    /* Waits for every op called before it. */
    void (*sync)(const Backend *be);

    /* ---- dense layers ---- */
    /* out (N, out_dim) written = in (N, in_dim) · W^T (+ bias (out_dim) when not NULL).
     * packed: the backend's prepacked copy of the same W (host struct) or NULL; the backend
     * chooses whether it pays for N rows. Any backend must accept NULL; only the backend that
     * made a packed weight may be given it. */
    void (*linear)(const Backend *be, float *out, const float *in, WeightRef w,
                   const struct PackedWeight *packed, const float *bias, int n, int in_dim,
                   int out_dim);
    /* Its backward: din (N, in_dim) written = dout · W; dw (out_dim, in_dim) accumulated +=
     * dout^T · in; dbias (out_dim) accumulated += column sums of dout. Any of din, dw, dbias may
     * be NULL; dw only with W in fp32 (a frozen W stored narrower, bf16 or NF4, has no
     * gradient: din flows through it in fp32 arithmetic to an adapter). */
    void (*linear_backward)(const Backend *be, float *din, float *dw, float *dbias,
                            const float *dout, const float *in, WeightRef w, int n, int in_dim,
                            int out_dim);
    /* LoRA's term, accumulated: out (N, out_dim) += scaling * (drop(in) A^T) B^T, A (r, in_dim),
     * B (out_dim, r); drop() is inverted dropout with probability dropout_p whose mask is a pure
     * function of (dropout_key, element index) (0: none). */
    void (*lora)(const Backend *be, float *out, const float *in, const float *A, const float *B,
                 int n, int in_dim, int out_dim, int r, float scaling, float dropout_p,
                 uint64_t dropout_key);
    /* Its backward: din (N, in_dim) accumulated += the branch's input gradient; dA (r, in_dim),
     * dB (out_dim, r) accumulated (each may be NULL). The mask is regenerated from the key. */
    void (*lora_backward)(const Backend *be, float *din, float *dA, float *dB, const float *dout,
                          const float *in, const float *A, const float *B, int n, int in_dim,
                          int out_dim, int r, float scaling, float dropout_p, uint64_t dropout_key);

    /* ---- elementwise and per-row ---- */
    /* out (N, C) written = w ⊙ in / sqrt(mean(in²) + eps) per row, w (C); out may be in. */
    void (*rmsnorm)(const Backend *be, float *out, const float *in, const float *w, int n, int c,
                    float eps);
    /* din (N, C) written (may alias dout); dw (C) accumulated (may be NULL). */
    void (*rmsnorm_backward)(const Backend *be, float *din, float *dw, const float *dout,
                             const float *in, const float *w, int n, int c, float eps);
    /* In place on x (N, heads, hd): rotate_half RoPE over the first `rot` dims of each head (even,
     * <= hd; the rest pass unchanged: partial rotary). Row r uses row positions[r] (int32, N) of
     * the (max_pos, rot/2) cos/sin tables, or row r itself when positions is NULL. */
    void (*rope)(const Backend *be, float *x, const int32_t *positions, const float *cos_table,
                 const float *sin_table, int n, int heads, int hd, int rot);
    /* In place: the gradient of rope's output into the gradient of its input. */
    void (*rope_backward)(const Backend *be, float *dx, const int32_t *positions,
                          const float *cos_table, const float *sin_table, int n, int heads, int hd,
                          int rot);
    /* out (n) written = silu(gate) ⊙ up; out may alias gate. */
    void (*swiglu)(const Backend *be, float *out, const float *gate, const float *up, size_t n);
    /* dgate, dup (n) written from dout and the forward inputs; dgate may alias dout. */
    void (*swiglu_backward)(const Backend *be, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n);
    /* out (n) written = a + b; out may alias a or b. */
    void (*add)(const Backend *be, float *out, const float *a, const float *b, size_t n);
    /* x (n) *= f, in place. */
    void (*scale)(const Backend *be, float *x, float f, size_t n);

    /* ---- attention ---- */
    /* Causal self-attention over segments (tensor_types.h AttnSegment, n_segs of them, backend
     * memory). q, out (N, nh, hd), k, v (N, nkv, hd); query head h reads kv head h/(nh/nkv);
     * window > 0: only keys whose seq_index (int32, N) is > the query's - window. Scale
     * 1/sqrt(hd), softmax in fp32. out written for the segments' rows only. */
    void (*attention)(const Backend *be, float *out, const float *q, const float *k, const float *v,
                      const AttnSegment *segs, int n_segs, const int32_t *seq_index, int n_heads,
                      int n_kv_heads, int hd, int window);
    /* Its gradients over n_rows rows: dq written for the segments' rows, dk, dv (N, nkv, hd)
     * written for every row (zero where no query looks). */
    void (*attention_backward)(const Backend *be, float *dq, float *dk, float *dv,
                               const float *dout, const float *q, const float *k, const float *v,
                               const AttnSegment *segs, int n_segs, const int32_t *seq_index,
                               int n_rows, int n_heads, int n_kv_heads, int hd, int window);
    /* Decoding over a KV cache: k_cache, v_cache hold one layer's (slots, max_len, nkv*hd) rows
     * (written for this call's rows before the call). Query row r (q, out (N, nh, hd)) attends to
     * positions [max(0, pos[r] - window + 1) (window > 0) or 0, pos[r]] of slot slot[r] (int32
     * N each). out written; the same values attention would give those rows. */
    void (*attention_cached)(const Backend *be, float *out, const float *q, const float *k_cache,
                             const float *v_cache, const int32_t *slot, const int32_t *pos, int n,
                             int max_len, int n_heads, int n_kv_heads, int hd, int window);

    /* ---- lm_head ---- */
    /* Fused lm_head + log-softmax + gather, tiled so that no (N, V) logits exist: logp (N)
     * written = logits[target[r]] - logsumexp(logits) with logits = hidden[r] (N, h) · W^T,
     * W (V, h); stats (N LogitStats, may be NULL) written. */
    void (*logprob)(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                    const int32_t *target, WeightRef lm_head, int n, int h, int vocab);
    /* Gradient of Σ dlogp[r] logp[r]: dhidden (N, h) written, dlm_head (V, h) accumulated (may
     * be NULL, and must be with a frozen bf16 W). */
    void (*logprob_backward)(const Backend *be, float *dhidden, float *dlm_head, const float *dlogp,
                             const float *hidden, const int32_t *target, WeightRef lm_head, int n,
                             int h, int vocab);

    /* ---- gathers and scatters ---- */
    /* out (N, h) written: row r = table row ids[r] (int32 N, in [0, V)), widened from bf16. */
    void (*embedding_gather)(const Backend *be, float *out, WeightRef table, const int32_t *ids,
                             int n, int h);
    /* dtable row ids[r] accumulated += dx row r, r ascending, rows with id skip_id left out
     * (nn.Embedding's padding_idx; -1: none). */
    void (*embedding_scatter_add)(const Backend *be, float *dtable, const float *dx,
                                  const int32_t *ids, int n, int h, int32_t skip_id);
    /* dst (N, width) written: row j = src row idx[j] (int32). */
    void (*rows_gather)(const Backend *be, float *dst, const float *src, const int32_t *idx, int n,
                        int width);
    /* dst row idx[j] accumulated += src row j, j ascending (repeated rows sum in that order). */
    void (*rows_scatter_add)(const Backend *be, float *dst, const float *src, const int32_t *idx,
                             int n, int width);

    /* ---- optimizer ---- */
    /* One torch AdamW step on numel values, p, m, v updated in place (see optimizer.h):
     * p *= c->shrink; m += (1-b1)(g-m); v = b2 v + (1-b2) g²;
     * p -= step_size * m / (sqrt(v) * inv_bc2_sqrt + eps). */
    void (*adamw)(const Backend *be, float *p, float *m, float *v, const float *g, size_t numel,
                  const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);
    /* bitsandbytes' 8-bit AdamW step on p (q->numel values): the codes and absmax of q are
     * backend memory, the maps (host structs) are bitsandbytes' signed and unsigned ones. */
    void (*adamw8bit)(const Backend *be, struct Q8Moments *q, const struct Q8Map *m_map,
                      const struct Q8Map *v_map, float *p, const float *g, const AdamWStepCoefs *c);
    /* Σ g[i]² over n values, in double (the square of clip_grad_norm_'s norm, one span). */
    double (*sum_squares)(const Backend *be, const float *g, size_t n);

    /* ---- Gemma 2 (model_check_backend refuses the family where any is NULL) ---- */
    /* rmsnorm and its backward with the gain (1 + w), 1 + w in fp32 (Gemma's RMSNorm); dw is the
     * gradient of w (the same as of 1 + w). Aliasing as rmsnorm's. */
    void (*rmsnorm_1p)(const Backend *be, float *out, const float *in, const float *w, int n, int c,
                       float eps);
    void (*rmsnorm_1p_backward)(const Backend *be, float *din, float *dw, const float *dout,
                                const float *in, const float *w, int n, int c, float eps);
    /* swiglu and its backward with torch's gelu(approximate="tanh") for silu. */
    void (*geglu_tanh)(const Backend *be, float *out, const float *gate, const float *up, size_t n);
    void (*geglu_tanh_backward)(const Backend *be, float *dgate, float *dup, const float *dout,
                                const float *gate, const float *up, size_t n);
    /* attention, attention_backward and attention_cached with the scores as sc says (a scale of
     * the model's own, soft-capping) instead of 1/sqrt(hd). */
    void (*attention_scored)(const Backend *be, float *out, const float *q, const float *k,
                             const float *v, const AttnSegment *segs, int n_segs,
                             const int32_t *seq_index, int n_heads, int n_kv_heads, int hd,
                             int window, AttnScores sc);
    void (*attention_scored_backward)(const Backend *be, float *dq, float *dk, float *dv,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const AttnSegment *segs, int n_segs,
                                      const int32_t *seq_index, int n_rows, int n_heads,
                                      int n_kv_heads, int hd, int window, AttnScores sc);
    void (*attention_cached_scored)(const Backend *be, float *out, const float *q,
                                    const float *k_cache, const float *v_cache, const int32_t *slot,
                                    const int32_t *pos, int n, int max_len, int n_heads,
                                    int n_kv_heads, int hd, int window, AttnScores sc);
    /* logprob and logprob_backward with the logits finished by cap (soft cap, then post_scale)
     * before the log-softmax; the stats are the finished logits'. */
    void (*logprob_capped)(const Backend *be, float *logp, LogitStats *stats, const float *hidden,
                           const int32_t *target, WeightRef lm_head, int n, int h, int vocab,
                           LogitCap cap);
    void (*logprob_capped_backward)(const Backend *be, float *dhidden, float *dlm_head,
                                    const float *dlogp, const float *hidden, const int32_t *target,
                                    WeightRef lm_head, int n, int h, int vocab, LogitCap cap);
    /* x (n) = softcap * tanh(x / softcap), in place (logits for sampling). */
    void (*softcap)(const Backend *be, float *x, size_t n, float softcap);

    /* ---- decoding (optional: NULL where be->copy per row is as good, the CPU) ---- */
    /* One layer's KV-cache append: k_cache, v_cache (slots, max_len, kvd); row r of k and v
     * (N, kvd) written at position pos[r] of slot slot[r] (int32 N each, backend memory); the
     * (slot, pos) pairs are distinct. Other rows untouched. */
    void (*kv_cache_write)(const Backend *be, float *k_cache, float *v_cache, const float *k,
                           const float *v, const int32_t *slot, const int32_t *pos, int n,
                           int max_len, int kvd);
    /* attention_cached_scored where row r's positions below prefix_len[r] are read from slot
     * prefix_slot[r] instead of slot[r] (host int32 N each): a prompt prefilled once is read in
     * place by the completions that share it (model/kv_cache.h invariant 7). The bits of
     * attention_cached_scored with those rows copied into slot[r]. NULL: the backend has none,
     * and the cache copies shared prompts into each slot instead. */
    void (*attention_cached_prefixed)(const Backend *be, float *out, const float *q,
                                      const float *k_cache, const float *v_cache,
                                      const int32_t *slot, const int32_t *pos,
                                      const int32_t *prefix_slot, const int32_t *prefix_len, int n,
                                      int max_len, int n_heads, int n_kv_heads, int hd, int window,
                                      AttnScores sc);

    /* ---- the lm_head's log-sum-exp handed over (optional: NULL where not offered; a backend
     * offers both or neither, and one that derives from another's table must reset both when it
     * replaces logprob) ---- */
    /* logprob that also writes lse (N floats, backend memory): each row's log-sum-exp, exactly
     * as logprob_backward_lse wants it. */
    void (*logprob_lse)(const Backend *be, float *logp, LogitStats *stats, float *lse,
                        const float *hidden, const int32_t *target, WeightRef lm_head, int n, int h,
                        int vocab);
    /* logprob_backward given the lse that logprob_lse wrote for the same hidden rows, targets
     * and lm_head: one pass over the lm_head fewer (it need not recompute the log-sum-exp). */
    void (*logprob_backward_lse)(const Backend *be, float *dhidden, float *dlm_head,
                                 const float *dlogp, const float *lse, const float *hidden,
                                 const int32_t *target, WeightRef lm_head, int n, int h, int vocab);

    /* ---- linears of one input (optional: NULL where the backend has no faster way than one
     * linear / linear_backward per product; call them through backend_linears, and test
     * linear_weight_grads for NULL before splitting a backward into din and weight parts) ---- */
    /* parts[i].out written = in (N, in_dim) · W_i^T (+ bias_i) for i < count, each with the bits
     * linear (packed NULL) gives it alone; the backend may share work on `in` between them (the
     * CPU packs it once). */
    void (*linears)(const Backend *be, const LinearPart *parts, int count, const float *in, int n,
                    int in_dim);
    /* For i < count: parts[i].dw += dout_i^T · in, parts[i].dbias += column sums of dout_i, with
     * the bits linear_backward's dw and dbias get (din NULL there). */
    void (*linear_weight_grads)(const Backend *be, const LinearGradPart *parts, int count,
                                const float *in, int n, int in_dim);
    /* The whole backward of linears of one input without adapters: din (N, in_dim) written =
     * Σ_i dout_i · W_i as linear_backward's din gives each (into din for i = 0, into tmp, an
     * (N, in_dim) scratch, then add(din, din, tmp) for each i > 0), then linear_weight_grads
     * over the parts: the bits of those calls. The backend may share work on each dout_i between
     * its two products (the CPU's autocast packs it once). */
    void (*linears_backward)(const Backend *be, const LinearGradPart *parts, int count,
                             const float *in, float *din, float *tmp, int n, int in_dim);

    /* ---- multi-tensor optimizer ops (optional: NULL where one call per tensor is as good, the
     * CPU; call them through backend_sum_squares_multi and backend_adamw_multi, which loop
     * sum_squares / adamw then). A device backend does all tensors in a few launches and, for
     * the sum, one read back to the host, where one op per tensor costs a launch (and a host
     * read) for each of a model's few hundred tensors. ---- */
    /* Σ over t < count of sum_squares(tensors[t].g, tensors[t].n), each tensor's sum the bits
     * sum_squares gives it alone, added in double in ascending t from 0.0: the bits of the
     * host loop backend_sum_squares_multi runs where this is NULL. tensors: host array. */
    double (*sum_squares_multi)(const Backend *be, const GradTensor *tensors, int count);
    /* For t < count, adamw on tensor t with c->shrink replaced by tensors[t].shrink: the bits
     * those count adamw calls give. The tensors overlap nowhere. tensors: host array. */
    void (*adamw_multi)(const Backend *be, const AdamWTensor *tensors, int count,
                        const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);
    /* rope (backward: rope_backward) on q (N, q_heads, hd) and on k (N, k_heads, hd), the bits
     * of the two calls; one launch instead of two on a device (call it through
     * backend_rope_qk, which makes the two calls where this is NULL). */
    void (*rope_qk)(const Backend *be, float *q, float *k, const int32_t *positions,
                    const float *cos_table, const float *sin_table, int n, int q_heads, int k_heads,
                    int hd, int rot, bool backward);

    /* ---- residual adds fused with the RMSNorm beside them (optional: NULL where the backend has
     * none; model_add_rmsnorm and model_rmsnorm_backward_add then call add and rmsnorm, or
     * rmsnorm_backward and add, which give the same bits) ---- */
    /* sum (N, C) written = a + b, as add (sum may alias a or b); out (N, C) written = rmsnorm of
     * sum with w and eps, as rmsnorm; out overlaps none of sum, a, b. */
    void (*add_rmsnorm)(const Backend *be, float *sum, float *out, const float *a, const float *b,
                        const float *w, int n, int c, float eps);
    /* dres (N, C) accumulated += the din rmsnorm_backward would write, element for element as add
     * would add it; dw (C) accumulated as rmsnorm_backward's (may be NULL). dres overlaps
     * neither dout nor in. */
    void (*rmsnorm_backward_add)(const Backend *be, float *dres, float *dw, const float *dout,
                                 const float *in, const float *w, int n, int c, float eps);

    /* ---- SwiGLU's backward regenerating its forward (optional: NULL where not offered; model/
     * then regenerates act with swiglu before the down projection's backward) ---- */
    /* swiglu_backward, and act (n) written = swiglu's out of the same gate and up, with the bits
     * of those two ops; dgate may alias dout, act overlaps none of the others. */
    void (*swiglu_backward_act)(const Backend *be, float *act, float *dgate, float *dup,
                                const float *dout, const float *gate, const float *up, size_t n);
};

/* The CPU backend: kernels/cpu, OpenMP and BLAS, memory from malloc. Always available. */
const Backend *backend_cpu(void);

/* The CPU backend under bf16 autocast (bf16: true, kernels/cpu/backend_autocast.c): the same
 * table and memory, with linear, attention and the lm_head's log-prob (forward and backward)
 * computed as torch's CPU autocast does, bf16 inputs summed in fp32. Always available (without
 * AVX512_BF16 its products are rounded copies multiplied by sgemm). */
const Backend *backend_cpu_autocast(void);

/* be->linears where the backend has it, else be->linear (packed NULL) once per part. */
void backend_linears(const Backend *be, const LinearPart *parts, int count, const float *in, int n,
                     int in_dim);

/* be->sum_squares_multi where the backend has it, else the host loop its contract names. */
double backend_sum_squares_multi(const Backend *be, const GradTensor *tensors, int count);
/* be->adamw_multi where the backend has it, else be->adamw once per tensor (its shrink in c). */
void backend_adamw_multi(const Backend *be, const AdamWTensor *tensors, int count,
                         const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt);

/* be->rope_qk where the backend has it, else rope (or rope_backward) on q, then on k. */
void backend_rope_qk(const Backend *be, float *q, float *k, const int32_t *positions,
                     const float *cos_table, const float *sin_table, int n, int q_heads,
                     int k_heads, int hd, int rot, bool backward);

/* A host array seen by the backend: on a host-memory backend the array itself (nothing copied,
 * nothing owned), else a copy in backend memory that *owned receives (be->free it). NULL with an
 * error when the copy does not fit; bytes == 0 gives host back. */
const void *backend_mirror(const Backend *be, const void *host, size_t bytes, const char *what,
                           void **owned);

#endif
