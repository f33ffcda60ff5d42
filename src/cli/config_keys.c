/* rlhf config-keys: the status table of every configuration key (config/key_status.h) as
 * Markdown: what rlhf.c does with each key Axolotl documents, and why. */
#include "cli/commands.h"

#include "config/key_status.h"

#include <stdio.h>
#include <string.h>

int cli_config_keys(int argc, char **argv) {
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        fputs("usage: rlhf config-keys\n\nPrints every configuration key Axolotl documents "
              "(top level, trl., vllm., datasets[].) with\nwhat rlhf.c does with it: used, "
              "no-op (a warning unless the value matches what rlhf.c\ndoes) or refused (an "
              "error unless it does), and why.\n",
              stdout);
        return CLI_EXIT_OK;
    }
    if (argc > 0) {
        fprintf(stderr, "rlhf config-keys: unexpected argument \"%s\"\n", argv[0]);
        return CLI_EXIT_USAGE;
    }
    key_status_print_markdown(stdout);
    return CLI_EXIT_OK;
}
