/* rlhf train CONFIG.yaml [--key value ...] [--nproc N]: a training run from an Axolotl-style
 * config, in this process, as one rank of `mpirun -np N rlhf train ...`, or (--nproc N) by
 * starting that mpirun. */
#include "cli/commands.h"

#include "common/error.h"
#include "common/log_stream.h"
#include "config/train_config.h"
#include "dist/dist.h"
#include "dist/dist_launch.h"
#include "train/stop_signal.h"
#include "train/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char train_usage[] =
    "usage: rlhf train CONFIG.yaml [--key value ...] [--nproc N]\n"
    "\n"
    "Runs the training the config describes (Axolotl keys: base_model, datasets, learning_rate,\n"
    "micro_batch_size, ...). Any key can be overridden: --learning_rate 2e-5.\n"
    "\n"
    "--nproc N trains data-parallel on N processes of this machine (it runs mpirun -np N\n"
    "rlhf train ...; `mpirun` yourself for several machines). micro_batch_size is per process:\n"
    "a step takes micro_batch_size x gradient_accumulation_steps x N examples. zero_stage: 1\n"
    "shards the optimizer state over the processes.\n"
    "\n"
    "SIGINT or SIGTERM stops the run after the current step with a checkpoint (exit status\n"
    "130 or 143); resume_from_checkpoint: true continues it. A second signal stops at once.\n";

/* Takes `--nproc N` out of argv (it is not a config key). Returns 0 (*nproc 0 when absent), or
 * CLI_EXIT_USAGE with a message. */
static int take_nproc(int *argc, char **argv, int *nproc) {
    *nproc = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--nproc") != 0) continue;
        if (i + 1 >= *argc || cli_positive_int("--nproc", argv[i + 1], nproc) != 0) {
            if (i + 1 >= *argc) fprintf(stderr, "rlhf train: --nproc needs a process count\n");
            return CLI_EXIT_USAGE;
        }
        memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 2) * sizeof *argv);
        *argc -= 2;
        i--;
    }
    return 0;
}

/* A run that failed on this rank of several. Every rank must stop without leaving another
 * waiting (dist.h, invariant 1): a failure the ranks agreed on ends each cleanly, and one rank
 * prints it; a failure during set-up (model, data) joins the agreement the others reach before
 * training; any other failure only this rank knows of ends the whole job. */
static int report_failure(void) {
    if (dist_size() == 1) return cli_fail(err_msg());
    if (!dist_failure_agreed()) {
        if (dist_agreements_passed() > 0) {
            fprintf(stderr, "rlhf: error: rank %d of %d: %s (ending every rank of the job)\n",
                    dist_rank(), dist_size(), err_msg());
            dist_abort(CLI_EXIT_FAILURE);
        }
        dist_agree(-1);
    }
    if (dist_first_failed_rank() == dist_rank()) {
        if (dist_rank() == 0)
            cli_fail(err_msg());
        else
            fprintf(stderr, "rlhf: error: rank %d of %d: %s\n", dist_rank(), dist_size(),
                    err_msg());
    }
    return CLI_EXIT_FAILURE;
}

/* --nproc N: check the config here, once, then become mpirun. */
static int launch(int nproc, int argc, char **argv) {
    if (dist_size() > 1)
        return cli_fail("--nproc: this process is already one rank of an MPI job; start it "
                        "either with mpirun or with --nproc, not both");
    TrainConfig cfg;
    dist_launch_plan(nproc); /* the config is checked for the ranks it will run on */
    int rc = cli_read_config_quiet(argc, argv, "train", train_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    train_config_free(&cfg);
    dist_launch(nproc, argc, argv);
    return cli_fail(err_msg());
}

int cli_train(int argc, char **argv) {
    int nproc;
    char **args = xmalloc(((size_t)argc + 1) * sizeof *args);
    memcpy(args, argv, (size_t)argc * sizeof *args);
    int rc = take_nproc(&argc, args, &nproc);
    if (rc == 0 && dist_init() != 0) rc = cli_fail(err_msg());
    if (rc == 0 && nproc > 1) rc = launch(nproc, argc, args);
    if (rc != 0 || nproc > 1) {
        free(args);
        dist_finalize();
        return rc;
    }
    TrainConfig cfg;
    rc = cli_read_config(argc, args, "train", train_usage, &cfg);
    free(args);
    if (rc == CLI_HELP_SHOWN) {
        dist_finalize();
        return CLI_EXIT_OK;
    }
    if (rc != 0) {
        /* every rank read the same file; still, none may leave another waiting (dist.h) */
        if (dist_size() > 1 && rc == CLI_EXIT_FAILURE)
            rc = report_failure();
        else if (dist_size() > 1)
            dist_agree(-1);
        dist_finalize();
        return rc;
    }
    /* rank 0 alone logs (progress on stdout, warnings on stderr: log_stream.h); the others'
     * progress and warnings would repeat it */
    FILE *log = dist_is_root() ? log_stream_open() : fopen("/dev/null", "w");
    if (!log) log = stderr;
    /* SIGINT / SIGTERM stop the run after the current step with a checkpoint; the exit status
     * is then the shell's 128 + signal number (130, 143), as if the signal had ended it */
    stop_signal_install();
    rc = train_run(&cfg, log) == 0 ? CLI_EXIT_OK : report_failure();
    int sig = stop_signal_received();
    stop_signal_uninstall();
    if (rc != CLI_EXIT_OK && sig > 0) rc = 128 + sig;
    if (log != stderr) fclose(log);
    train_config_free(&cfg);
    dist_finalize();
    return rc;
}
