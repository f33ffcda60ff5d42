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
    TrainConfig cfg;
    int rc = cli_read_config(argc, argv, "train", train_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    rc = train_run(&cfg, stderr) == 0 ? CLI_EXIT_OK : cli_fail(err_msg());
    train_config_free(&cfg);
    return rc;
}
