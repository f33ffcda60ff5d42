/* rlhf score --model DIR --data FILE.jsonl [--tokenizer DIR] [--adapter DIR] [--out FILE]
 *            [--batch-size N]
 * Prints one JSON line per input line: {"logp": sum, "tokens": n, "mean_logp": sum/n}. */
#include "cli/commands.h"

#include "common/error.h"
#include "common/fileio.h"
#include "data/prompt_completion.h"
#include "model/model.h"
#include "model/sequence_scores.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char score_usage[] =
    "usage: rlhf score --model DIR --data FILE.jsonl [--tokenizer DIR] [--adapter DIR]\n"
    "                  [--out FILE] [--batch-size N]\n"
    "\n"
    "Scores completions: for each line {\"prompt_ids\": [...], \"completion_ids\": [...]}\n"
    "or {\"prompt\": \"...\", \"completion\": \"...\"} prints {\"logp\": <sum of completion-token\n"
    "log-probs given the prompt>, \"tokens\": <n>, \"mean_logp\": <logp/n>}. Text is tokenised\n"
    "with --tokenizer (default: the model directory's tokenizer.json): the prompt with the\n"
    "tokenizer's special tokens (BOS), the completion without, then concatenated.\n"
    "--adapter scores with a PEFT LoRA adapter applied to the model (not merged).\n"
    "With --out the results are written there, all or nothing.\n";

static int write_scores(FILE *fp, const SequenceScore *scores, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (fprintf(fp, "{\"logp\": %.9g, \"tokens\": %d, \"mean_logp\": %.9g}\n", scores[i].logp,
                    scores[i].tokens, scores[i].logp / scores[i].tokens) < 0)
            return -1;
    }
    return 0;
}

static int score_local(int argc, char **argv) {
    const char *model_dir = NULL, *data = NULL, *out = NULL, *batch_text = "8";
    const char *tokenizer_dir = NULL, *adapter_dir = NULL;
    for (int i = 0; i < argc; i++) {
        int r;
        if ((r = cli_option(argc, argv, &i, "--model", &model_dir)) ||
            (r = cli_option(argc, argv, &i, "--data", &data)) ||
            (r = cli_option(argc, argv, &i, "--out", &out)) ||
            (r = cli_option(argc, argv, &i, "--tokenizer", &tokenizer_dir)) ||
            (r = cli_option(argc, argv, &i, "--adapter", &adapter_dir)) ||
            (r = cli_option(argc, argv, &i, "--batch-size", &batch_text))) {
            if (r < 0) return CLI_EXIT_USAGE;
            continue;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(score_usage, stdout);
            return CLI_EXIT_OK;
        }
        fprintf(stderr, "rlhf score: unknown argument \"%s\"\n%s", argv[i], score_usage);
        return CLI_EXIT_USAGE;
    }
    if (!model_dir || !data) {
        fprintf(stderr, "rlhf score: --model and --data are required\n%s", score_usage);
        return CLI_EXIT_USAGE;
    }
    int batch_size;
    if (cli_positive_int("--batch-size", batch_text, &batch_size) != 0) return CLI_EXIT_USAGE;

    Model model;
    LoraAdapter lora = {0};
    if (cli_load_model(&model, model_dir, adapter_dir, &lora) != 0) return cli_fail(err_msg());
    /* A tokenizer is needed only for text lines. One named with --tokenizer must load; the
     * model directory's own is optional, and why it could not be had is kept for the message. */
    Tokenizer tok = {0};
    bool have_tok = false;
    char no_tok_reason[1024] = "none given: pass --tokenizer DIR";
    char default_tok[4096];
    snprintf(default_tok, sizeof default_tok, "%s/tokenizer.json", model_dir);
    if (tokenizer_dir || file_exists(default_tok)) {
        have_tok = tokenizer_load(&tok, tokenizer_dir ? tokenizer_dir : default_tok) == 0;
        if (!have_tok && tokenizer_dir) {
            model_free(&model);
            lora_free(&lora);
            return cli_fail(err_msg());
        }
        if (!have_tok) snprintf(no_tok_reason, sizeof no_tok_reason, "%s", err_msg());
    }
    PromptCompletionSet set;
    if (prompt_completion_read_jsonl(&set, data, model.cfg.vocab_size, have_tok ? &tok : NULL,
                                     no_tok_reason) != 0) {
        tokenizer_free(&tok);
        model_free(&model);
        lora_free(&lora);
        return cli_fail(err_msg());
    }
    tokenizer_free(&tok);
    SequenceScore *scores = xcalloc(set.n, sizeof *scores);
    SequenceToScore *seqs = xcalloc(set.n, sizeof *seqs);
    for (size_t i = 0; i < set.n; i++)
        seqs[i] = (SequenceToScore){set.items[i].ids, set.items[i].prompt_len,
                                    set.items[i].completion_len};
    int rc = CLI_EXIT_OK;
    size_t failed;
    if (sequence_scores(&model, seqs, set.n, batch_size, scores, &failed) != 0) {
        if (failed < set.n) err_prefix("line %d", set.items[failed].line);
        rc = cli_fail(err_msg());
    } else if (out) {
        AtomicFile af;
        if (atomic_file_open(&af, out) != 0) {
            rc = cli_fail(err_msg());
        } else if (write_scores(af.fp, scores, set.n) != 0) {
            atomic_file_abort(&af);
            err_set("%s: write failed", out);
            rc = cli_fail(err_msg());
        } else if (atomic_file_commit(&af) != 0) {
            rc = cli_fail(err_msg());
        }
    } else if (write_scores(stdout, scores, set.n) != 0 || fflush(stdout) != 0) {
        rc = cli_fail("writing to standard output failed");
    }
    free(seqs);
    free(scores);
    prompt_completion_free(&set);
    model_free(&model);
    lora_free(&lora);
    return rc;
}

/* The command with its directory options made local first (a Hub id: the HF cache, or a
 * download). */
int cli_score(int argc, char **argv) {
    static const CliDirOption dirs[] = {
        {"--model", HUB_MODEL}, {"--tokenizer", HUB_TOKENIZER}, {"--adapter", HUB_ADAPTER}};
    char **args;
    if (cli_resolve_options(argc, argv, dirs, 3, &args) != 0) return cli_fail(err_msg());
    int rc = score_local(argc, args);
    cli_free_resolved(argc, args, argv);
    return rc;
}
