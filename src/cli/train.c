/* rlhf train CONFIG.yaml [--key value ...]: a training run from an Axolotl-style config. */
#include "cli/commands.h"

#include "common/error.h"
#include "config/train_config.h"
#include "train/stop_signal.h"
#include "train/train_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char train_usage[] =
    "usage: rlhf train CONFIG.yaml [--key value ...]\n"
    "\n"
    "Runs the training the config describes (Axolotl keys: base_model, datasets, learning_rate,\n"
    "micro_batch_size, ...). Any key can be overridden: --learning_rate 2e-5.\n"
    "\n"
    "SIGINT or SIGTERM stops the run after the current step with a checkpoint (exit status\n"
    "130 or 143); resume_from_checkpoint: true continues it. A second signal stops at once.\n";

int cli_train(int argc, char **argv) {
    TrainConfig cfg;
    int rc = cli_read_config(argc, argv, "train", train_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    /* SIGINT / SIGTERM stop the run after the current step with a checkpoint; the exit status
     * is then the shell's 128 + signal number (130, 143), as if the signal had ended it */
    stop_signal_install();
    rc = train_run(&cfg, stderr) == 0 ? CLI_EXIT_OK : cli_fail(err_msg());
    int sig = stop_signal_received();
    stop_signal_uninstall();
    if (rc != CLI_EXIT_OK && sig > 0) rc = 128 + sig;
    train_config_free(&cfg);
    return rc;
}
