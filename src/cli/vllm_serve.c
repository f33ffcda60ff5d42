/* rlhf vllm-serve CONFIG.yaml [--key value ...]: Axolotl's `axolotl vllm-serve config.yaml`.
 * It reads the training config (the same file `rlhf train` reads, overrides included, e.g.
 * --vllm.port 8001), takes the model from base_model (resolved as train resolves it: a local
 * directory, the HF cache or the Hub) and the server's settings from the vllm: block, and runs
 * `rlhf serve` with them, so that a GRPO run with vllm_mode: server against vllm.host/vllm.port
 * is Axolotl's two-terminal recipe. What each vllm: key does is in config/key_status.c; the
 * values are checked here, before the model is loaded.
 *
 * Axolotl's own options of the command (--host, --port, --tensor-parallel-size, ...: the fields
 * of its VllmServeCliArgs, axolotl/cli/args.py) are accepted too: each is the vllm: key of the
 * same name, given on the command line, and so takes precedence over the file's value as
 * Axolotl's `cli_args.get(key) or cfg.vllm.key` does; it is then checked, used, refused or named
 * as a no-op exactly as that key is, an error naming the option. */
#include "cli/commands.h"

#include "common/error.h"
#include "config/key_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char vllm_serve_usage[] =
    "usage: rlhf vllm-serve CONFIG.yaml [--key value ...]\n"
    "\n"
    "Starts `rlhf serve` for the config's base_model with the settings of its vllm: block, as\n"
    "`axolotl vllm-serve` does: host (default 0.0.0.0), port (default 8000; 0 picks a free one),\n"
    "dtype (auto or float32: fp32 weights; bfloat16: bf16 weights, which take no weight\n"
    "updates), max_model_len (caps prompt + completion tokens). tensor_parallel_size and\n"
    "data_parallel_size above 1 are refused (one engine process on the CPU); the GPU-only keys\n"
    "(gpu_memory_utilization, enable_prefix_caching, enforce_eager, ...) have no effect and are\n"
    "named when set. --key value overrides a key of the file, e.g. --vllm.port 8001. A GRPO\n"
    "config with trl.use_vllm: true, vllm_mode: server and vllm_server_host/port naming this\n"
    "server then generates on it (`rlhf train CONFIG.yaml` in a second terminal).\n"
    "\n"
    "Axolotl's options set the vllm: key of the same name over the file's: --host, --port,\n"
    "--tensor-parallel-size, --data-parallel-size, --gpu-memory-utilization, --dtype,\n"
    "--max-model-len, --serve-module, --reasoning-parser (each with a value, or --opt=value),\n"
    "--enable-prefix-caching / --no-enable-prefix-caching, --enable-reasoning /\n"
    "--no-enable-reasoning.\n";

/* Axolotl's `vllm-serve` options: click's --name-with-dashes of each VllmServeCliArgs field
 * (booleans as --flag / --no-flag, taking no value), and the vllm: key each one sets. */
static const struct {
    const char *option, *key;
    bool boolean;
} axolotl_options[] = {
    {"--tensor-parallel-size", "tensor_parallel_size", false},
    {"--data-parallel-size", "data_parallel_size", false},
    {"--host", "host", false},
    {"--port", "port", false},
    {"--gpu-memory-utilization", "gpu_memory_utilization", false},
    {"--dtype", "dtype", false},
    {"--max-model-len", "max_model_len", false},
    {"--enable-prefix-caching", "enable_prefix_caching", true},
    {"--serve-module", "serve_module", false},
    {"--enable-reasoning", "enable_reasoning", true},
    {"--reasoning-parser", "reasoning_parser", false},
};
#define N_AXOLOTL_OPTIONS (sizeof axolotl_options / sizeof *axolotl_options)

/* The command line with Axolotl's options rewritten as the config overrides they are
 * (--port 8001 -> --vllm.port 8001, --no-enable-prefix-caching -> --vllm.enable_prefix_caching
 * false), and which options were given (for errors and notes). */
typedef struct {
    int argc;
    char **argv;
    char **owned; /* the strings made here, freed with it */
    int n_owned;
    const char *given[N_AXOLOTL_OPTIONS]; /* the option as written, NULL when not given */
} VllmServeArgs;

static char *own(VllmServeArgs *a, char *s) {
    a->owned[a->n_owned++] = s;
    return s;
}

