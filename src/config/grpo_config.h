/* GRPO's settings (rl: grpo / rl: gdpo): the trl: block read into typed fields with TRL 1.9's
 * GRPOConfig defaults, Axolotl's validation rules (axolotl-config.md §8.2 rules 4-5) and the
 * batch geometry TRL derives (trl-methods.md §5.1). */
#ifndef RLHF_CONFIG_GRPO_CONFIG_H
#define RLHF_CONFIG_GRPO_CONFIG_H

#include "methods/grpo_advantages.h"
#include "methods/grpo_loss.h"

#include <math.h>

#include <jansson.h>
#include <stdbool.h>

typedef struct {
    int num_generations;       /* G: completions per prompt (8) */
    int num_generations_eval;  /* G for evaluation (num_generations) */
    int steps_per_generation;  /* micro-batches per generation batch and rank (derived) */
    int generation_batch_size; /* completions per generation batch, all ranks (derived) */
    int max_completion_length; /* 256 (TRL 1.9.0) */
    double temperature, top_p, min_p, repetition_penalty; /* 1, 1, 0 (none), 1 */
    int top_k;                                            /* 0: none */
    double beta;                                          /* KL coefficient (0) */
    int num_iterations;                                   /* passes over a generation batch (1) */
    double epsilon, epsilon_high; /* clip range; epsilon_high defaults to epsilon */
    double delta;                 /* two-sided clip upper bound; NAN: none */
    bool sequence_level_is;       /* importance_sampling_level: sequence (GSPO) */
    bool normalize_then_sum;      /* multi_objective_aggregation (GDPO) */
    RewardScaling scale_rewards;  /* group */
    GrpoLossType loss_type;       /* dapo */
    bool mask_truncated_completions;
    double top_entropy_quantile; /* 1: every token */
    bool use_bias_correction_kl;
    const json_t *reward_funcs; /* the trl.reward_funcs array (borrowed from the trl block) */
    double *reward_weights;     /* one per reward function (1.0 each when unset) */
    int n_reward_funcs;
    int replay_buffer_size;             /* 0: no replay buffer (Axolotl's default) */
    const json_t *chat_template_kwargs; /* borrowed; NULL: none */
    bool shuffle_dataset;               /* true */
    bool log_completions;
    int num_completions_to_print; /* INT_MAX: all (TRL's None); <= 0: none */
    const char *rollout_func;     /* trl.rollout_func "module.fn" (borrowed); NULL: the sampler */
    bool rollout_callback;        /* trl.rollout_func {callback: NAME}: rollout_func is NAME, a
                                     callable an embedding program registered (include/rlhf.h) */
    /* use_vllm: true with vllm_mode: server: completions come from a running `rlhf serve` at
     * this base URL ("http://HOST:PORT", or vllm_server_base_url), which the policy's weights
     * are pushed to before each generation (grpo/vllm_server.h); NULL: the in-process engine */
    char *vllm_server_url;
    double vllm_server_timeout;   /* 240: seconds to wait for the server to answer /health/ */
    bool vllm_mode_defaulted;     /* use_vllm without vllm_mode: server, as Axolotl (it warns) */
    bool sync_ref_model;          /* TR-DPO: the reference follows the policy (TRL's callback) */
    double ref_model_mixup_alpha; /* 0.6: reference = alpha * policy + (1 - alpha) * reference */
    int ref_model_sync_steps;     /* 512: every so many optimizer steps */
    int max_prompt_length;        /* 0: none (TRL 1.x); else prompts keep their last tokens */
    /* trl.generation_kwargs: what generation uses over the settings above (TRL updates its
     * generation kwargs with them): NAN / -1 where not given. Training still scores at
     * `temperature`, as TRL does. */
    double gen_temperature, gen_top_p, gen_min_p, gen_repetition_penalty;
    int gen_top_k, gen_max_new_tokens, gen_do_sample;
    json_t *stop_strings; /* owned array of strings (stop_strings / stop); NULL: none */
} GrpoConfig;

/* The batch sizes the trl: block is checked against. */
typedef struct {
    int micro_batch_size, gradient_accumulation_steps;
    bool evaluating; /* a held-out set exists */
    int world_size;  /* processes training together (TRL's num_processes); 0 means 1 */
} GrpoBatchShape;

/* Reads trl (may be NULL) for rl: grpo (gdpo false) or rl: gdpo. beta is the resolved
 * trl.beta > rl_beta value, NAN when neither is set (GRPO's default is then 0). The keys it
 * does not read are the status table's business (config/key_status.c). key_lines ({key: line},
 * may be NULL) lets a message about one key name that key's own line. Returns 0, or -1 with an
 * error "source:line: key 'trl.k': ..." or Axolotl's/TRL's own message for the rules they state. */
int grpo_config_read(GrpoConfig *g, const json_t *trl, bool gdpo, double beta,
                     const GrpoBatchShape *shape, const char *source, int line,
                     const json_t *key_lines);
void grpo_config_free(GrpoConfig *g);

const char *grpo_loss_type_name(GrpoLossType t);

/* The fields of g that grpo_loss reads, copied (nothing borrowed). */
GrpoLossOptions grpo_loss_options_from_config(const GrpoConfig *g);

#endif
