/* GRPO generating on a server (TRL's use_vllm: true, vllm_mode: server): the completions of each
 * generation batch come from a running `rlhf serve` through the endpoints TRL's VLLMClient calls
 * (GET /health/, POST /generate/ with token-id prompts), and the policy's weights reach the
 * server before each generation that follows an optimizer step (TRL: when global_step moved
 * since the last sync).
 *
 * The weights: TRL broadcasts them over NCCL (/init_communicator/, /update_named_param/), which
 * needs GPUs on both ends. Here they go over the same HTTP connection as one safetensors file
 * (POST /update_safetensors/, every parameter in fp32 by its transformers name, a LoRA adapter
 * merged into the matrices it adapts, as TRL merges a PEFT model before it sends it): it works
 * between any two hosts, needs no shared file system, and is exact (the server then samples from
 * the very weights the trainer holds). The first generation pushes them too, so a resumed run
 * or a server started from another checkpoint generates with the trainer's weights. A server
 * that does not take them (a real vLLM: 404) is refused with the key named.
 *
 * Sampling: the request carries the run's sampling settings and, in generation_kwargs, the seed
 * the in-process engine would use for this batch (and first_stream, rlhf serve's own key, for a
 * later part of it), so the server draws exactly the completions colocated generation would
 * (same weights, same streams). The completion is cut after the trainer's EOS and after a
 * generation_kwargs stop string, as the in-process engine stops.
 *
 * Several processes: rank 0 alone opens the connection, pushes the weights and asks for every
 * rank's completions (grpo_rollout.c; TRL's main process does the same). */
#ifndef RLHF_GRPO_VLLM_SERVER_H
#define RLHF_GRPO_VLLM_SERVER_H

#include "config/grpo_config.h"
#include "model/model.h"
#include "rollout/generate.h"

#include <stdint.h>
#include <stdio.h>

typedef struct VllmServer VllmServer;

/* Connects to g->vllm_server_url: waits up to g->vllm_server_timeout seconds for GET /health/
 * (TRL's check_server), then checks that it serves one process (/get_world_size/). Returns 0
 * with *out, or -1 with an error naming trl.vllm_mode and the URL. */
int vllm_server_open(VllmServer **out, const GrpoConfig *g, FILE *log);
void vllm_server_close(VllmServer *s);

/* Pushes every parameter of m (POST /update_safetensors/) unless `version` is the one pushed
 * last (the caller's optimizer step; a negative version always pushes). Returns 0, or -1 with
 * an error (a server that does not take weights names the key and what it answered). */
int vllm_server_sync(VllmServer *s, const Model *m, int64_t version);

/* generate() on the server: n_prompts prompts, opt->n_per_prompt completions each (out[i * n +
 * k]), with opt's sampling, max_new_tokens, seed and first_stream (generation_kwargs' seed and
 * first_stream: the draws of in-process generate() with the same options), each cut
 * after the first of opt->eos_ids and where opt->stop_after says. Log-probs are the server's.
 * Returns 0, or -1 with an error naming the server. */
int vllm_server_generate(VllmServer *s, const int32_t *const *prompts, const int *prompt_lens,
                         int n_prompts, const GenerateOptions *opt, Completion *out);

#endif