static void vllm_args_free(VllmServeArgs *a) {
    for (int i = 0; i < a->n_owned; i++)
        free(a->owned[i]);
    free(a->owned);
    free(a->argv);
}

/* Rewrites argv into *a. Returns 0, or -1 with an error (an option without its value). */
static int translate_options(int argc, char **argv, VllmServeArgs *a) {
    memset(a, 0, sizeof *a);
    a->argv = xcalloc(2 * (size_t)argc + 1, sizeof *a->argv);
    a->owned = xcalloc(2 * (size_t)argc + 1, sizeof *a->owned);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        bool negated = strncmp(arg, "--no-", 5) == 0;
        size_t k = 0;
        const char *value = NULL;
        for (; k < N_AXOLOTL_OPTIONS; k++) {
            const char *opt = axolotl_options[k].option;
            size_t n = strlen(opt);
            if (axolotl_options[k].boolean) {
                if (strcmp(arg, opt) == 0 || (negated && strcmp(arg + 5, opt + 2) == 0)) break;
            } else if (strncmp(arg, opt, n) == 0 && (arg[n] == '\0' || arg[n] == '=')) {
                value = arg[n] == '=' ? arg + n + 1 : NULL;
                break;
            }
        }
        if (k == N_AXOLOTL_OPTIONS) {
            a->argv[a->argc++] = argv[i];
            continue;
        }
        const char *key = axolotl_options[k].key;
        a->given[k] = axolotl_options[k].boolean ? arg : axolotl_options[k].option;
        if (axolotl_options[k].boolean) {
            value = negated ? "false" : "true";
        } else if (!value) {
            if (i + 1 >= argc) {
                vllm_args_free(a);
                return err_set("rlhf vllm-serve: option %s needs a value",
                               axolotl_options[k].option);
            }
            value = argv[++i];
        }
        size_t n = strlen(key) + 8;
        char *name = own(a, xmalloc(n));
        snprintf(name, n, "--vllm.%s", key);
        a->argv[a->argc++] = name;
        a->argv[a->argc++] = (char *)value;
    }
    return 0;
}

/* The settings of the vllm: block as `rlhf serve` options. */
typedef struct {
    const char *host;
    char port[16];
    char max_model_len[16]; /* "" when not set */
    bool bf16;
    const VllmServeArgs *args; /* which keys came from Axolotl's options */
} VllmServeSettings;

/* vllm.<key> of the config (NULL when absent or left empty). */
static const json_t *vllm_key(const TrainConfig *cfg, const char *key) {
    const json_t *v = json_object_get(json_object_get(cfg->raw, "vllm"), key);
    return json_is_null(v) ? NULL : v;
}

/* Where vllm.<key> came from, for messages: "--port (vllm.port)" when an Axolotl option gave it,
 * else "FILE: key 'vllm.port'". */
static const char *origin(const TrainConfig *cfg, const VllmServeArgs *a, const char *key) {
    static char buf[512];
    for (size_t k = 0; k < N_AXOLOTL_OPTIONS; k++)
        if (a && a->given[k] && strcmp(axolotl_options[k].key, key) == 0) {
            snprintf(buf, sizeof buf, "option %s (vllm.%s)", a->given[k], key);
            return buf;
        }
    snprintf(buf, sizeof buf, "%s: key 'vllm.%s'", cfg->source, key);
    return buf;
}

static int bad_value(const TrainConfig *cfg, const VllmServeSettings *s, const char *key,
                     const char *expected) {
    return err_set("%s: expected %s", origin(cfg, s->args, key), expected);
}

