#include "cli/commands.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "dist/dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *message) {
    fprintf(stderr, "rlhf: error: %s\n", message);
    return CLI_EXIT_FAILURE;
}

int cli_option(int argc, char **argv, int *i, const char *name, const char **value) {
    if (strcmp(argv[*i], name) != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "rlhf: error: option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int cli_string_options(int argc, char **argv, int *i, const CliStringOption *opts, size_t n) {
    for (size_t k = 0; k < n; k++) {
        int r = cli_option(argc, argv, i, opts[k].name, opts[k].slot);
        if (r != 0) return r;
    }
    return 0;
}

int cli_model_arguments(int argc, char **argv, const char *command, const char *usage,
                        const CliStringOption *opts, size_t n, const char **model, bool *bf16) {
    for (int i = 0; i < argc; i++) {
        int r = cli_string_options(argc, argv, &i, opts, n);
        if (r < 0) return CLI_EXIT_USAGE;
        if (r > 0) continue;
        if (strcmp(argv[i], "--bf16") == 0) {
            *bf16 = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return CLI_HELP_SHOWN;
        } else if (argv[i][0] != '-' && !*model) {
            *model = argv[i];
        } else {
            fprintf(stderr, "rlhf %s: unknown argument \"%s\"\n%s", command, argv[i], usage);
            return CLI_EXIT_USAGE;
        }
    }
    if (!*model) {
        fprintf(stderr, "rlhf %s: a MODEL is required\n%s", command, usage);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

void cli_stream_token(int job, const int32_t *ids, int len, void *ctx) {
    CliTextStream *s = ctx;
    (void)job;
    char *text;
    size_t n;
    if (tokenizer_decode(s->tok, ids, (size_t)len, true, &text, &n) != 0) return;
    while (n >= 3 && memcmp(text + n - 3, "\xEF\xBF\xBD", 3) == 0)
        n -= 3;
    if (n > s->printed) {
        fwrite(text + s->printed, 1, n - s->printed, stdout);
        fflush(stdout);
        s->printed = n;
    }
    free(text);
}

int cli_positive_int(const char *name, const char *text, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || end == text || v < 1 || v > INT_MAX) {
        fprintf(stderr, "rlhf: error: option %s: expected a positive integer, got \"%s\"\n", name,
                text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A LoRA adapter directory given where a model is expected: the error says how to use it. */
static int adapter_given_as_model(const char *dir) {
    char path[4096];
    json_t *cfg = NULL;
    if (path_join(path, sizeof path, dir, "adapter_config.json") != 0 || !file_exists(path) ||
        json_load_path(path, &cfg) != 0)
        return -1; /* not an adapter: model_load's own error stands */
    const char *base = json_string_value(json_object_get(cfg, "base_model_name_or_path"));
    err_set("%s is a LoRA adapter, not a model (it holds adapter_config.json, no model weights): "
            "pass its base model and the adapter, --model %s --adapter %s",
            dir, base ? base : "BASE_MODEL_DIR", dir);
    json_decref(cfg);
    return -1;
}

int cli_resolve_dir(const char **path, const char *option, HubNeed need, char **owned) {
    *owned = NULL;
    if (!*path) return 0;
    if (hub_resolve(*path, NULL, need, option, owned, NULL) != 0) return -1;
    *path = *owned;
    return 0;
}

int cli_resolve_options(int argc, char **argv, const CliDirOption *opts, int n, char ***out) {
    char **copy = xcalloc((size_t)argc + 1, sizeof *copy);
    for (int i = 0; i < argc; i++)
        copy[i] = argv[i];
    for (int i = 0; i + 1 < argc; i++) {
        for (int k = 0; k < n; k++) {
            if (strcmp(argv[i], opts[k].option) != 0) continue;
            const char *value = argv[i + 1];
            char *owned = NULL;
            if (cli_resolve_dir(&value, opts[k].option, opts[k].need, &owned) != 0) {
                cli_free_resolved(argc, copy, argv);
                *out = NULL;
                return -1;
            }
            if (owned) copy[i + 1] = owned;
        }
    }
    *out = copy;
    return 0;
}

void cli_free_resolved(int argc, char **copy, char **argv) {
    if (!copy) return;
    for (int i = 0; i < argc; i++)
        if (copy[i] != argv[i]) free(copy[i]);
    free(copy);
}

int cli_load_model(Model *m, const char *model_dir, const char *adapter_dir, LoraAdapter *lora) {
    memset(lora, 0, sizeof *lora);
    if (model_load(m, model_dir) != 0) {
        adapter_given_as_model(model_dir);
        return -1;
    }
    if (!adapter_dir) return 0;
    if (lora_load(lora, &m->cfg, adapter_dir) != 0) {
        model_free(m);
        return -1;
    }
    m->lora = lora;
    return 0;
}

static int read_config(int argc, char **argv, const char *command, const char *usage,
                       TrainConfig *cfg, bool print_warnings) {
    const char *config = NULL;
    const char **overrides = xcalloc(2 * (size_t)argc + 1, sizeof *overrides);
    int n_overrides = 0, n_names = 0;
    char **names = NULL; /* the names of --key=value overrides */
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            rc = CLI_HELP_SHOWN;
            goto done;
        }
        if (strncmp(argv[i], "--", 2) == 0 && strchr(argv[i], '=')) {
            /* --key=value: the name is copied (argv is not ours to cut) */
            char *eq = strchr(argv[i], '=');
            names = xrealloc(names, (size_t)(n_names + 1) * sizeof *names);
            names[n_names] = xmalloc((size_t)(eq - argv[i]) - 1);
            memcpy(names[n_names], argv[i] + 2, (size_t)(eq - argv[i]) - 2);
            names[n_names][eq - argv[i] - 2] = '\0';
            overrides[2 * n_overrides] = names[n_names++];
            overrides[2 * n_overrides + 1] = eq + 1;
            n_overrides++;
        } else if (strncmp(argv[i], "--", 2) == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr,
                        "rlhf %s: option %s needs a value (options here set config keys: "
                        "--KEY VALUE)\n",
                        command, argv[i]);
                rc = CLI_EXIT_USAGE;
                goto done;
            }
            overrides[2 * n_overrides] = argv[i] + 2;
            overrides[2 * n_overrides + 1] = argv[++i];
            n_overrides++;
        } else if (!config) {
            config = argv[i];
        } else {
            fprintf(stderr, "rlhf %s: unexpected argument \"%s\"\n%s", command, argv[i], usage);
            rc = CLI_EXIT_USAGE;
            goto done;
        }
    }
    if (!config) {
        fprintf(stderr, "rlhf %s: a config file is required\n%s", command, usage);
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    rc = train_config_load(cfg, config, overrides, n_overrides);
    /* one of several ranks: the caller decides which rank reports (all read the same file) */
    if (rc != 0) {
        rc = dist_size() > 1 ? CLI_EXIT_FAILURE : cli_fail(err_msg());
        goto done;
    }
    for (int i = 0; print_warnings && dist_is_root() && i < cfg->n_warnings; i++)
        fprintf(stderr, "warning: %s\n", cfg->warnings[i]);
    /* Hub ids to local directories: the cache, or a download before anything is written */
    if (train_config_resolve_models(cfg) != 0) {
        train_config_free(cfg);
        rc = dist_size() > 1 ? CLI_EXIT_FAILURE : cli_fail(err_msg());
    }
done:
    for (int i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    free(overrides);
    return rc;
}

int cli_read_config(int argc, char **argv, const char *command, const char *usage,
                    TrainConfig *cfg) {
    return read_config(argc, argv, command, usage, cfg, true);
}

int cli_read_config_quiet(int argc, char **argv, const char *command, const char *usage,
                          TrainConfig *cfg) {
    return read_config(argc, argv, command, usage, cfg, false);
}
