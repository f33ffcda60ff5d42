/* Batched generation with a KV cache and continuous batching: up to max_batch sequences decode
 * together; when one finishes (an end-of-sequence id, or max_new_tokens) its slot is emptied and
 * the next job is prefilled into it in the same step, so a long straggler never holds the others
 * back. Tokens are chosen by the sampler (rollout/sampler.h) with one random stream per
 * completion, so results depend neither on max_batch nor on the thread count; or, given torch's
 * generator (torch_rng below), as transformers' generate() draws them from it. */
#ifndef RLHF_ROLLOUT_GENERATE_H
#define RLHF_ROLLOUT_GENERATE_H

#include "common/torch_generator.h"
#include "model/model.h"
#include "rollout/sampler.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int max_new_tokens;     /* >= 1 */
    const int32_t *eos_ids; /* generation of a sequence stops after any of these */
    int n_eos;
    int max_batch;    /* sequences decoding at once; <= 0: all of them */
    int n_per_prompt; /* completions per prompt (>= 1; 0 means 1) */
    SamplingParams sampling;
    uint64_t seed; /* completion k of prompt i draws from stream first_stream + i * n_per_prompt
                      + k */
    /* Where this call's completions sit in a larger list: a rank generating its share of a batch
     * numbers its completions as the whole batch does, so a completion's draws do not depend on
     * which rank (or how many) generated it. 0 for a call on its own. */
    uint64_t first_stream;
    /* Not NULL: tokens are drawn as transformers' generate() draws them on the CPU from torch's
     * global generator (TRL's GRPOTrainer with the seed set): every completion decodes in one
     * batch (max_batch is ignored; a prompt's completions share its prefill only within the step
     * that prefills them all, where that gives the bits of prefilling each: generate.c,
     * share_prefills_in_step), and each step, while any completion is unfinished, takes
     * n_completions x vocab exponential_() draws from this generator, row j (completion j, out[]
     * order) its j-th vocab of them, finished rows included; row j's token is argmax(p / q)
     * (torch.multinomial, rollout/sampler.h). The draws then depend on the whole batch, as
     * transformers' do; seed and first_stream are unused. Greedy draws nothing. */
    TorchGenerator *torch_rng;
    /* called after each token a completion receives (streaming); may be NULL */
    void (*on_token)(int job, const int32_t *ids, int len, void *ctx);
    void *on_token_ctx;
    /* called after each token a completion receives; true ends that completion there, the
     * token kept (a stop string completed); may be NULL */
    bool (*stop_after)(int job, const int32_t *ids, int len, void *ctx);
    void *stop_ctx;
    struct GenerateStats *stats; /* filled in when not NULL */
    /* Where to keep the weights packed for decoding several sequences at once (see
     * model/packed_model.h), kept by the caller between calls so that its memory stays mapped;
     * NULL: generate() packs into memory of its own and frees it. Used only when packing pays
     * (packed_model_worth). */
    struct PackedModel *packed;
    /* Each token's top_logprobs most likely ids and their log-probabilities (Completion.top_ids,
     * top_logprobs; capped at the vocabulary), as vLLM's SamplingParams.logprobs; 0: none. */
    int top_logprobs;
    /* Which distribution `logprobs` and the top ids are taken from. false: the processed one
     * each token was drawn from (repetition penalty, temperature, top-k, top-p and min-p
     * applied; masked ids have -inf), what TRL's importance sampling needs and TRL starts vLLM
     * with (logprobs_mode="processed_logprobs"). true: the log-softmax of the model's raw logits
     * before any of them, vLLM's default logprobs_mode "raw_logprobs" (its OpenAI server's). The
     * tokens drawn are the same either way. */
    bool raw_logprobs;
} GenerateOptions;

/* What a generate() call computed: prompt tokens prefilled (a prompt whose prefill was shared
 * counts once) and tokens decoded. */
typedef struct GenerateStats {
    long prefill_tokens, decode_tokens;
    /* Wall time of the packed copy of the weights, of the steps that prefill some prompt, and of
     * the steps that only decode (forward and sampling): a benchmark reads decode speed from
     * these rather than from the difference of two runs, which carries all the noise of the
     * prefill's much longer time. */
    double pack_seconds, prefill_seconds, decode_seconds;
} GenerateStats;

typedef struct {
    int32_t *ids;    /* the generated tokens, the stopping eos included */
    float *logprobs; /* per token, under the distribution GenerateOptions.raw_logprobs names
                      * (by default the processed one it was drawn from) */
    int len;
    /* GenerateOptions.top_logprobs, capped at the vocabulary; 0: top_ids and top_logprobs are
     * NULL. Token t's n_top most likely ids are top_ids[t * n_top ..], most likely first (equal
     * log-probabilities in ascending id order), under the same distribution as logprobs. */
    int n_top;
    int32_t *top_ids;
    float *top_logprobs;
} Completion;

/* Generates n_per_prompt completions for each of n_prompts prompts: out[i * n_per_prompt + k]
 * is completion k of prompt i (caller frees with completions_free). Greedy takes the argmax
 * (ties to the lowest id, as torch.argmax). Returns 0, or -1 with an error: an empty prompt, a
 * prompt longer than the model's context, max_new_tokens < 1, bad sampling parameters, a token
 * id outside the vocabulary. */
int generate(const Model *m, const int32_t *const *prompts, const int *prompt_lens, int n_prompts,
             const GenerateOptions *opt, Completion *out);

void completions_free(Completion *c, int n);

/* A test hook in generate()'s place (GRPO under RLHF_TEST_SCRIPTED_COMPLETIONS=1): completions
 * drawn from each completion's random stream alone (seed, first_stream + its number), without
 * the model. A completion has 1 to max_new_tokens ids in [0, vocab); one shorter than
 * max_new_tokens ends with eos_ids[0], as a sampled one stops there; log-probs are 0. Tests that
 * compare runs whose policies differ in their last bits (one process against several ranks) use
 * it, so that the completions cannot differ: sampling from two such policies may, rarely. */
void generate_scripted(int vocab, int n_prompts, const GenerateOptions *opt, Completion *out);

#endif
