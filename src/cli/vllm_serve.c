/* rlhf vllm-serve CONFIG.yaml [--key value ...]: Axolotl's `axolotl vllm-serve config.yaml`.
 * It reads the training config (the same file `rlhf train` reads, overrides included, e.g.
 * --vllm.port 8001), takes the model from base_model (resolved as train resolves it: a local
 * directory, the HF cache or the Hub) and the server's settings from the vllm: block, and runs
 * `rlhf serve` with them, so that a GRPO run with vllm_mode: server against vllm.host/vllm.port
 * is Axolotl's two-terminal recipe. What each vllm: key does is in config/key_status.c; the
 * values are checked here, before the model is loaded. */
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
    "server then generates on it (`rlhf train CONFIG.yaml` in a second terminal).\n";

/* The settings of the vllm: block as `rlhf serve` options. */
typedef struct {
    const char *host;
    char port[16];
    char max_model_len[16]; /* "" when not set */
    bool bf16;
} VllmServeSettings;

/* vllm.<key> of the config (NULL when absent or left empty). */
static const json_t *vllm_key(const TrainConfig *cfg, const char *key) {
    const json_t *v = json_object_get(json_object_get(cfg->raw, "vllm"), key);
    return json_is_null(v) ? NULL : v;
}

static int bad_value(const TrainConfig *cfg, const char *key, const char *expected) {
    return err_set("%s: key 'vllm.%s': expected %s", cfg->source, key, expected);
}

/* A parallel size: 1 or absent. */
static int check_parallel(const TrainConfig *cfg, const char *key, const char *what) {
    const json_t *v = vllm_key(cfg, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return bad_value(cfg, key, "a positive integer");
    if (json_integer_value(v) > 1)
        return err_set("%s: key 'vllm.%s': %lld is not supported: rlhf serve runs one engine in "
                       "one process on the CPU (%s; its threads: OMP_NUM_THREADS); set it to 1 "
                       "or remove it",
                       cfg->source, key, (long long)json_integer_value(v), what);
    return 0;
}

/* Reads and checks the vllm: block into *s. Returns 0, or -1 with an error naming the file and
 * the key. */
static int read_settings(const TrainConfig *cfg, VllmServeSettings *s) {
    memset(s, 0, sizeof *s);
    s->host = "0.0.0.0"; /* Axolotl's VllmConfig default */
    snprintf(s->port, sizeof s->port, "8000");
    const json_t *v;
    if ((v = vllm_key(cfg, "host"))) {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return bad_value(cfg, "host", "a host name or address (e.g. 0.0.0.0 or 127.0.0.1)");
        s->host = json_string_value(v);
    }
    if ((v = vllm_key(cfg, "port"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535)
            return bad_value(cfg, "port", "a port number (0..65535; 0 picks a free one)");
        snprintf(s->port, sizeof s->port, "%lld", (long long)json_integer_value(v));
    }
    if ((v = vllm_key(cfg, "dtype"))) {
        const char *d = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(d, "bfloat16") == 0)
            s->bf16 = true;
        else if (strcmp(d, "float16") == 0 || strcmp(d, "half") == 0)
            return err_set("%s: key 'vllm.dtype': %s is not supported: rlhf.c computes in fp32 "
                           "or bf16 (use auto, float32 or bfloat16)",
                           cfg->source, d);
        else if (strcmp(d, "auto") != 0 && strcmp(d, "float32") != 0 && strcmp(d, "float") != 0)
            return bad_value(cfg, "dtype", "auto, float32 (float), bfloat16, float16 (half)");
    }
    if ((v = vllm_key(cfg, "max_model_len"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 30)
            return bad_value(cfg, "max_model_len", "a positive number of tokens");
        snprintf(s->max_model_len, sizeof s->max_model_len, "%lld",
                 (long long)json_integer_value(v));
    }
    if (check_parallel(cfg, "tensor_parallel_size", "no tensor parallelism") != 0 ||
        check_parallel(cfg, "data_parallel_size", "no engine replicas") != 0)
        return -1;
    return 0;
}

/* Names each no-op key the block sets, with why it has no effect (config/key_status.c). */
static void note_noop_keys(const TrainConfig *cfg) {
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(cfg->raw, "vllm"), key, v) {
        const KeyStatusRow *row = key_status_find(KEY_SCOPE_VLLM, key);
        if (row && row->status == KEY_NOOP && !json_is_null(v))
            fprintf(stderr, "rlhf vllm-serve: vllm.%s has no effect: %s\n", key, row->reason);
    }
}

int cli_vllm_serve(int argc, char **argv) {
    TrainConfig cfg;
    int rc = cli_read_config(argc, argv, "vllm-serve", vllm_serve_usage, &cfg);
    if (rc == CLI_HELP_SHOWN) return CLI_EXIT_OK;
    if (rc != 0) return rc;
    VllmServeSettings s;
    if (read_settings(&cfg, &s) != 0) {
        rc = cli_fail(err_msg());
        train_config_free(&cfg);
        return rc;
    }
    note_noop_keys(&cfg);
    /* the name clients see: the Hub id when base_model was one, else the path as given */
    const char *name = cfg.base_model_id ? cfg.base_model_id : cfg.base_model;
    char *args[12];
    int n = 0;
    args[n++] = cfg.base_model; /* local after cli_read_config (train_config_resolve_models) */
    args[n++] = "--host";
    args[n++] = (char *)s.host;
    args[n++] = "--port";
    args[n++] = s.port;
    args[n++] = "--served-model-name";
    args[n++] = (char *)name;
    if (s.max_model_len[0]) {
        args[n++] = "--max-model-len";
        args[n++] = s.max_model_len;
    }
    if (s.bf16) args[n++] = "--bf16";
    args[n] = NULL;
    fprintf(stderr, "rlhf vllm-serve: rlhf serve %s --host %s --port %s%s%s%s\n", cfg.base_model,
            s.host, s.port, s.max_model_len[0] ? " --max-model-len " : "", s.max_model_len,
            s.bf16 ? " --bf16" : "");
    rc = cli_serve(n, args);
    train_config_free(&cfg);
    return rc;
}