/* A parallel size: 1 or absent. */
static int check_parallel(const TrainConfig *cfg, const VllmServeSettings *s, const char *key,
                          const char *what) {
    const json_t *v = vllm_key(cfg, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return bad_value(cfg, s, key, "a positive integer");
    if (json_integer_value(v) > 1)
        return err_set("%s: %lld is not supported: rlhf serve runs one engine in one process on "
                       "the CPU (%s; its threads: OMP_NUM_THREADS); set it to 1 or remove it",
                       origin(cfg, s->args, key), (long long)json_integer_value(v), what);
    return 0;
}

/* Reads and checks the vllm: block into *s. Returns 0, or -1 with an error naming the file and
 * the key. */
static int read_settings(const TrainConfig *cfg, const VllmServeArgs *args, VllmServeSettings *s) {
    memset(s, 0, sizeof *s);
    s->args = args;
    s->host = "0.0.0.0"; /* Axolotl's VllmConfig default */
    snprintf(s->port, sizeof s->port, "8000");
    const json_t *v;
    if ((v = vllm_key(cfg, "host"))) {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return bad_value(cfg, s, "host", "a host name or address (e.g. 0.0.0.0 or 127.0.0.1)");
        s->host = json_string_value(v);
    }
    if ((v = vllm_key(cfg, "port"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535)
            return bad_value(cfg, s, "port", "a port number (0..65535; 0 picks a free one)");
        snprintf(s->port, sizeof s->port, "%lld", (long long)json_integer_value(v));
    }
    if ((v = vllm_key(cfg, "dtype"))) {
        const char *d = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(d, "bfloat16") == 0)
            s->bf16 = true;
        else if (strcmp(d, "float16") == 0 || strcmp(d, "half") == 0)
            return err_set("%s: %s is not supported: rlhf.c computes in fp32 or bf16 (use auto, "
                           "float32 or bfloat16)",
                           origin(cfg, args, "dtype"), d);
        else if (strcmp(d, "auto") != 0 && strcmp(d, "float32") != 0 && strcmp(d, "float") != 0)
            return bad_value(cfg, s, "dtype", "auto, float32 (float), bfloat16, float16 (half)");
    }
    if ((v = vllm_key(cfg, "max_model_len"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 30)
            return bad_value(cfg, s, "max_model_len", "a positive number of tokens");
        snprintf(s->max_model_len, sizeof s->max_model_len, "%lld",
                 (long long)json_integer_value(v));
    }
    if (check_parallel(cfg, s, "tensor_parallel_size", "no tensor parallelism") != 0 ||
        check_parallel(cfg, s, "data_parallel_size", "no engine replicas") != 0)
        return -1;
    return 0;
}

/* Names each no-op key the block (or an Axolotl option) sets, with why it has no effect
 * (config/key_status.c). */
static void note_noop_keys(const TrainConfig *cfg, const VllmServeArgs *args) {
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(cfg->raw, "vllm"), key, v) {
        const KeyStatusRow *row = key_status_find(KEY_SCOPE_VLLM, key);
        if (!row || row->status != KEY_NOOP || json_is_null(v)) continue;
        const char *from = origin(cfg, args, key);
        bool option = strncmp(from, "option ", 7) == 0;
        fprintf(stderr, "rlhf vllm-serve: %s%s has no effect: %s\n", option ? from : "vllm.",
                option ? "" : key, row->reason);
    }
}

int cli_vllm_serve(int argc, char **argv) {
    VllmServeArgs args;
    if (translate_options(argc, argv, &args) != 0) {
        fprintf(stderr, "%s\n%s", err_msg(), vllm_serve_usage);
        return CLI_EXIT_USAGE;
    }
    TrainConfig cfg;
    int rc = cli_read_config(args.argc, args.argv, "vllm-serve", vllm_serve_usage, &cfg);
    if (rc != 0) {
        vllm_args_free(&args);
        return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    }
    VllmServeSettings s;
    if (read_settings(&cfg, &args, &s) != 0) {
        rc = cli_fail(err_msg());
        train_config_free(&cfg);
        vllm_args_free(&args);
        return rc;
    }
    note_noop_keys(&cfg, &args);
    /* the name clients see: the Hub id when base_model was one, else the path as given */
    const char *name = cfg.base_model_id ? cfg.base_model_id : cfg.base_model;
    char *serve_args[12];
    int n = 0;
    serve_args[n++] =
        cfg.base_model; /* local after cli_read_config (train_config_resolve_models) */
    serve_args[n++] = "--host";
    serve_args[n++] = (char *)s.host;
    serve_args[n++] = "--port";
    serve_args[n++] = s.port;
    serve_args[n++] = "--served-model-name";
    serve_args[n++] = (char *)name;
    if (s.max_model_len[0]) {
        serve_args[n++] = "--max-model-len";
        serve_args[n++] = s.max_model_len;
    }
    if (s.bf16) serve_args[n++] = "--bf16";
    serve_args[n] = NULL;
    fprintf(stderr, "rlhf vllm-serve: rlhf serve %s --host %s --port %s%s%s%s\n", cfg.base_model,
            s.host, s.port, s.max_model_len[0] ? " --max-model-len " : "", s.max_model_len,
            s.bf16 ? " --bf16" : "");
    rc = cli_serve(n, serve_args);
    train_config_free(&cfg);
    vllm_args_free(&args);
    return rc;
}
