#include "train/optimizer.h"

#include "common/error.h"

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

int adamw_init_slice(AdamW *opt, const AdamWConfig *cfg, const ParamSpan *spans, int n_spans,
                     size_t base, size_t n) {
    memset(opt, 0, sizeof *opt);
    opt->cfg = *cfg;
    opt->spans = xmalloc((size_t)(n_spans ? n_spans : 1) * sizeof *spans);
    if (n_spans) memcpy(opt->spans, spans, (size_t)n_spans * sizeof *spans);
    opt->n_spans = n_spans;
    opt->base = base;
    opt->n = n;
    opt->m = calloc(n ? n : 1, sizeof(float));
    opt->v = calloc(n ? n : 1, sizeof(float));
    if (!opt->m || !opt->v) {
        adamw_free(opt);
        return err_set("out of memory: the AdamW moments need %zu bytes", 2 * n * sizeof(float));
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
    free(opt->spans);
    free(opt->m);
    free(opt->v);
    memset(opt, 0, sizeof *opt);
}

void adamw_step(AdamW *opt, float *params, const float *grads, double lr) {
    const AdamWConfig *c = &opt->cfg;
    opt->step++;
    double bc1 = 1.0 - pow(c->beta1, (double)opt->step);
    double bc2_sqrt = sqrt(1.0 - pow(c->beta2, (double)opt->step));
    float step_size = (float)(lr / bc1), b1 = (float)c->beta1, b2 = (float)c->beta2;
    float eps = (float)c->eps, inv_bc2_sqrt = (float)(1.0 / bc2_sqrt);
    for (int s = 0; s < opt->n_spans; s++) {
        const ParamSpan *span = &opt->spans[s];
        float shrink = span->decay ? (float)(1.0 - lr * c->weight_decay) : 1.0f;
        float *p = params + span->offset, *m = opt->m + (span->offset - opt->base),
              *v = opt->v + (span->offset - opt->base);
        const float *g = grads + span->offset;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < span->numel; i++) {
            p[i] *= shrink;
            m[i] += (1.0f - b1) * (g[i] - m[i]);
            v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
            p[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_bc2_sqrt + eps);
        }
    }
}

double grad_sum_squares(const float *grads, const ParamSpan *spans, int n_spans) {
    double total = 0.0;
    for (int s = 0; s < n_spans; s++) {
        const float *g = grads + spans[s].offset;
        double ss = 0.0;
#pragma omp parallel for reduction(+ : ss) schedule(static)
        for (size_t i = 0; i < spans[s].numel; i++)
            ss += (double)g[i] * g[i];
        total += ss;
    }
    return total;
}

double grad_global_norm(const float *grads, const ParamSpan *spans, int n_spans) {
    return sqrt(grad_sum_squares(grads, spans, n_spans));
}

void grad_clip(float *grads, const ParamSpan *spans, int n_spans, double max_norm, double norm) {
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return;
    float f = (float)coef;
    for (int s = 0; s < n_spans; s++) {
        float *g = grads + spans[s].offset;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < spans[s].numel; i++)
            g[i] *= f;
    }
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
