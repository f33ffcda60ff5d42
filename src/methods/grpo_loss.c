#include "methods/grpo_loss.h"

#include "common/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* torch.lerp's two-sided formula, so a weight of 0 or 1 gives an endpoint exactly. */
static float lerp(float start, float end, float weight) {
    return weight < 0.5f ? start + weight * (end - start) : end - (end - start) * (1.0f - weight);
}

double grpo_quantile(float *values, int n, double q) {
    qsort(values, (size_t)n, sizeof *values, cmp_float);
    float rank = (float)q * (float)(n - 1); /* torch works in the input's dtype */
    int below = (int)rank, above = (int)ceilf(rank);
    return lerp(values[below], values[above], rank - (float)below);
}

/* TRL's top_entropy_quantile mask: tokens whose entropy is at least the (1 − ρ) quantile of the
 * micro-batch's valid tokens. NULL when every token is kept. */
static uint8_t *entropy_mask(const GrpoLossOptions *opt, const GrpoMicroBatch *mb) {
    if (opt->top_entropy_quantile >= 1.0) return NULL;
    size_t cells = (size_t)mb->rows * mb->width;
    uint8_t *keep = xcalloc(cells ? cells : 1, 1);
    float *valid = xmalloc((cells ? cells : 1) * sizeof *valid);
    int n = 0;
    for (size_t c = 0; c < cells; c++)
        if (mb->mask[c]) valid[n++] = mb->entropy[c];
    if (n > 0) {
        float threshold = (float)grpo_quantile(valid, n, 1.0 - opt->top_entropy_quantile);
        for (size_t c = 0; c < cells; c++)
            keep[c] = mb->mask[c] && mb->entropy[c] * 1.0f >= threshold;
    }
    free(valid);
    return keep;
}

/* ∂(loss)/∂(per-token loss) of each loss type's normalisation, for row i's tokens. */
static double row_weight(const GrpoLossOptions *opt, const GrpoMicroBatch *mb, int row_tokens,
                         int all_tokens) {
    double ga = mb->accumulation_steps > 0 ? mb->accumulation_steps : 1;
    switch (opt->loss_type) {
    case GRPO_LOSS_GRPO:
        return 1.0 / (row_tokens > 1 ? row_tokens : 1) / mb->rows / ga;
    case GRPO_LOSS_BNPO:
        return 1.0 / (all_tokens > 1 ? all_tokens : 1) / ga;
    case GRPO_LOSS_DR_GRPO:
        return 1.0 / ((double)mb->rows * opt->max_completion_length) / ga;
    case GRPO_LOSS_DAPO:
        return 1.0 / (mb->generation_batch_tokens > 1 ? mb->generation_batch_tokens : 1);
    }
    return 0;
}

/* The clipped policy term −min(min(r, δ)·A, clamp(r, lo, hi)·A) and its derivative in r. */
static double policy_term(const GrpoLossOptions *opt, double r, double A, double *dr) {
    double lo = 1 - opt->epsilon, hi = 1 + opt->epsilon_high;
    bool delta_cut = !isnan(opt->delta) && r > opt->delta;
    double r1 = delta_cut ? opt->delta : r, r2 = r < lo ? lo : r > hi ? hi : r;
    double p1 = r1 * A, p2 = r2 * A;
    double d1 = delta_cut ? 0 : A, d2 = (r < lo || r > hi) ? 0 : A;
    *dr = p1 < p2 ? -d1 : p2 < p1 ? -d2 : -0.5 * (d1 + d2);
    return -(p1 < p2 ? p1 : p2);
}

typedef struct {
    double kl_sum, ent_sum, low_sum, high_sum, region_sum, count;
    double low_min, high_max;
} MetricSums;

static void add_clip_row(MetricSums *s, double low, double high) {
    if (isnan(low)) return; /* a row without loss tokens: nanmin / nanmax skip it */
    s->low_min = isnan(s->low_min) || low < s->low_min ? low : s->low_min;
    s->high_max = isnan(s->high_max) || high > s->high_max ? high : s->high_max;
}

