/* rlhf preprocess CONFIG.yaml [--key value ...]: tokenises the datasets into
 * dataset_prepared_path once, for `rlhf train` to reuse. Always rebuilds, as Axolotl's does. */
#include "cli/commands.h"

#include "common/error.h"
#include "config/train_config.h"
#include "data/dataset_cache.h"
#include "model/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char preprocess_usage[] =
    "usage: rlhf preprocess CONFIG.yaml [--key value ...]\n\nTokenises the config's datasets "
    "into dataset_prepared_path (default last_run_prepared),\nwhere `rlhf train` finds them.\n";

int cli_preprocess(int argc, char **argv) {
    TrainConfig cfg;
    int rc = cli_read_config(argc, argv, "preprocess", preprocess_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    if (!cfg.dataset_prepared_path)
        fprintf(stderr, "warning: preprocess called without dataset_prepared_path set, using "
                        "default path: last_run_prepared\n");
    ModelConfig mc;
    Tokenizer tok = {0};
    SftDataset ds = {0};
    int32_t eos, pad;
    char dir[4096];
    if (model_config_load(&mc, cfg.base_model) != 0) {
        rc = cli_fail(err_msg());
    } else {
        if (tokenizer_load(&tok, cfg.tokenizer_config) != 0 ||
            tokenizer_special_ids(cfg.tokenizer_config, &tok, &eos, &pad) != 0 ||
            sft_dataset_prepare(&ds, &cfg, &tok, eos, mc.vocab_size, true, stderr, dir,
                                sizeof dir) != 0)
            rc = cli_fail(err_msg());
        else
            printf("Success! Preprocessed data path: `dataset_prepared_path: %s`\n",
                   dataset_prepared_root(&cfg));
        model_config_free(&mc);
    }
    sft_dataset_free(&ds);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    return rc;
}
