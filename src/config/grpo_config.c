#include "config/grpo_config.h"

#include "common/error.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const json_t *trl;
    char at[512]; /* "file:line" of the trl: block, or the file when there is none */
    const char *source;
    const json_t *lines; /* {key: line} of the block's keys; may be NULL */
    char key_at[512];    /* key_at()'s answer */
} Block;

/* "file:line" of a key of the block (its own line when known, else the block's). */
static const char *key_at(Block *b, const char *key) {
    const json_t *line = b->lines ? json_object_get(b->lines, key) : NULL;
    if (!json_is_integer(line)) return b->at;
    snprintf(b->key_at, sizeof b->key_at, "%s:%lld", b->source,
             (long long)json_integer_value(line));
    return b->key_at;
}

static const json_t *member(const Block *b, const char *key) {
    const json_t *v = b->trl ? json_object_get(b->trl, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

static int bad(const Block *b, const char *key, const char *expected) {
    return err_set("%s: key 'trl.%s': expected %s", key_at((Block *)b, key), key, expected);
}

static int read_int(const Block *b, const char *key, int min, int *out) {
    const json_t *v = member(b, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > 1 << 30) {
        char what[64];
        snprintf(what, sizeof what, "an integer >= %d", min);
        return bad(b, key, what);
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int read_double(const Block *b, const char *key, double *out) {
    const json_t *v = member(b, key);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(b, key, "a number");
    *out = json_number_value(v);
    return 0;
}

static int read_bool(const Block *b, const char *key, bool *out) {
    const json_t *v = member(b, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(b, key, "true or false");
    *out = json_is_true(v);
    return 0;
}

/* A string member that must be one of `names`; *out is its index. */
static int read_choice(const Block *b, const char *key, const char *const *names, int n,
                       const char *expected, int *out) {
    const json_t *v = member(b, key);
    if (!v) return 0;
    for (int i = 0; json_is_string(v) && i < n; i++)
        if (strcmp(json_string_value(v), names[i]) == 0) return *out = i, 0;
    return bad(b, key, expected);
}

/* TRL's generation-server keys: use_vllm with vllm_mode server (colocate: the in-process
 * engine, which is what rlhf.c's colocated generation is; absent: server, Axolotl's default)
 * and where the server is:
 * vllm_server_base_url, else http://vllm_server_host:vllm_server_port (TRL's VLLMClient rule). */
static int read_vllm_server(const Block *b, GrpoConfig *g) {
    static const char *const modes[] = {"colocate", "server"};
    bool use = false;
    int mode = 0, port = 8000;
    g->vllm_server_timeout = 240;
    if (read_bool(b, "use_vllm", &use) ||
        read_choice(b, "vllm_mode", modes, 2, "server or colocate", &mode) ||
        read_int(b, "vllm_server_port", 1, &port) ||
        read_double(b, "vllm_server_timeout", &g->vllm_server_timeout))
        return -1;
    if (port > 65535) return bad(b, "vllm_server_port", "a port number (1..65535)");
    if (!(g->vllm_server_timeout > 0))
        return bad(b, "vllm_server_timeout", "a number of seconds > 0");
    const json_t *host = member(b, "vllm_server_host"), *url = member(b, "vllm_server_base_url");
    if (host && (!json_is_string(host) || !*json_string_value(host)))
        return bad(b, "vllm_server_host", "a host name or address");
    if (url && (!json_is_string(url) || strncmp(json_string_value(url), "http://", 7) != 0))
        return bad(b, "vllm_server_base_url", "an http:// URL (e.g. http://127.0.0.1:8000)");
    /* Axolotl: use_vllm without vllm_mode means server (the caller warns, as Axolotl does); the
     * Python API always gives vllm_mode (TRL's default there: colocate) */
    g->vllm_mode_defaulted = use && !member(b, "vllm_mode");
    if (g->vllm_mode_defaulted) mode = 1;
    if (!use || mode != 1) return 0;
    char buf[1024];
    if (url)
        snprintf(buf, sizeof buf, "%s", json_string_value(url));
    else
        snprintf(buf, sizeof buf, "http://%s:%d", host ? json_string_value(host) : "0.0.0.0", port);
    size_t n = strlen(buf);
    while (n > 7 && buf[n - 1] == '/')
        buf[--n] = '\0';
    g->vllm_server_url = xstrdup(buf);
    return 0;
}

static int read_loss_type(const Block *b, GrpoLossType *out) {
    static const char *const names[] = {"grpo", "bnpo", "dr_grpo", "dapo"};
    const json_t *v = member(b, "loss_type");
    if (!v) return 0;
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return *out = (GrpoLossType)i, 0;
    if (!strcmp(s, "cispo") || !strcmp(s, "sapo") || !strcmp(s, "luspo") || !strcmp(s, "vespo"))
        return err_set("%s: key 'trl.loss_type': \"%s\" is not supported by rlhf.c yet "
                       "(grpo, bnpo, dr_grpo, dapo)",
                       key_at((Block *)b, "loss_type"), s);
    return bad(b, "loss_type", "one of grpo, bnpo, dr_grpo, dapo");
}

/* scale_rewards: group | batch | none, or TRL's booleans (true: group, false: none). */
static int read_scale_rewards(const Block *b, RewardScaling *out) {
    const json_t *v = member(b, "scale_rewards");
    if (!v) return 0;
    if (json_is_boolean(v))
        return *out = json_is_true(v) ? REWARD_SCALE_GROUP : REWARD_SCALE_NONE, 0;
    static const char *const names[] = {"group", "batch", "none"};
    int i;
    if (!json_is_string(v) || read_choice(b, "scale_rewards", names, 3, "", &i) != 0)
        return bad(b, "scale_rewards", "group, batch, none, true or false");
    *out = (RewardScaling)i;
    return 0;
}

/* trl.generation_kwargs: the generation settings rlhf.c's engine has (transformers'
 * GenerationConfig names, and vLLM's `stop` / `max_tokens`); any other key is refused rather than
 * ignored, since it would change what is generated. */
static int read_generation_kwargs(const Block *b, GrpoConfig *g) {
    g->gen_temperature = g->gen_top_p = g->gen_min_p = g->gen_repetition_penalty = NAN;
    g->gen_top_k = g->gen_max_new_tokens = g->gen_do_sample = -1;
    const json_t *kw = member(b, "generation_kwargs");
    if (!kw) return 0;
    if (!json_is_object(kw)) return bad(b, "generation_kwargs", "a mapping");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)kw, k, v) {
        double *d = !strcmp(k, "temperature")          ? &g->gen_temperature
                    : !strcmp(k, "top_p")              ? &g->gen_top_p
                    : !strcmp(k, "min_p")              ? &g->gen_min_p
                    : !strcmp(k, "repetition_penalty") ? &g->gen_repetition_penalty
                                                       : NULL;
        int *i = !strcmp(k, "top_k")                                        ? &g->gen_top_k
                 : !strcmp(k, "max_new_tokens") || !strcmp(k, "max_tokens") ? &g->gen_max_new_tokens
                                                                            : NULL;
        if (json_is_null(v)) continue;
        if (d) {
            if (!json_is_number(v))
                return bad(b, "generation_kwargs", "numbers for the sampling keys");
            *d = json_number_value(v);
        } else if (i) {
            if (!json_is_integer(v) || json_integer_value(v) < (i == &g->gen_top_k ? 0 : 1) ||
                json_integer_value(v) > 1 << 20)
                return err_set("%s: key 'trl.generation_kwargs.%s': expected an integer >= %d",
                               b->at, k, i == &g->gen_top_k ? 0 : 1);
            *i = (int)json_integer_value(v);
        } else if (!strcmp(k, "do_sample")) {
            if (!json_is_boolean(v)) return bad(b, "generation_kwargs", "do_sample: true or false");
            g->gen_do_sample = json_is_true(v);
        } else if (!strcmp(k, "stop_strings") || !strcmp(k, "stop")) {
            json_t *list = json_is_string(v) ? json_pack("[O]", v) : json_incref(v);
            size_t n;
            json_t *s;
            bool ok = json_is_array(list) && json_array_size(list) > 0;
            json_array_foreach(list, n, s) ok =
                ok && json_is_string(s) && json_string_length(s) > 0;
            if (!ok) {
                json_decref(list);
                return err_set("%s: key 'trl.generation_kwargs.%s': expected a non-empty string "
                               "or a list of them",
                               b->at, k);
            }
            if (!g->stop_strings) g->stop_strings = json_array();
            json_array_extend(g->stop_strings, list);
            json_decref(list);
        } else {
            return err_set("%s: key 'trl.generation_kwargs.%s' is not supported by rlhf.c's "
                           "generation (it has temperature, top_p, top_k, min_p, "
                           "repetition_penalty, max_new_tokens / max_tokens, do_sample, "
                           "stop_strings / stop)",
                           b->at, k);
        }
    }
    return 0;
}

static int read_rewards(const Block *b, GrpoConfig *g) {
    const json_t *funcs = member(b, "reward_funcs");
    if (!funcs || !json_is_array(funcs) || json_array_size(funcs) == 0)
        return err_set("%s: key 'trl.reward_funcs': GRPO needs at least one reward function "
                       "(e.g. [\"rewards.my_reward\"] for a function in ./rewards.py, or "
                       "\"builtin.accuracy\")",
                       key_at((Block *)b, "reward_funcs"));
    g->reward_funcs = funcs;
    g->n_reward_funcs = (int)json_array_size(funcs);
    g->reward_weights = xmalloc((size_t)g->n_reward_funcs * sizeof *g->reward_weights);
    for (int i = 0; i < g->n_reward_funcs; i++)
        g->reward_weights[i] = 1.0;
    const json_t *w = member(b, "reward_weights");
    if (!w) return 0;
    if (!json_is_array(w)) return bad(b, "reward_weights", "a list of numbers");
    if ((int)json_array_size(w) != g->n_reward_funcs)
        return err_set("%s: Number of reward weights (%zu) must match number of reward "
                       "functions (%d)",
                       key_at((Block *)b, "reward_weights"), json_array_size(w), g->n_reward_funcs);
    for (int i = 0; i < g->n_reward_funcs; i++) {
        const json_t *x = json_array_get(w, (size_t)i);
        if (!json_is_number(x)) return bad(b, "reward_weights", "a list of numbers");
        g->reward_weights[i] = json_number_value(x);
    }
    return 0;
}

static long gcd(long a, long b) {
    return b ? gcd(b, a % b) : a;
}

/* TRL's GRPOConfig.__post_init__ geometry, with Axolotl's message for a generation batch that
 * does not hold whole groups. micro_batch_size is per process, so a generation batch is
 * micro_batch_size x world x steps_per_generation completions. */
static int derive_geometry(const Block *b, GrpoConfig *g, const GrpoBatchShape *s, bool gbs_set,
                           bool spg_set) {
    int world = s->world_size > 0 ? s->world_size : 1;
    int mb = s->micro_batch_size, ga = s->gradient_accumulation_steps, G = g->num_generations;
    int global = mb * world;
    if (gbs_set && spg_set)
        return err_set("%s: 'generation_batch_size' and 'steps_per_generation' can not be both "
                       "configured at the same time",
                       b->at);
    if (gbs_set) {
        if (g->generation_batch_size % global != 0)
            return err_set("%s: generation_batch_size (%d) must be divisible by the global batch "
                           "size (%d).",
                           b->at, g->generation_batch_size, global);
        g->steps_per_generation = g->generation_batch_size / global;
    } else {
        if (!spg_set) g->steps_per_generation = ga;
        g->generation_batch_size = global * g->steps_per_generation;
    }
    if (g->generation_batch_size % G != 0) {
        char source[160], hint[256] = "", processes[48] = "";
        if (world > 1) snprintf(processes, sizeof processes, " * processes (%d)", world);
        if (gbs_set)
            snprintf(source, sizeof source, "trl.generation_batch_size");
        else if (spg_set)
            snprintf(source, sizeof source,
                     "micro_batch_size (%d)%s * trl.steps_per_generation (%d)", mb, processes,
                     g->steps_per_generation);
        else {
            snprintf(source, sizeof source,
                     "micro_batch_size (%d)%s * gradient_accumulation_steps (%d)", mb, processes,
                     ga);
            long need = (long)G / gcd(G, global); /* lcm(G, global) / global */
            snprintf(hint, sizeof hint,
                     " Smallest fix: set `gradient_accumulation_steps: %ld` (so micro_batch_size * "
                     "%sGA = %ld is a multiple of %d).",
                     need, world > 1 ? "processes * " : "", need * global, G);
        }
        return err_set("%s: GRPO: generation batch size must be divisible by "
                       "`trl.num_generations`. Got effective_gbs=%d (from %s) and "
                       "num_generations=%d.%s",
                       b->at, g->generation_batch_size, source, G, hint);
    }
    if (s->evaluating && mb % g->num_generations_eval != 0)
        return err_set("%s: The global eval batch size (%d * 1) must be divisible by the number "
                       "of generations used for evaluation (%d).",
                       b->at, mb, g->num_generations_eval);
    return 0;
}

int grpo_config_read(GrpoConfig *g, const json_t *trl, bool gdpo, double beta,
                     const GrpoBatchShape *shape, const char *source, int line,
                     const json_t *key_lines) {
    *g = (GrpoConfig){.num_generations = 8,
                      .max_completion_length = 256,
                      .temperature = 1,
                      .top_p = 1,
                      .repetition_penalty = 1,
                      .beta = isnan(beta) ? 0.0 : beta,
                      .num_iterations = 1,
                      .epsilon = 0.2,
                      .epsilon_high = NAN,
                      .delta = NAN,
                      .normalize_then_sum = gdpo,
                      .scale_rewards = REWARD_SCALE_GROUP,
                      .loss_type = GRPO_LOSS_DAPO,
                      .top_entropy_quantile = 1,
                      .shuffle_dataset = true,
                      .num_completions_to_print = INT_MAX,
                      .ref_model_mixup_alpha = 0.6,
                      .ref_model_sync_steps = 512,
                      .gen_temperature = NAN,
                      .gen_top_p = NAN,
                      .gen_min_p = NAN,
                      .gen_repetition_penalty = NAN,
                      .gen_top_k = -1,
                      .gen_max_new_tokens = -1,
                      .gen_do_sample = -1};
    Block b = {.trl = trl, .source = source, .lines = key_lines};
    if (line > 0)
        snprintf(b.at, sizeof b.at, "%s:%d", source, line);
    else
        snprintf(b.at, sizeof b.at, "%s", source);
    static const char *const levels[] = {"token", "sequence"};
    static const char *const aggregations[] = {"sum_then_normalize", "normalize_then_sum"};
    int level = 0, aggregation = gdpo ? 1 : 0;
    bool gbs_set = member(&b, "generation_batch_size") != NULL;
    bool spg_set = member(&b, "steps_per_generation") != NULL;
    if (read_int(&b, "num_generations", 1, &g->num_generations) ||
        read_int(&b, "num_generations_eval", 1, &g->num_generations_eval) ||
        read_int(&b, "generation_batch_size", 1, &g->generation_batch_size) ||
        read_int(&b, "steps_per_generation", 1, &g->steps_per_generation) ||
        read_int(&b, "max_completion_length", 1, &g->max_completion_length) ||
        read_double(&b, "temperature", &g->temperature) || read_double(&b, "top_p", &g->top_p) ||
        read_int(&b, "top_k", 0, &g->top_k) || read_double(&b, "min_p", &g->min_p) ||
        read_double(&b, "repetition_penalty", &g->repetition_penalty) ||
        read_int(&b, "num_iterations", 1, &g->num_iterations) ||
        read_double(&b, "epsilon", &g->epsilon) ||
        read_double(&b, "epsilon_high", &g->epsilon_high) || read_double(&b, "delta", &g->delta) ||
        read_choice(&b, "importance_sampling_level", levels, 2, "token or sequence", &level) ||
        read_choice(&b, "multi_objective_aggregation", aggregations, 2,
                    "sum_then_normalize or normalize_then_sum", &aggregation) ||
        read_scale_rewards(&b, &g->scale_rewards) || read_loss_type(&b, &g->loss_type) ||
        read_bool(&b, "mask_truncated_completions", &g->mask_truncated_completions) ||
        read_double(&b, "top_entropy_quantile", &g->top_entropy_quantile) ||
        read_bool(&b, "use_bias_correction_kl", &g->use_bias_correction_kl) ||
        read_int(&b, "replay_buffer_size", -(1 << 30), &g->replay_buffer_size) ||
        read_bool(&b, "shuffle_dataset", &g->shuffle_dataset) ||
        read_bool(&b, "log_completions", &g->log_completions) ||
        read_int(&b, "num_completions_to_print", -(1 << 30), &g->num_completions_to_print) ||
        read_bool(&b, "sync_ref_model", &g->sync_ref_model) ||
        read_double(&b, "ref_model_mixup_alpha", &g->ref_model_mixup_alpha) ||
        read_int(&b, "ref_model_sync_steps", 1, &g->ref_model_sync_steps) ||
        read_int(&b, "max_prompt_length", 1, &g->max_prompt_length))
        return -1;
    g->sequence_level_is = level == 1;
    if (gdpo && aggregation == 0)
        return err_set("%s: `multi_objective_aggregation` value set as `sum_then_normalize` => "
                       "GRPO, but GDPO was selected",
                       b.at);
    g->normalize_then_sum = aggregation == 1;
    if (g->num_generations < 2)
        return err_set("%s: GRPO requires `trl.num_generations >= 2` (got %d). With "
                       "num_generations=1, every group has zero advantage and the policy never "
                       "updates.",
                       key_at(&b, "num_generations"), g->num_generations);
    if (!g->num_generations_eval) g->num_generations_eval = g->num_generations;
    if (isnan(g->epsilon_high)) g->epsilon_high = g->epsilon;
    if (g->temperature <= 0) return bad(&b, "temperature", "a number > 0");
    if (g->top_p <= 0 || g->top_p > 1) return bad(&b, "top_p", "a number in (0, 1]");
    if (g->min_p < 0 || g->min_p > 1) return bad(&b, "min_p", "a number in [0, 1]");
    if (g->repetition_penalty <= 0) return bad(&b, "repetition_penalty", "a number > 0");
    if (g->epsilon < 0 || g->epsilon_high < 0) return bad(&b, "epsilon", "a number >= 0");
    if (!isnan(g->delta) && g->delta <= 1) return bad(&b, "delta", "a number > 1 (or null)");
    if (g->top_entropy_quantile < 0 || g->top_entropy_quantile > 1)
        return bad(&b, "top_entropy_quantile", "a number in [0, 1]");
    if (g->beta < 0) return err_set("%s: key 'trl.beta': must not be negative", key_at(&b, "beta"));
    if (g->sync_ref_model && g->beta == 0)
        return err_set("%s: You passed `sync_ref_model=True` while `beta=0.0`, which means the "
                       "reference model is not used during training. Consequently, GRPOTrainer "
                       "does not create a `ref_model` instance, and there is nothing to "
                       "synchronize. Please set `sync_ref_model=False`, or set `beta` to a "
                       "non-zero value.",
                       key_at(&b, "sync_ref_model"));
    if (g->replay_buffer_size < 0) g->replay_buffer_size = 0; /* <= 0 disables */
    const json_t *rollout = member(&b, "rollout_func");
    /* {callback: NAME}: what the Python API's GRPOTrainer(rollout_func=callable) writes */
    const json_t *callback = json_is_object(rollout) && json_object_size(rollout) == 1
                                 ? json_object_get(rollout, "callback")
                                 : NULL;
    g->rollout_callback = json_is_string(callback) && *json_string_value(callback);
    if (g->rollout_callback) rollout = callback;
    if (rollout && (!json_is_string(rollout) ||
                    (!g->rollout_callback && !strchr(json_string_value(rollout), '.'))))
        return bad(&b, "rollout_func", "a Python function 'module.function'");
    g->rollout_func = rollout ? json_string_value(rollout) : NULL;
    if (g->rollout_func && g->replay_buffer_size > 0)
        return err_set("%s: key 'trl.rollout_func' with trl.replay_buffer_size: not supported "
                       "together by rlhf.c yet",
                       b.at);
    if (g->rollout_func && shape->world_size > 1)
        return err_set("%s: key 'trl.rollout_func': not supported with several processes by "
                       "rlhf.c yet (each would need its own share of the prompts)",
                       b.at);
    /* vllm_mode: server over several processes (rank 0 asks the server for every rank) and
     * with a rollout function (its generate() calls go to the server) are both taken */
    int rc = read_vllm_server(&b, g);
    if (rc != 0) {
        grpo_config_free(g);
        return -1;
    }
    const json_t *kw = member(&b, "chat_template_kwargs");
    if (kw && !json_is_object(kw)) return bad(&b, "chat_template_kwargs", "a mapping");
    g->chat_template_kwargs = kw;
    if (read_generation_kwargs(&b, g) != 0 ||
        derive_geometry(&b, g, shape, gbs_set, spg_set) != 0 || read_rewards(&b, g) != 0) {
        grpo_config_free(g);
        return -1;
    }
    return 0;
}

void grpo_config_free(GrpoConfig *g) {
    free(g->vllm_server_url);
    g->vllm_server_url = NULL;
    json_decref(g->stop_strings);
    g->stop_strings = NULL;
    free(g->reward_weights);
    g->reward_weights = NULL;
}

const char *grpo_loss_type_name(GrpoLossType t) {
    static const char *const names[] = {"grpo", "bnpo", "dr_grpo", "dapo"};
    return names[t];
}

GrpoLossOptions grpo_loss_options_from_config(const GrpoConfig *g) {
    return (GrpoLossOptions){.loss_type = g->loss_type,
                             .epsilon = g->epsilon,
                             .epsilon_high = g->epsilon_high,
                             .delta = g->delta,
                             .beta = g->beta,
                             .sequence_level_is = g->sequence_level_is,
                             .use_bias_correction_kl = g->use_bias_correction_kl,
                             .top_entropy_quantile = g->top_entropy_quantile,
                             .max_completion_length = g->max_completion_length};
}
