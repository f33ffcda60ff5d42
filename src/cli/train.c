/* rlhf train CONFIG.yaml [--key value ...]: a training run from an Axolotl-style config. */
#include "cli/commands.h"

#include "common/error.h"
#include "config/train_config.h"
#include "train/train_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char train_usage[] =
    "usage: rlhf train CONFIG.yaml [--key value ...]\n"
    "\n"
    "Runs the training the config describes (Axolotl keys: base_model, datasets, learning_rate,\n"
    "micro_batch_size, ...). Any key can be overridden: --learning_rate 2e-5.\n";

int cli_train(int argc, char **argv) {
    const char *config = NULL;
    const char **overrides = xcalloc((size_t)argc + 1, sizeof *overrides);
    int n_overrides = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(train_usage, stdout);
            free(overrides);
            return CLI_EXIT_OK;
        }
        if (strncmp(argv[i], "--", 2) == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rlhf train: option %s needs a value\n", argv[i]);
                free(overrides);
                return CLI_EXIT_USAGE;
            }
            overrides[2 * n_overrides] = argv[i] + 2;
            overrides[2 * n_overrides + 1] = argv[++i];
            n_overrides++;
        } else if (!config) {
            config = argv[i];
        } else {
            fprintf(stderr, "rlhf train: unexpected argument \"%s\"\n%s", argv[i], train_usage);
            free(overrides);
            return CLI_EXIT_USAGE;
        }
    }
    if (!config) {
        fprintf(stderr, "rlhf train: a config file is required\n%s", train_usage);
        free(overrides);
        return CLI_EXIT_USAGE;
    }
    TrainConfig cfg;
    int rc = train_config_load(&cfg, config, overrides, n_overrides);
    free(overrides);
    if (rc != 0) return cli_fail(err_msg());
    for (int i = 0; i < cfg.n_warnings; i++)
        fprintf(stderr, "warning: %s\n", cfg.warnings[i]);
    rc = train_run(&cfg, stderr) == 0 ? CLI_EXIT_OK : cli_fail(err_msg());
    train_config_free(&cfg);
    return rc;
}
