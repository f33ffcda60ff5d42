/* The sub-commands of the `rlhf` program. Each takes the arguments after its own name and
 * returns the process exit status: 0 success, 1 bad input or a failed run, 2 bad usage. */
#ifndef RLHF_CLI_COMMANDS_H
#define RLHF_CLI_COMMANDS_H

#include "config/train_config.h"
#include "io/hub_resolve.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#define CLI_EXIT_OK      0
#define CLI_EXIT_FAILURE 1
#define CLI_EXIT_USAGE   2

int cli_score(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_preprocess(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_chat_template(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_merge_lora(int argc, char **argv);
int cli_plot(int argc, char **argv);
int cli_config_keys(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_vllm_serve(int argc, char **argv);
int cli_chat(int argc, char **argv);

/* Prints "rlhf: error: <message>" to stderr and returns CLI_EXIT_FAILURE. */
int cli_fail(const char *message);

/* Option parsing shared by the commands. If argv[*i] is `name`, stores the next argument in
 * *value, advances *i past it and returns 1; returns -1 (message printed) when the value is
 * missing; 0 when argv[*i] is another option. */
int cli_option(int argc, char **argv, int *i, const char *name, const char **value);

/* One option of a table that takes a string value: `--name VALUE` stores VALUE in *slot. */
typedef struct {
    const char *name;
    const char **slot;
} CliStringOption;

/* cli_option over a table: 1 when argv[*i] is one of opts (its value stored, *i advanced), 0
 * when it is none of them, -1 when its value is missing (message printed). */
int cli_string_options(int argc, char **argv, int *i, const CliStringOption *opts, size_t n);

/* The arguments of a command run on one MODEL (`rlhf chat`, `rlhf serve`): MODEL, the string
 * options of `opts`, --bf16 (sets *bf16) and --help. Returns 0 with *model set, CLI_HELP_SHOWN
 * after printing `usage`, or CLI_EXIT_USAGE (message printed, naming `command`). */
int cli_model_arguments(int argc, char **argv, const char *command, const char *usage,
                        const CliStringOption *opts, size_t n, const char **model, bool *bf16);

/* Streams generated text to stdout as it grows: the on_token callback of GenerateOptions, with
 * ctx a CliTextStream. Each call decodes the sequence so far and prints what the text gained,
 * holding back a trailing U+FFFD (the first bytes of a character whose last byte has not come
 * yet). */
typedef struct {
    const Tokenizer *tok;
    size_t printed; /* bytes of the text printed so far */
} CliTextStream;
void cli_stream_token(int job, const int32_t *ids, int len, void *ctx);

/* Parses a positive integer option value; prints a message and returns -1 when it is not. */
int cli_positive_int(const char *name, const char *text, int *out);

#define CLI_HELP_SHOWN (-1)

/* The arguments `CONFIG.yaml [--key value ...]` of train, preprocess and merge-lora: reads the
 * config with the overrides applied and prints its warnings. Returns 0 with *cfg loaded,
 * CLI_HELP_SHOWN after printing `usage` for --help, or the exit status of a usage error or a
 * bad config (message printed). */
int cli_read_config(int argc, char **argv, const char *command, const char *usage,
                    TrainConfig *cfg);
/* The same without printing the config's warnings (the --nproc launcher checks the config
 * before starting the ranks, and rank 0 prints them). Over several ranks (dist.h), neither
 * prints an error either: the caller reports it from one rank. */
int cli_read_config_quiet(int argc, char **argv, const char *command, const char *usage,
                          TrainConfig *cfg);

/* A directory option of a command and what its directory must hold when it is a Hub id. */
typedef struct {
    const char *option; /* "--model" */
    HubNeed need;
} CliDirOption;

/* A copy of argv (*out, argc + 1 entries) where the value of each of the n options in opts is
 * resolved with cli_resolve_dir: a command then reads local directories only. Returns 0, or -1
 * with an error (*out NULL). Free the copy with cli_free_resolved. */
int cli_resolve_options(int argc, char **argv, const CliDirOption *opts, int n, char ***out);
void cli_free_resolved(int argc, char **copy, char **argv);

/* Makes *path (the value of `option`, e.g. "--model"; NULL: nothing to do) a local directory:
 * itself, or the snapshot of the Hub id it names (io/hub_resolve.h: the HF cache, else a
 * download). *owned receives the malloc'd result, which *path then points to (the caller frees
 * it). Returns 0, or -1 with an error. */
int cli_resolve_dir(const char **path, const char *option, HubNeed need, char **owned);

/* Loads the model in model_dir and, when adapter_dir is given, the PEFT LoRA adapter there into
 * *lora, attached to the model (m->lora). Returns 0, or -1 with an error (nothing left loaded). */
int cli_load_model(Model *m, const char *model_dir, const char *adapter_dir, LoraAdapter *lora);

#endif
