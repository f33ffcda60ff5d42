/* rlhf: the command-line front end. Dispatches to one file per sub-command. */
#include "cli/commands.h"
#include "kernels/cpu/gemm_f32.h"
#include "train/train_device.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", cli_train, "fine-tune a model from an Axolotl-style YAML config"},
    {"preprocess", cli_preprocess, "tokenise a config's datasets once, for train to reuse"},
    {"merge-lora", cli_merge_lora, "merge a LoRA adapter into its base model's weights"},
    {"generate", cli_generate, "generate text (greedy or sampled) with a KV cache"},
    {"serve", cli_serve, "serve a model over OpenAI's HTTP API (completions, chat, streaming)"},
    {"vllm-serve", cli_vllm_serve,
     "rlhf serve for a config's base_model and vllm: block (axolotl vllm-serve)"},
    {"chat", cli_chat, "chat with a model in the terminal, its chat template applied"},
    {"score", cli_score, "log-likelihood of completions given prompts under a model"},
    {"chat-template", cli_chat_template, "render a conversation with a model's chat template"},
    {"tokenize", cli_tokenize, "text to token ids (or back) with a tokenizer.json"},
    {"plot", cli_plot, "draw a run's curves from its metrics.jsonl (PNG or SVG)"},
    {"config-keys", cli_config_keys, "every config key Axolotl documents: used, no-op or refused"},
};

static void usage(FILE *fp) {
    fprintf(fp, "usage: rlhf <command> [options]   (rlhf <command> --help for its options)\n\n"
                "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(fp, "  %-14s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    train_device_register_linked(); /* `device: cuda` (or cuda-emu) where this build has it */
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("rlhf %s (%s)\n", RLHF_VERSION, RLHF_BUILD_FEATURES);
        gemm_f32_describe(stdout); /* which fp32 GEMM kernel this CPU gets */
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "rlhf: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return CLI_EXIT_USAGE;
}
