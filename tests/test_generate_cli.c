/* `rlhf generate` end to end on the embedded model: the JSONL it writes for a prompts file
 * (prompt echoed, n completions with text, ids, log-probs and a finish reason), the same
 * sampled output for the same seed, and clear errors for an empty prompt, --n 0 and a prompt
 * longer than the context. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static char model[4096];

static int run(const char *prompts, const char *out, const char *seed) {
    char *args[] = {"--model",          model, "--prompts", (char *)prompts, "--out",
                    (char *)out,        "--n", "3",         "--temperature", "0.8",
                    "--max-new-tokens", "6",   "--seed",    (char *)seed};
    return cli_generate(14, args);
}

int main(void) {
    snprintf(model, sizeof model, "%s", harness_source_path("models/tiny-arith"));
    char prompts[4096], out1[4096], out2[4096], out3[4096];
    snprintf(prompts, sizeof prompts, "%s/prompts.jsonl", harness_tmpdir());
    snprintf(out1, sizeof out1, "%s/a.jsonl", harness_tmpdir());
    snprintf(out2, sizeof out2, "%s/b.jsonl", harness_tmpdir());
    snprintf(out3, sizeof out3, "%s/c.jsonl", harness_tmpdir());
    const char *text = "{\"prompt\": \"What is 3 + 4?\"}\n"
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 5 + 1?\"}]}\n";
    harness_write_file(prompts, text, strlen(text));

    CHECK(run(prompts, out1, "7") == CLI_EXIT_OK, "generate: %s", err_msg());
    CHECK(run(prompts, out2, "7") == CLI_EXIT_OK, "generate again: %s", err_msg());
    CHECK(run(prompts, out3, "8") == CLI_EXIT_OK, "another seed: %s", err_msg());
    char *a = NULL, *b = NULL, *c = NULL;
    CHECK(read_file(out1, &a, NULL) == 0 && read_file(out2, &b, NULL) == 0 &&
              read_file(out3, &c, NULL) == 0,
          "outputs");
    CHECK(a && b && strcmp(a, b) == 0, "the same seed gives the same output");
    CHECK(a && c && strcmp(a, c) != 0, "another seed gives another output");
    int lines = 0;
    for (char *save = NULL, *l = a ? strtok_r(a, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *row;
        CHECK(json_load_text(l, strlen(l), "output", &row) == 0, "output line: %s", l);
        json_t *comps = json_object_get(row, "completions");
        CHECK(json_object_get(row, "prompt") && json_array_size(comps) == 3,
              "3 completions per prompt");
        size_t i;
        json_t *cc;
        json_array_foreach(comps, i, cc) {
            size_t n = json_array_size(json_object_get(cc, "token_ids"));
            const char *fr = json_string_value(json_object_get(cc, "finish_reason"));
            CHECK(n >= 1 && n <= 6 && n == json_array_size(json_object_get(cc, "logprobs")),
                  "token ids and log-probs, at most 6");
            CHECK(json_is_string(json_object_get(cc, "text")), "text");
            CHECK(fr && (strcmp(fr, "stop") == 0 || (strcmp(fr, "length") == 0 && n == 6)),
                  "finish_reason %s with %zu tokens", fr, n);
        }
        json_decref(row);
        lines++;
    }
    CHECK(lines == 2, "%d output lines for 2 prompts", lines);
    free(a), free(b), free(c);

    char *empty[] = {"--model", model, "--prompt", ""};
    CHECK(cli_generate(4, empty) == CLI_EXIT_FAILURE && strstr(err_msg(), "empty"),
          "empty prompt: %s", err_msg());
    char *zero[] = {"--model", model, "--prompt", "x", "--n", "0"};
    CHECK(cli_generate(6, zero) == CLI_EXIT_USAGE, "--n 0 is a usage error");
    char *long_prompt = malloc(6001);
    for (int i = 0; i < 6000; i++)
        long_prompt[i] = i % 2 ? ' ' : 'w';
    long_prompt[6000] = '\0';
    char *too_long[] = {"--model", model, "--prompt", long_prompt};
    CHECK(cli_generate(4, too_long) == CLI_EXIT_FAILURE && strstr(err_msg(), "context"),
          "over-long prompt: %s", err_msg());
    free(long_prompt);
    char *no_prompt[] = {"--model", model};
    CHECK(cli_generate(2, no_prompt) == CLI_EXIT_USAGE, "no prompt is a usage error");
    const char *bad = "{\"text\": \"hi\"}\n";
    harness_write_file(prompts, bad, strlen(bad));
    CHECK(run(prompts, out1, "1") == CLI_EXIT_FAILURE && strstr(err_msg(), "prompts.jsonl:1") &&
              strstr(err_msg(), "\"prompt\""),
          "row without a prompt: %s", err_msg());
    return harness_finish("test_generate_cli");
}
