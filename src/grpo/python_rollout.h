/* trl.rollout_func: a Python function that makes a generation batch's completions in place of
 * the built-in sampler (multi-step agents, environments), resolved as reward functions are
 * ("module.fn", the module looked up in the working directory, then beside the config file) and
 * called once per generation batch, training and evaluation alike. Both published contracts:
 *
 *  - TRL 1.9's rollout_func(prompts, trainer) (two required parameters): prompts is one prompt
 *    per completion (each dataset prompt num_generations times in a row, as GRPOTrainer passes
 *    its inputs); it returns a dict with prompt_ids, completion_ids and logprobs (one list per
 *    completion), optionally env_mask (per completion token: 1 where the policy wrote it, 0
 *    where the environment did; those tokens are attended to but not trained on, as TRL's
 *    tool_mask), and any other key is a column the reward functions receive (a list: one value
 *    per completion; anything else: the same value for all). The completion ids are trained on
 *    as returned (no cut at EOS, as TRL); logprobs are checked for shape and otherwise unused
 *    (TRL reads them only for vLLM's importance-sampling correction; the old log-probs are
 *    recomputed with the policy, as TRL does).
 *  - Axolotl's guide, rollout_func(model, processing_class, prompts, generation_config=None)
 *    (three required parameters, or the first two named so): prompts is one dataset row (a dict
 *    of its columns) per completion, in the same order; it returns one completion string per
 *    row. A string is tokenised without special tokens, as TRL tokenises completion text; one
 *    longer than max_completion_length is cut there (and counts as truncated), a shorter one
 *    ends with EOS (the rollout finished it). The prompt trained on is the dataset's.
 *
 * The objects (Python classes of the module _rlhf_rollout, in python_rollout_module.c) run on
 * this process's engine: model.generate(input_ids, attention_mask=None, generation_config=None,
 * num_return_sequences=1, **sampling) samples with the current policy weights (no copy) and
 * the run's sampling settings (trl.temperature, top_p, top_k, min_p, repetition_penalty,
 * max_completion_length as max_new_tokens; a generation_config or keyword overrides them) and
 * returns the prompt rows followed by their new tokens; processing_class has encode, decode,
 * batch_decode, __call__, apply_chat_template (the run's chat template), eos_token_id,
 * pad_token_id, eos_token, pad_token; trainer has model, processing_class, args (the trl:
 * settings), state (global_step, max_steps, epoch), num_generations. Draws are seeded by the
 * run's seed, the generation batch and the order of the calls, so a run repeats exactly.
 *
 * vllm_mode: server: model.generate asks the generation server for the same draws
 * (grpo/vllm_server.h; the weights of the current step pushed first), and trainer also has
 * use_vllm, vllm_mode and TRL's vllm_client (also at vllm_generation.vllm_client), whose
 * generate() takes VLLMClient.generate's arguments and returns its dict, drawn as model.generate
 * draws. So a rollout trains the same completions in-process and on a server.
 *
 * A rollout function that raises, returns the wrong type or the wrong number of completions,
 * or token ids outside the vocabulary stops training with one error naming it; the checkpoints
 * already written are left as they are. Over several processes it is refused (each rank would
 * need its own share of the prompts). Without Python (python_rollout_absent.c) opening fails
 * with PY_EMBED_ABSENT. */
#ifndef RLHF_GRPO_PYTHON_ROLLOUT_H
#define RLHF_GRPO_PYTHON_ROLLOUT_H

#include "config/train_config.h"
#include "data/grpo_dataset.h"
#include "rollout/generate.h"

#include <jansson.h>
#include <stdint.h>

typedef struct PythonRollout PythonRollout;
struct GrpoRollout;

/* What one call made, per completion row (n_prompts x G). */
typedef struct {
    Completion *comp;     /* the completion ids (logprobs NULL) */
    int32_t **prompt_ids; /* TRL's contract: the prompt each row is trained on; NULL: the
                             dataset's prompts */
    int *prompt_lens;
    uint8_t **env_mask; /* per row, completion length: 1 on the policy's tokens; NULL: all */
    json_t *columns;    /* extra reward columns: name -> array of one value per row; NULL: none */
} RolloutOutput;

/* Resolves spec ("module.fn") and checks it takes one of the two contracts; cfg gives the
 * tokenizer directory and chat template its processing_class uses. callable (a PyObject *, or
 * NULL): the function itself, as an embedding Python program passed it (GRPOTrainer's
 * rollout_func=); spec is then only its name in messages, and a reference is kept until close.
 * Returns 0 with *out, or -1 with an error naming trl.rollout_func and spec. */
int python_rollout_open(PythonRollout **out, const char *spec, void *callable,
                        const TrainConfig *cfg, const Tokenizer *tok, int32_t eos_id,
                        int32_t pad_id);
void python_rollout_close(PythonRollout *pr);

/* Calls the function for the n_prompts x G completion rows of dataset rows idx[] (each G
 * times), generating on `engine` (its model, packed weights, sampling settings, seed) with the
 * draws of `stream`. out is filled (rows = n_prompts x G; free with rollout_output_free).
 * Returns 0, or -1 with an error naming the function (and out empty). */
int python_rollout_run(PythonRollout *pr, struct GrpoRollout *engine, const GrpoDataset *ds,
                       const size_t *idx, int n_prompts, int G, uint64_t stream,
                       const json_t *trainer_state, RolloutOutput *out);

void rollout_output_free(RolloutOutput *o, int rows);

#endif
