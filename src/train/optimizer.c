#include "train/optimizer.h"

#include "common/error.h"
#include "kernels/cpu/gemm_bf16.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "norm" as a whole dotted component: (^|.)norm($|.) */
static bool has_norm_component(const char *s) {
    for (const char *p = strstr(s, "norm"); p; p = strstr(p + 1, "norm"))
        if ((p == s || p[-1] == '.') && (p[4] == '\0' || p[4] == '.')) return true;
    return false;
}

bool param_gets_weight_decay(const char *name) {
    char lower[256];
    size_t n = strlen(name);
    if (n >= sizeof lower) n = sizeof lower - 1;
    for (size_t i = 0; i < n; i++)
        lower[i] = (char)tolower((unsigned char)name[i]);
    lower[n] = '\0';
    if (strstr(lower, "bias") || strstr(lower, "layernorm") || strstr(lower, "rmsnorm"))
        return false;
    if (has_norm_component(lower)) return false;
    /* _norm(?:$|\.) : any characters before the underscore */
    for (const char *p = strstr(lower, "_norm"); p; p = strstr(p + 1, "_norm"))
        if (p[5] == '\0' || p[5] == '.') return false;
    return true;
}

bool param_is_embedding(const char *name) {
    const char *suffix = "embed_tokens.weight";
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

static bool keeps_8bit_moments(const AdamWConfig *cfg, const ParamSpan *span) {
    return cfg->eight_bit && !span->fp32_moments && span->numel >= Q8_MIN_NUMEL;
}

/* Allocates m, v (fp32) and the 8-bit moments, and points each span at its own. */
static int alloc_moments(AdamW *opt) {
    size_t n_f32 = opt->n;
    if (opt->cfg.eight_bit) {
        n_f32 = 0;
        for (int s = 0; s < opt->n_spans; s++)
            if (!keeps_8bit_moments(&opt->cfg, &opt->spans[s])) n_f32 += opt->spans[s].numel;
        opt->maps = xmalloc(2 * sizeof *opt->maps);
        q8_map_dynamic(&opt->maps[0], true);
        q8_map_dynamic(&opt->maps[1], false);
    }
    opt->moments = xcalloc((size_t)(opt->n_spans ? opt->n_spans : 1), sizeof *opt->moments);
    opt->m = calloc_written(n_f32 ? n_f32 : 1, sizeof(float));
    opt->v = calloc_written(n_f32 ? n_f32 : 1, sizeof(float));
    if (!opt->m || !opt->v) return -1;
    size_t packed = 0;
    for (int s = 0; s < opt->n_spans; s++) {
        const ParamSpan *span = &opt->spans[s];
        SpanMoments *mom = &opt->moments[s];
        if (keeps_8bit_moments(&opt->cfg, span)) {
            if (q8_moments_init(&mom->q8, span->numel) != 0) return -1;
            continue;
        }
        size_t at = opt->cfg.eight_bit ? packed : span->offset - opt->base;
        mom->m = opt->m + at;
        mom->v = opt->v + at;
        packed += span->numel;
    }
    return 0;
}

int adamw_init_slice(AdamW *opt, const AdamWConfig *cfg, const ParamSpan *spans, int n_spans,
                     size_t base, size_t n) {
    memset(opt, 0, sizeof *opt);
    opt->cfg = *cfg;
    opt->spans = xmalloc((size_t)(n_spans ? n_spans : 1) * sizeof *spans);
    if (n_spans) memcpy(opt->spans, spans, (size_t)n_spans * sizeof *spans);
    opt->n_spans = n_spans;
    opt->base = base;
    opt->n = n;
    if (alloc_moments(opt) != 0) {
        adamw_free(opt);
        return err_set("out of memory: the AdamW moments of %zu parameters do not fit", n);
    }
    return 0;
}

int adamw_init(AdamW *opt, const AdamWConfig *cfg, const ParamSpan *spans, int n_spans) {
    size_t n = 0;
    for (int s = 0; s < n_spans; s++) {
        size_t end = spans[s].offset + spans[s].numel;
        if (end > n) n = end;
    }
    return adamw_init_slice(opt, cfg, spans, n_spans, 0, n);
}

void adamw_free(AdamW *opt) {
    for (int s = 0; opt->moments && s < opt->n_spans; s++)
        q8_moments_free(&opt->moments[s].q8);
    free(opt->moments);
    free(opt->maps);
    free(opt->spans);
    free(opt->m);
    free(opt->v);
    memset(opt, 0, sizeof *opt);
}

int adamw_span_moments(const AdamW *opt, int s, MomentTensor out[4]) {
    const SpanMoments *mom = &opt->moments[s];
    size_t numel = opt->spans[s].numel;
    if (mom->m) {
        out[0] = (MomentTensor){"exp_avg", false, mom->m, numel};
        out[1] = (MomentTensor){"exp_avg_sq", false, mom->v, numel};
        return 2;
    }
    size_t blocks = q8_blocks(numel);
    out[0] = (MomentTensor){"state1", true, mom->q8.code_m, numel};
    out[1] = (MomentTensor){"state2", true, mom->q8.code_v, numel};
    out[2] = (MomentTensor){"absmax1", false, mom->q8.absmax_m, blocks};
    out[3] = (MomentTensor){"absmax2", false, mom->q8.absmax_v, blocks};
    return 4;
}

size_t moment_tensor_bytes(const MomentTensor *t) {
    return t->numel * (t->codes ? 1 : sizeof(float));
}

int adamw_check_backend(const AdamW *opt, const Backend *be) {
    if (!opt->cfg.eight_bit || be->adamw8bit) return 0;
    for (int s = 0; s < opt->n_spans; s++)
        if (!opt->moments[s].m)
            return err_set("optimizer adamw_bnb_8bit: the %s backend has no 8-bit AdamW; use "
                           "optimizer: adamw_torch (fp32 moments) on it",
                           be->name);
    return 0;
}

void adamw_step(AdamW *opt, const Backend *be, float *params, const float *grads, double lr) {
    adamw_step_scaled(opt, be, params, grads, lr, 1.0f);
}

void adamw_step_scaled(AdamW *opt, const Backend *be, float *params, const float *grads, double lr,
                       float grad_scale) {
    const AdamWConfig *cfg = &opt->cfg;
    opt->step++;
    double bc1 = 1.0 - pow(cfg->beta1, (double)opt->step);
    double bc2_sqrt = sqrt(1.0 - pow(cfg->beta2, (double)opt->step));
    AdamWStepCoefs c = {.beta1 = (float)cfg->beta1,
                        .beta2 = (float)cfg->beta2,
                        .one_minus_beta1 = (float)(1.0 - cfg->beta1),
                        .one_minus_beta2 = (float)(1.0 - cfg->beta2),
                        .eps = (float)cfg->eps,
                        .neg_step = (float)(-lr / bc1),
                        .bc2_sqrt = (float)bc2_sqrt,
                        .grad_scale = grad_scale};
    float decayed = (float)(1.0 - lr * cfg->weight_decay);
    /* bf16 products repack what changes, in the buffers they had (gemm_bf16_cache.c): marked
     * stale before the update, which on the CPU repacks them itself as it goes (invariant 7) */
    for (int s = 0; s < opt->n_spans; s++)
        gemm_bf16_weights_updated(params + opt->spans[s].offset,
                                  opt->spans[s].numel * sizeof *params);
    /* the spans with fp32 moments in one multi-tensor call (a device backend's few launches),
     * the 8-bit ones each on its own */
    AdamWTensor *f32 = xmalloc((size_t)(opt->n_spans ? opt->n_spans : 1) * sizeof *f32);
    int n_f32 = 0;
    for (int s = 0; s < opt->n_spans; s++) {
        const ParamSpan *span = &opt->spans[s];
        SpanMoments *mom = &opt->moments[s];
        c.shrink = span->decay ? decayed : 1.0f;
        if (mom->m)
            f32[n_f32++] = (AdamWTensor){params + span->offset, mom->m,      mom->v,
                                         grads + span->offset,  span->numel, c.shrink};
        else
            be->adamw8bit(be, &mom->q8, &opt->maps[0], &opt->maps[1], params + span->offset,
                          grads + span->offset, &c);
    }
    backend_adamw_multi(be, f32, n_f32, &c, (float)(lr / bc1), (float)(1.0 / bc2_sqrt));
    free(f32);
}

double grad_sum_squares(const Backend *be, const float *grads, const ParamSpan *spans,
                        int n_spans) {
    GradTensor *t = xmalloc((size_t)(n_spans ? n_spans : 1) * sizeof *t);
    for (int s = 0; s < n_spans; s++)
        t[s] = (GradTensor){grads + spans[s].offset, spans[s].numel};
    double total = backend_sum_squares_multi(be, t, n_spans);
    free(t);
    return total;
}

double grad_global_norm(const Backend *be, const float *grads, const ParamSpan *spans,
                        int n_spans) {
    return sqrt(grad_sum_squares(be, grads, spans, n_spans));
}

float grad_clip_coef(double max_norm, double norm) {
    double coef = max_norm / (norm + 1e-6);
    return coef >= 1.0 ? 1.0f : (float)coef;
}

void grad_clip(const Backend *be, float *grads, const ParamSpan *spans, int n_spans,
               double max_norm, double norm) {
    float f = grad_clip_coef(max_norm, norm);
    if (f == 1.0f) return;
    for (int s = 0; s < n_spans; s++)
        be->scale(be, grads + spans[s].offset, f, spans[s].numel);
}

int lr_schedule_parse(const char *name, LrScheduleType *out) {
    static const struct {
        const char *name;
        LrScheduleType type;
    } names[] = {{"constant", LR_CONSTANT},
                 {"constant_with_warmup", LR_CONSTANT_WITH_WARMUP},
                 {"linear", LR_LINEAR},
                 {"cosine", LR_COSINE}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].type;
            return 0;
        }
    }
    return -1;
}

double lr_schedule_factor(LrScheduleType type, int64_t step, int64_t warmup, int64_t total) {
    if (type == LR_CONSTANT) return 1.0;
    if (step < warmup) return (double)step / (double)(warmup > 1 ? warmup : 1);
    switch (type) {
    case LR_CONSTANT_WITH_WARMUP:
        return 1.0;
    case LR_LINEAR: {
        double left = (double)(total - step) / (double)(total - warmup > 1 ? total - warmup : 1);
        return left > 0.0 ? left : 0.0;
    }
    case LR_COSINE: {
        double progress =
            (double)(step - warmup) / (double)(total - warmup > 1 ? total - warmup : 1);
        double f = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
        return f > 0.0 ? f : 0.0;
    }
    default:
        return 1.0;
    }
}

int64_t lr_warmup_steps_from_ratio(double ratio, int64_t total) {
    return (int64_t)ceil(ratio * (double)total);
}
