/* rlhf merge-lora: folds a LoRA adapter into its base model's weights (PEFT's merge_and_unload)
 * and writes a full Hugging Face model directory.
 *
 *   rlhf merge-lora CONFIG.yaml [--key value ...]   as Axolotl's: the adapter in lora_model_dir
 *                                                   (default output_dir) into base_model, written
 *                                                   to output_dir/merged
 *   rlhf merge-lora --base DIR --adapter DIR --out DIR [--tokenizer DIR]
 *
 * The merge is done in fp32 and the weights are written in the base's stored dtype. */
#include "cli/commands.h"

#include "common/error.h"
#include "common/fileio.h"
#include "io/model_dir.h"

#include <stdio.h>
#include <string.h>

static const char merge_usage[] =
    "usage: rlhf merge-lora CONFIG.yaml [--key value ...]\n"
    "       rlhf merge-lora --base DIR --adapter DIR --out DIR [--tokenizer DIR]\n"
    "\n"
    "Merges a PEFT LoRA adapter into its base model (W += scaling * B A) and writes a full\n"
    "model directory (weights in the base's dtype, config.json, tokenizer files). With a config,\n"
    "the adapter is lora_model_dir (default: output_dir), the base is base_model and the result\n"
    "goes to output_dir/merged, as in Axolotl.\n";

/* Loads base and adapter, merges, writes out_dir. Returns 0, or -1 with an error. */
static int merge(const char *base_dir, const char *adapter_dir, const char *tokenizer_dir,
                 const char *out_dir, FILE *log) {
    if (!dir_exists(adapter_dir))
        return err_set("target directory for LoRA adapter weights does not exist: `%s`",
                       adapter_dir);
    char config[4096];
    if (path_join(config, sizeof config, adapter_dir, "adapter_config.json") == 0 &&
        !file_exists(config))
        return err_set("%s holds no LoRA adapter (no adapter_config.json): train a config with "
                       "`adapter: lora` into it first, or point lora_model_dir (--adapter) at "
                       "an adapter directory",
                       adapter_dir);
    Model m;
    LoraAdapter lora;
    if (cli_load_model(&m, base_dir, adapter_dir, &lora) != 0) return -1;
    m.lora = NULL; /* the merged weights carry the adapter from here on */
    int rc = lora_merge(&m, &lora);
    if (rc == 0)
        rc = model_dir_write(&m, base_dir, tokenizer_dir, out_dir, model_dir_source_dtype(&m));
    if (rc == 0)
        fprintf(log, "merged the adapter in %s (r %d, %d tensors) into %s: written to %s\n",
                adapter_dir, lora.r, lora.n_info, base_dir, out_dir);
    lora_free(&lora);
    model_free(&m);
    return rc;
}

/* --base/--adapter/--out form; returns an exit status. */
static int merge_from_flags(int argc, char **argv) {
    const char *base = NULL, *adapter = NULL, *out = NULL, *tokenizer = NULL;
    for (int i = 0; i < argc; i++) {
        int r;
        if ((r = cli_option(argc, argv, &i, "--base", &base)) ||
            (r = cli_option(argc, argv, &i, "--adapter", &adapter)) ||
            (r = cli_option(argc, argv, &i, "--out", &out)) ||
            (r = cli_option(argc, argv, &i, "--tokenizer", &tokenizer))) {
            if (r < 0) return CLI_EXIT_USAGE;
            continue;
        }
        fprintf(stderr, "rlhf merge-lora: unexpected argument \"%s\"\n%s", argv[i], merge_usage);
        return CLI_EXIT_USAGE;
    }
    if (!base || !adapter || !out) {
        fprintf(stderr, "rlhf merge-lora: --base, --adapter and --out go together\n%s",
                merge_usage);
        return CLI_EXIT_USAGE;
    }
    if (merge(base, adapter, tokenizer ? tokenizer : base, out, stderr) != 0)
        return cli_fail(err_msg());
    return CLI_EXIT_OK;
}

int cli_merge_lora(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--base") == 0 || strcmp(argv[i], "--adapter") == 0 ||
            strcmp(argv[i], "--out") == 0)
            return merge_from_flags(argc, argv);
    TrainConfig cfg;
    int rc = cli_read_config(argc, argv, "merge-lora", merge_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    const char *adapter = cfg.lora_model_dir ? cfg.lora_model_dir : cfg.output_dir;
    char out[4096];
    if (!cfg.adapter && !cfg.lora_model_dir) {
        err_set("%s: merge-lora merges a LoRA adapter, but the config has no `adapter:` and no "
                "lora_model_dir (a full fine-tune's output_dir already holds the whole model); "
                "set lora_model_dir, or use --base DIR --adapter DIR --out DIR",
                cfg.source);
        rc = cli_fail(err_msg());
    } else if (path_join(out, sizeof out, cfg.output_dir, "merged") != 0 ||
               merge(cfg.base_model, adapter, cfg.tokenizer_config, out, stderr) != 0)
        rc = cli_fail(err_msg());
    train_config_free(&cfg);
    return rc;
}
