#include "model/rope_tables.h"

#include <math.h>
#include "common/error.h"

#include <stdlib.h>

/* theta^(-2i/d) evaluated the way torch does: exponent in fp32, power in fp32. */
static float default_inv_freq(double theta, int i, int d) {
    float exponent = (float)(2 * i) / (float)d;
    return 1.0f / powf((float)theta, exponent);
}

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rotations, int d, double theta, double orig) {
    return (d * log(orig / (rotations * 2.0 * M_PI))) / (2.0 * log(theta));
}

static void yarn_inv_freq(const RopeConfig *r, int d, float *inv, float *attn) {
    double factor = r->factor;
    double low = yarn_correction_dim(r->beta_fast, d, r->theta, r->original_max_position);
    double high = yarn_correction_dim(r->beta_slow, d, r->theta, r->original_max_position);
    if (r->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < d / 2; i++) {
        float pos_freq = powf((float)r->theta, (float)(2 * i) / (float)d);
        float extrapolation = 1.0f / pos_freq;
        float interpolation = 1.0f / ((float)factor * pos_freq);
        float ramp = (float)(((float)i - low) / (high - low));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extrapolation_factor = 1.0f - ramp;
        inv[i] =
            interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    if (r->attention_factor >= 0)
        *attn = (float)r->attention_factor;
    else if (r->mscale != 0 && r->mscale_all_dim != 0)
        *attn = (float)(yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim));
    else
        *attn = (float)yarn_mscale(factor, 1.0);
}

static void llama3_inv_freq(const RopeConfig *r, int d, float *inv) {
    double low_wavelen = r->original_max_position / r->low_freq_factor;
    double high_wavelen = r->original_max_position / r->high_freq_factor;
    for (int i = 0; i < d / 2; i++) {
        float f = default_inv_freq(r->theta, i, d);
        double wavelen = 2.0 * M_PI / f;
        if (wavelen < high_wavelen) {
            inv[i] = f;
        } else if (wavelen > low_wavelen) {
            inv[i] = (float)(f / r->factor);
        } else {
            double smooth = (r->original_max_position / wavelen - r->low_freq_factor) /
                            (r->high_freq_factor - r->low_freq_factor);
            inv[i] = (float)((1.0 - smooth) * f / r->factor + smooth * f);
        }
    }
}

/* inv and the attention factor of the RoPE r of cfg (its rope or, Gemma 3, rope_local). */
static void inv_freq_of(const ModelConfig *cfg, const RopeConfig *r, int seq_len, float *inv,
                        float *attention_factor) {
    int d = cfg->rotary_dim; /* transformers' `dim`: int(head_dim * partial_rotary_factor) */
    *attention_factor = 1.0f;
    switch (r->type) {
    case ROPE_DEFAULT:
    case ROPE_LINEAR:
        for (int i = 0; i < d / 2; i++)
            inv[i] = default_inv_freq(r->theta, i, d) /
                     (r->type == ROPE_LINEAR ? (float)r->factor : 1.0f);
        return;
    case ROPE_DYNAMIC: {
        double max_pos = (double)cfg->max_position_embeddings;
        double len = seq_len > max_pos ? seq_len : max_pos;
        double theta = r->theta * pow(r->factor * len / max_pos - (r->factor - 1.0), d / (d - 2.0));
        for (int i = 0; i < d / 2; i++)
            inv[i] = default_inv_freq(theta, i, d);
        return;
    }
    case ROPE_LLAMA3:
        llama3_inv_freq(r, d, inv);
        return;
    case ROPE_YARN:
        yarn_inv_freq(r, d, inv, attention_factor);
        return;
    case ROPE_LONGROPE: {
        /* longrope_frequency_update: the long factors once the batch reaches past the original
         * context (seq_len = largest position + 1), the short ones otherwise; the attention
         * factor scales cos and sin either way. */
        const float *ext = seq_len > r->original_max_position ? r->long_factor : r->short_factor;
        for (int i = 0; i < d / 2; i++)
            inv[i] = 1.0f / (ext[i] * powf((float)r->theta, (float)(2 * i) / (float)d));
        *attention_factor = (float)r->attention_factor;
        return;
    }
    }
}

void rope_inv_freq(const ModelConfig *cfg, int seq_len, float *inv, float *attention_factor) {
    inv_freq_of(cfg, &cfg->rope, seq_len, inv, attention_factor);
}

int rope_table_sets(const ModelConfig *cfg) {
    return cfg->local_rope ? 2 : 1;
}

void rope_build_rows(const ModelConfig *cfg, int seq_len, const int32_t *positions, int n,
                     float *cos_rows, float *sin_rows) {
    int half = cfg->rotary_dim / 2;
    float *inv = xmalloc((size_t)half * sizeof *inv);
    for (int set = 0; set < rope_table_sets(cfg); set++) {
        float attn;
        inv_freq_of(cfg, set ? &cfg->rope_local : &cfg->rope, seq_len, inv, &attn);
        float *cos_set = cos_rows + (size_t)set * n * half,
              *sin_set = sin_rows + (size_t)set * n * half;
        for (int r = 0; r < n; r++) {
            int p = positions ? positions[r] : r;
            for (int i = 0; i < half; i++) {
                float angle = (float)p * inv[i];
                cos_set[(size_t)r * half + i] = cosf(angle) * attn;
                sin_set[(size_t)r * half + i] = sinf(angle) * attn;
            }
        }
    }
    free(inv);
}

void rope_build_tables(const ModelConfig *cfg, int n_positions, float *cos_table,
                       float *sin_table) {
    rope_build_rows(cfg, n_positions, NULL, n_positions, cos_table, sin_table);
}
