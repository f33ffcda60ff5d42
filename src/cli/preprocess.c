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

int cli_preprocess(int argc, char **argv) {
    const char *config = NULL;
    const char **overrides = xcalloc((size_t)argc + 1, sizeof *overrides);
    int n_overrides = 0, rc = CLI_EXIT_OK;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            puts("usage: rlhf preprocess CONFIG.yaml [--key value ...]\n\nTokenises the config's "
                 "datasets into dataset_prepared_path (default last_run_prepared),\nwhere `rlhf "
                 "train` finds them.");
            free(overrides);
            return CLI_EXIT_OK;
        }
        if (strncmp(argv[i], "--", 2) == 0 && i + 1 < argc) {
            overrides[2 * n_overrides] = argv[i] + 2;
            overrides[2 * n_overrides + 1] = argv[++i];
            n_overrides++;
        } else if (!config && strncmp(argv[i], "--", 2) != 0) {
            config = argv[i];
        } else {
            fprintf(stderr, "rlhf preprocess: unexpected argument \"%s\"\n", argv[i]);
            free(overrides);
            return CLI_EXIT_USAGE;
        }
    }
    if (!config) {
        fprintf(stderr, "rlhf preprocess: a config file is required\n");
        free(overrides);
        return CLI_EXIT_USAGE;
    }
    TrainConfig cfg;
    if (train_config_load(&cfg, config, overrides, n_overrides) != 0) {
        free(overrides);
        return cli_fail(err_msg());
    }
    free(overrides);
    for (int i = 0; i < cfg.n_warnings; i++)
        fprintf(stderr, "warning: %s\n", cfg.warnings[i]);
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
