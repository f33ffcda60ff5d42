#include "model/config_longrope.h"

#include "common/error.h"
#include "common/json_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *phi3_rope_type(const char *type) {
    /* Phi3Config.convert_rope_params_to_dict: the early Phi-3 checkpoints' "su" and "yarn" name
     * what transformers computes as longrope. */
    return strcmp(type, "su") == 0 || strcmp(type, "yarn") == 0 ? "longrope" : type;
}

/* A list of exactly n numbers, into out[n] as fp32 (torch.tensor(list, dtype=float32)). */
static int read_factors(const json_t *p, const char *name, int n, float **out) {
    const json_t *v = json_object_get(p, name);
    if (!v || !json_is_array(v))
        return err_set("'%s': missing (longrope needs a list of %d numbers)", name, n);
    if ((int)json_array_size(v) != n)
        return err_set("'%s': %zu numbers, but the rotary dims %d need %d", name,
                       json_array_size(v), 2 * n, n);
    *out = xmalloc((size_t)n * sizeof **out);
    for (int i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_number(e)) return err_set("'%s': entry %d is not a number", name, i);
        double f = json_number_value(e);
        if (!(f > 0) || !isfinite(f))
            return err_set("'%s': entry %d is %g (a positive number is required)", name, i, f);
        (*out)[i] = (float)f;
    }
    return 0;
}

int longrope_parse(ModelConfig *cfg, const json_t *root, const json_t *p) {
    RopeConfig *r = &cfg->rope;
    /* standardize_rope_params: a top-level original_max_position_embeddings wins over the one in
     * the RoPE dict; Phi3Config always has one (default 4096). */
    double max_pos = (double)cfg->max_position_embeddings;
    double orig = cfg->arch == ARCH_PHI3 ? 4096.0 : max_pos;
    if (json_get_double(p, "original_max_position_embeddings", &orig) < 0 ||
        json_get_double(root, "original_max_position_embeddings", &orig) < 0)
        return -1;
    if (!(orig >= 1)) return err_set("'original_max_position_embeddings': must be positive");
    r->original_max_position = orig;
    int half = cfg->rotary_dim / 2;
    if (read_factors(p, "short_factor", half, &r->short_factor) != 0 ||
        read_factors(p, "long_factor", half, &r->long_factor) != 0)
        return -1;
    /* _compute_longrope_parameters: without an explicit factor, the context extension itself
     * (max_position_embeddings / original) sets the attention factor. */
    double factor = max_pos / orig;
    double attention = -1;
    if (json_get_double(p, "factor", &factor) < 0 ||
        json_get_double(p, "attention_factor", &attention) < 0)
        return -1;
    if (attention < 0) attention = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(orig));
    r->attention_factor = attention;
    r->factor = factor;
    return 0;
}
