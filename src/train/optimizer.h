/* AdamW, gradient clipping and the learning-rate schedules, with PyTorch / Hugging Face
 * semantics (torch.optim.AdamW, torch.nn.utils.clip_grad_norm_, transformers' get_scheduler
 * and Trainer's weight-decay parameter groups). */
#ifndef RLHF_TRAIN_OPTIMIZER_H
#define RLHF_TRAIN_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/adamw8bit.h"

/* A run of parameters that share a weight-decay setting (one tensor, usually). */
typedef struct {
    size_t offset, numel; /* into the flat parameter and gradient arrays */
    bool decay;
    bool fp32_moments; /* 8-bit AdamW keeps this span's moments in fp32 anyway (embeddings) */
} ParamSpan;

/* Whether HF's Trainer applies weight decay to the parameter called `name`: not to biases nor
 * to normalisation weights (names matching bias, layernorm, rmsnorm, (^|.)norm($|.),
 * _norm($|.), case-insensitively). */
bool param_gets_weight_decay(const char *name);

/* Whether `name` is an embedding matrix (an nn.Embedding's weight: "...embed_tokens.weight"),
 * whose moments Trainer keeps in fp32 under an 8-bit optimizer. */
bool param_is_embedding(const char *name);

typedef struct {
    double beta1, beta2, eps, weight_decay; /* adamw_torch defaults: 0.9, 0.999, 1e-8, 0 */
    /* bitsandbytes' 8-bit AdamW: spans of at least Q8_MIN_NUMEL values that are not marked
     * fp32_moments keep 8-bit moments (adamw8bit.h) */
    bool eight_bit;
} AdamWConfig;

/* Where one span's moments live: fp32 (m and v) or, with eight_bit, 8-bit codes (q8). */
typedef struct {
    float *m, *v; /* numel each, or NULL when the moments are 8-bit */
    Q8Moments q8;
} SpanMoments;

/* The moments cover the parameters [base, base + n) of the flat array: all of them, or, with
 * ZeRO-1 sharding over several ranks, the one slice this rank updates (its spans then are the
 * trained spans cut to that slice). */
typedef struct {
    AdamWConfig cfg;
    ParamSpan *spans;
    int n_spans;
    size_t base;  /* the flat index of m[0] and v[0] (fp32 moments) */
    size_t n;     /* parameters covered */
    float *m, *v; /* fp32 moments, zero at start: n each; with eight_bit, only those of the spans
                     that keep fp32 moments, one after another */
    SpanMoments *moments; /* one per span, pointing into m and v or holding 8-bit codes */
    Q8Map *maps;          /* eight_bit: bitsandbytes' signed (m) and unsigned (v) maps */
    int64_t step;         /* optimizer steps taken */
} AdamW;

/* Takes a copy of the spans; the moments cover 0 .. the end of the last span. Returns 0, or -1
 * when the moments do not fit in memory. */
int adamw_init(AdamW *opt, const AdamWConfig *cfg, const ParamSpan *spans, int n_spans);
/* The same for the slice [base, base + n): every span must lie inside it. */
int adamw_init_slice(AdamW *opt, const AdamWConfig *cfg, const ParamSpan *spans, int n_spans,
                     size_t base, size_t n);
void adamw_free(AdamW *opt);

/* Whether be can run opt's steps: 0, or -1 with an error when opt keeps 8-bit moments
 * (adamw_bnb_8bit) and be has no 8-bit AdamW (be->adamw8bit NULL, the CUDA backend's case):
 * refused rather than silently run as fp32 AdamW, which would change the memory and the result. */
int adamw_check_backend(const AdamW *opt, const Backend *be);

/* One tensor of a span's moments, as checkpoints store it. */
typedef struct {
    const char *key; /* "exp_avg", "exp_avg_sq"; 8-bit: "state1", "state2", "absmax1", "absmax2" */
    bool codes;      /* uint8 codes, else float32 */
    void *data;
    size_t numel;
} MomentTensor;

/* The tensors that hold span s's moments: 2 for fp32 moments, 4 for 8-bit ones (bitsandbytes'
 * names). Returns their count. */
int adamw_span_moments(const AdamW *opt, int s, MomentTensor out[4]);
/* The bytes behind a moment tensor: one per code, four per float. */
size_t moment_tensor_bytes(const MomentTensor *t);

/* One step at learning rate lr, as torch.optim.AdamW does it:
 * p *= 1 - lr*wd (decaying spans only); m = lerp(m, g, 1-b1); v = b2 v + (1-b2) g²;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). params and grads are be's memory (the
 * model's backend) and the update runs there; the moments are still host memory (malloc), which
 * a device backend will have to change. */
void adamw_step(AdamW *opt, const Backend *be, float *params, const float *grads, double lr);
/* adamw_step on the gradients times grad_scale (grad_clip_coef's), each product rounded to fp32
 * as it is read: the bits grad_clip followed by adamw_step give, without grad_clip's pass over
 * the gradients (a read and a write of every one). grads are left as they were. */
void adamw_step_scaled(AdamW *opt, const Backend *be, float *params, const float *grads, double lr,
                       float grad_scale);

/* The gradients below are be's memory, the sums run there. */

/* The global L2 norm of the gradients (what HF logs as grad_norm), norms of each span summed
 * in squares as clip_grad_norm_ does. */
double grad_global_norm(const Backend *be, const float *grads, const ParamSpan *spans, int n_spans);
/* Its square before the root: what ranks holding slices of the gradient sum. */
double grad_sum_squares(const Backend *be, const float *grads, const ParamSpan *spans, int n_spans);

/* clip_grad_norm_'s coefficient for a global norm: (float)(max_norm / (norm + 1e-6)) where that
 * is below 1, else exactly 1 (torch clamps it to 1 and multiplies anyway; x * 1 = x). */
float grad_clip_coef(double max_norm, double norm);
/* clip_grad_norm_: scales every gradient by min(1, max_norm / (norm + 1e-6)). */
void grad_clip(const Backend *be, float *grads, const ParamSpan *spans, int n_spans,
               double max_norm, double norm);

typedef enum { LR_CONSTANT, LR_CONSTANT_WITH_WARMUP, LR_LINEAR, LR_COSINE } LrScheduleType;

/* Parses "constant", "constant_with_warmup", "linear", "cosine"; -1 for anything else. */
int lr_schedule_parse(const char *name, LrScheduleType *out);

/* The multiplier of the base learning rate after `step` optimizer steps (transformers'
 * lr_lambda), with `warmup` warm-up steps out of `total`. */
double lr_schedule_factor(LrScheduleType type, int64_t step, int64_t warmup, int64_t total);

/* warmup_ratio as transformers turns it into steps: ceil(ratio * total). */
int64_t lr_warmup_steps_from_ratio(double ratio, int64_t total);

#endif
