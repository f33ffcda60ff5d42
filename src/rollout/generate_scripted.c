/* generate_scripted (generate.h): the test hook that stands in for sampling. */
#include "common/error.h"
#include "rollout/generate.h"

#include <stdbool.h>

static bool is_eos_id(const GenerateOptions *opt, int32_t id) {
    for (int i = 0; i < opt->n_eos; i++)
        if (opt->eos_ids[i] == id) return true;
    return false;
}

void generate_scripted(int vocab, int n_prompts, const GenerateOptions *opt, Completion *out) {
    int per = opt->n_per_prompt > 0 ? opt->n_per_prompt : 1, max = opt->max_new_tokens;
    for (int j = 0; j < n_prompts * per; j++) {
        SamplerRng rng;
        sampler_rng_seed(&rng, opt->seed, opt->first_stream + (uint64_t)j);
        Completion *c = &out[j];
        *c = (Completion){0};
        c->len = 1 + (int)(sampler_rng_uniform(&rng) * max);
        c->ids = xmalloc((size_t)c->len * sizeof *c->ids);
        c->logprobs = xcalloc((size_t)c->len, sizeof *c->logprobs);
        for (int t = 0; t < c->len; t++) {
            int32_t id;
            do /* a sampled completion holds no EOS before its end */
                id = (int32_t)(sampler_rng_uniform(&rng) * vocab);
            while (is_eos_id(opt, id));
            c->ids[t] = id;
        }
        if (c->len < max && opt->n_eos > 0) c->ids[c->len - 1] = opt->eos_ids[0];
    }
}
