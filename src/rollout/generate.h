/* Batched generation with a KV cache and continuous batching: up to max_batch sequences decode
 * together; when one finishes (an end-of-sequence id, or max_new_tokens) its slot is emptied and
 * the next prompt is prefilled into it in the same step, so a long straggler never holds the
 * others back. Results do not depend on max_batch. */
#ifndef RLHF_ROLLOUT_GENERATE_H
#define RLHF_ROLLOUT_GENERATE_H

#include "model/model.h"

#include <stdint.h>

typedef struct {
    int max_new_tokens;     /* >= 1 */
    const int32_t *eos_ids; /* generation of a sequence stops after any of these */
    int n_eos;
    int max_batch; /* sequences decoding at once; <= 0: all prompts */
} GenerateOptions;

typedef struct {
    int32_t *ids; /* the generated tokens, the stopping eos included */
    int len;
} Completion;

/* Greedy decoding (argmax; ties to the lowest id, as torch.argmax) of n_prompts prompts.
 * out[i] receives prompt i's completion (caller frees with completions_free). Returns 0, or -1
 * with an error: an empty prompt, a prompt longer than the model's context, max_new_tokens < 1,
 * a token id outside the vocabulary. */
int generate_greedy(const Model *m, const int32_t *const *prompts, const int *prompt_lens,
                    int n_prompts, const GenerateOptions *opt, Completion *out);

void completions_free(Completion *c, int n);

#endif