double grpo_loss(const GrpoLossOptions *opt, const GrpoMicroBatch *mb, float *dlogp,
                 GrpoLossMetrics *metrics) {
    int B = mb->rows, C = mb->width, all_tokens = 0;
    bool seq = opt->sequence_level_is, bias_kl = opt->use_bias_correction_kl;
    double beta = opt->beta, lo = 1 - opt->epsilon, hi = 1 + opt->epsilon_high;
    for (size_t c = 0; c < (size_t)B * C; c++)
        all_tokens += mb->mask[c] != 0;
    uint8_t *keep = entropy_mask(opt, mb);
    MetricSums s = {.low_min = NAN, .high_max = NAN};
    double loss = 0, seq_low = 0, seq_high = 0, seq_region = 0;
    for (int i = 0; i < B; i++) {
        const uint8_t *m = mb->mask + (size_t)i * C;
        const float *lp = mb->logp + (size_t)i * C;
        const float *old = mb->old_logp ? mb->old_logp + (size_t)i * C : lp;
        float *d = dlogp + (size_t)i * C;
        int n = 0;
        double log_ratio_sum = 0;
        for (int t = 0; t < C; t++)
            if (m[t]) n++, log_ratio_sum += (double)lp[t] - old[t];
        double A = mb->advantages[i], W = row_weight(opt, mb, n, all_tokens);
        double seq_ratio = exp(log_ratio_sum / (n > 1 ? n : 1));
        double g_seq = 0; /* ∂loss/∂(sequence ratio), collected over the row */
        double row_low = 0, row_high = 0;
        for (int t = 0; t < C; t++) {
            d[t] = 0;
            if (!m[t]) continue;
            double r = seq ? seq_ratio : exp((double)lp[t] - old[t]);
            double dL_dr, L = policy_term(opt, r, A, &dL_dr);
            double e = keep ? keep[(size_t)i * C + t] : 1;
            L *= e, dL_dr *= e;
            double dL_dlp = 0, kl = 0;
            if (beta != 0) {
                double diff = (double)mb->ref_logp[(size_t)i * C + t] - lp[t];
                kl = exp(diff) - diff - 1;
                double dkl = 1 - exp(diff); /* ∂kl/∂ℓ */
                if (bias_kl) {
                    dL_dlp += beta * dkl * r;
                    dL_dr += beta * kl;
                    kl *= r;
                } else {
                    dL_dlp += beta * dkl;
                }
                L += beta * kl;
            }
            loss += W * L;
            if (seq)
                g_seq += W * dL_dr, d[t] = (float)(W * dL_dlp);
            else
                d[t] = (float)(W * (dL_dlp + dL_dr * r)); /* ∂r/∂ℓ = r */
            /* metrics read the ratio after the δ cut, as TRL's coef_1 */
            double rc = !isnan(opt->delta) && r > opt->delta ? opt->delta : r;
            bool low = rc < lo && A < 0;
            bool high = rc > hi && A > 0;
            s.kl_sum += kl, s.ent_sum += mb->entropy[(size_t)i * C + t], s.count++;
            if (!seq) {
                s.low_sum += low, s.high_sum += high, s.region_sum += low || high;
                row_low += low, row_high += high;
            }
        }
        if (seq) {
            for (int t = 0; t < C; t++)
                if (m[t]) d[t] += (float)(g_seq * seq_ratio / (n > 1 ? n : 1));
            double rc = !isnan(opt->delta) && seq_ratio > opt->delta ? opt->delta : seq_ratio;
            bool low = rc < lo && A < 0;
            bool high = rc > hi && A > 0;
            seq_low += low, seq_high += high, seq_region += low || high;
            add_clip_row(&s, low, high);
        } else {
            add_clip_row(&s, n ? row_low / n : NAN, n ? row_high / n : NAN);
        }
    }
    free(keep);
    double count = s.count > 1 ? s.count : 1, rows = B > 1 ? B : 1;
    metrics->kl = s.kl_sum / count;
    metrics->entropy = s.ent_sum / count;
    metrics->clip_low_mean = seq ? seq_low / rows : s.low_sum / count;
    metrics->clip_high_mean = seq ? seq_high / rows : s.high_sum / count;
    metrics->clip_region_mean = seq ? seq_region / rows : s.region_sum / count;
    metrics->clip_low_min = s.low_min;
    metrics->clip_high_max = s.high_max;
    return loss;
}
