/* rlhf preprocess CONFIG.yaml [--debug] [--debug-num-examples N] [--debug-text-only]
 *                             [--key value ...]
 * Tokenises the config's datasets as `rlhf train` would, for every method, and reports what it
 * found; SFT datasets are also cached in dataset_prepared_path for `rlhf train` to reuse
 * (always rebuilt, as Axolotl's preprocess does). --debug prints examples (preprocess_debug.h). */
#include "cli/commands.h"
#include "cli/preprocess_debug.h"

#include "common/error.h"
#include "config/train_config.h"
#include "data/dataset_cache.h"
#include "grpo/grpo_run.h"
#include "model/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char preprocess_usage[] =
    "usage: rlhf preprocess CONFIG.yaml [--debug] [--debug-num-examples N] [--debug-text-only]\n"
    "                       [--key value ...]\n\n"
    "Tokenises the config's datasets exactly as `rlhf train` does, for every method (sft, dpo,\n"
    "ipo, kto, orpo, simpo, cpo, grpo, gdpo), and says how many examples it kept and dropped.\n"
    "SFT datasets are cached in dataset_prepared_path (default last_run_prepared), where\n"
    "`rlhf train` finds them; preference, KTO and GRPO datasets are tokenised again at the start\n"
    "of each run (nothing is cached for them).\n\n"
    "  --debug                  print the first examples token by token, as Axolotl does: SFT\n"
    "                           tokens as text(label, id), label -100 where not trained (red),\n"
    "                           the id where trained (green); preference prompts (yellow),\n"
    "                           chosen (green) and rejected (red) responses as text(id)\n"
    "  --debug-num-examples N   how many examples --debug prints (default 5)\n"
    "  --debug-text-only        print the token texts alone, without ids\n";

typedef struct {
    bool debug, text_only;
    int n_examples;
} DebugOptions;

/* Takes the --debug options out of argv (compacting it in place, so that what is left is the
 * config and its key overrides). Returns 0, or CLI_EXIT_USAGE (message printed). */
static int take_debug_options(int *argc, char **argv, DebugOptions *o) {
    *o = (DebugOptions){.n_examples = 5};
    int kept = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--debug") == 0) {
            o->debug = true;
        } else if (strcmp(a, "--debug-text-only") == 0 || strcmp(a, "--debug_text_only") == 0) {
            o->debug = o->text_only = true;
        } else if (strcmp(a, "--debug-num-examples") == 0 ||
                   strcmp(a, "--debug_num_examples") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "rlhf preprocess: option %s needs a value\n", a);
                return CLI_EXIT_USAGE;
            }
            if (cli_positive_int(a, argv[++i], &o->n_examples) != 0) return CLI_EXIT_USAGE;
            o->debug = true;
        } else {
            argv[kept++] = argv[i];
        }
    }
    *argc = kept;
    return 0;
}

static int preprocess_sft(const TrainConfig *cfg, const Tokenizer *tok, int32_t eos, int vocab_size,
                          const DebugPrinter *p) {
    SftDataset ds = {0};
    char dir[4096];
    int rc = sft_dataset_prepare(&ds, cfg, tok, eos, vocab_size, true, stderr, dir, sizeof dir);
    if (rc == 0) {
        if (p) debug_print_sft(p, &ds);
        printf("%zu examples (%zu dropped as longer than sequence_len %lld)\n", ds.n,
               ds.dropped_too_long, (long long)cfg->sequence_len);
        printf("Success! Preprocessed data path: `dataset_prepared_path: %s`\n",
               dataset_prepared_root(cfg));
    }
    sft_dataset_free(&ds);
    return rc;
}

static int preprocess_pref(const TrainConfig *cfg, const Tokenizer *tok, const DebugPrinter *p) {
    PrefDataset ds = {0};
    int rc = pref_dataset_load(&ds, cfg, tok, stderr);
    if (rc == 0) {
        if (p) debug_print_pref(p, &ds);
        if (cfg->rl == RL_KTO)
            printf("%zu KTO rows (rl: kto)", ds.n_rows);
        else
            printf("%zu preference pairs (rl: %s)", ds.n_pairs, rl_method_name(cfg->rl));
        printf(", %zu dropped for length (sequence_len %lld)\n", ds.dropped,
               (long long)cfg->sequence_len);
    }
    pref_dataset_free(&ds);
    return rc;
}

static int preprocess_grpo(const TrainConfig *cfg, const Tokenizer *tok, const DebugPrinter *p) {
    GrpoDataset ds = {0};
    int rc = grpo_python_search_path(cfg);
    if (rc == 0) rc = grpo_dataset_load(&ds, cfg, cfg->datasets, cfg->n_datasets, tok, stderr);
    if (rc == 0) {
        if (p) debug_print_grpo(p, &ds);
        printf("%zu prompts (rl: %s, %s)\n", ds.n, rl_method_name(cfg->rl),
               ds.conversational ? "conversational: rendered with the chat template"
                                 : "plain text");
    }
    grpo_dataset_free(&ds);
    return rc;
}

int cli_preprocess(int argc, char **argv) {
    DebugOptions debug;
    int rc = take_debug_options(&argc, argv, &debug);
    if (rc != 0) return rc;
    TrainConfig cfg;
    rc = cli_read_config(argc, argv, "preprocess", preprocess_usage, &cfg);
    if (rc != 0) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : rc;
    if (cfg.rl == RL_NONE && !cfg.dataset_prepared_path)
        fprintf(stderr, "warning: preprocess called without dataset_prepared_path set, using "
                        "default path: last_run_prepared\n");
    ModelConfig mc;
    Tokenizer tok = {0};
    int32_t eos, pad;
    if (model_config_load(&mc, cfg.base_model) != 0) {
        train_config_free(&cfg);
        return cli_fail(err_msg());
    }
    DebugPrinter printer = {.out = stdout,
                            .tok = &tok,
                            .n_examples = (size_t)debug.n_examples,
                            .text_only = debug.text_only,
                            .color = isatty(fileno(stdout)) && !getenv("NO_COLOR")};
    const DebugPrinter *p = debug.debug ? &printer : NULL;
    TokenizerLoadOptions tok_opts = {.legacy = cfg.tokenizer_legacy,
                                     .tokenizer_class = cfg.tokenizer_type};
    if (tokenizer_load_options(&tok, cfg.tokenizer_config, &tok_opts) != 0 ||
        tokenizer_special_ids(cfg.tokenizer_config, &tok, &eos, &pad) != 0) {
        rc = -1;
    } else {
        switch (cfg.rl) {
        case RL_NONE:
            rc = preprocess_sft(&cfg, &tok, eos, mc.vocab_size, p);
            break;
        case RL_GRPO:
        case RL_GDPO:
            rc = preprocess_grpo(&cfg, &tok, p);
            break;
        case RL_DPO:
        case RL_IPO:
        case RL_KTO:
        case RL_ORPO:
        case RL_SIMPO:
        case RL_CPO:
            rc = preprocess_pref(&cfg, &tok, p);
            break;
        }
    }
    if (rc != 0) rc = cli_fail(err_msg());
    model_config_free(&mc);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    return rc;
}
