/* `rlhf preprocess --debug` for every kind of method: the ids it prints, and the trained/masked
 * marks of SFT, are those of the dataset that training loads (sft_dataset_load and
 * sft_dataset_merge, pref_dataset_load, grpo_dataset_load called here on the same config: each
 * in Axolotl's merged, shuffled order); a preprocess exits 0 for DPO, KTO and GRPO
 * configs (it refused them before), and --debug-num-examples bounds what it prints. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "data/grpo_dataset.h"
#include "data/pref_dataset.h"
#include "data/sft_dataset.h"
#include "harness.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs `rlhf preprocess args...` in-process with stdout sent to a file; returns its exit status
 * and the printed text in *out (malloc'd). */
static int run_preprocess(int argc, char **argv, char **out) {
    const char *path = harness_tmp_path("stdout.txt");
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    int rc = cli_preprocess(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    size_t len = 0;
    *out = NULL;
    CHECK(read_file(path, out, &len) == 0, "read %s", path);
    return rc;
}

/* The ids of one printed line "HEADING: text(id) text(id) ...": the numbers of each "(N)" or
 * "(L, N)" group that ends a token (followed by a space, a newline or the end). With labels,
 * labels[k] receives L. The line runs to the next blank line (token texts hold newlines).
 * Returns the count, and *next points past the section. */
static int parse_ids(const char *s, int32_t *ids, long *labels, int cap, const char **next) {
    int n = 0;
    const char *end = strstr(s, "\n\n");
    if (!end) end = s + strlen(s);
    for (const char *p = s; p < end; p++) {
        if (*p != '(') continue;
        char *q;
        long a = strtol(p + 1, &q, 10), b = 0;
        bool pair = false;
        if (q == p + 1) continue;
        if (q[0] == ',' && q[1] == ' ') {
            char *r;
            b = strtol(q + 2, &r, 10);
            if (r == q + 2) continue;
            q = r;
            pair = true;
        }
        if (*q != ')' || (q + 1 < end && q[1] != ' ' && q[1] != '\n')) continue;
        if ((labels != NULL) != pair || n >= cap) continue;
        ids[n] = (int32_t)(pair ? b : a);
        if (labels) labels[n] = a;
        n++;
        p = q;
    }
    *next = end;
    return n;
}

/* The section after `heading` in text starting at *cursor; its ids are compared to want. */
static void expect_section(const char **cursor, const char *heading, const int32_t *want,
                           int n_want, size_t example) {
    const char *at = strstr(*cursor, heading);
    CHECK(at != NULL, "example %zu: no \"%s\" printed", example, heading);
    if (!at) return;
    int32_t got[1024];
    int n = parse_ids(at + strlen(heading), got, NULL, 1024, cursor);
    CHECK(n == n_want, "example %zu %s: %d ids printed, dataset has %d", example, heading, n,
          n_want);
    for (int t = 0; t < n && t < n_want; t++)
        CHECK(got[t] == want[t], "example %zu %s token %d: printed %d, dataset %d", example,
              heading, t, got[t], want[t]);
}

static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void load_config(TrainConfig *cfg, const char *yaml, const char **overrides, int n) {
    CHECK(train_config_load(cfg, yaml, overrides, n) == 0, "%s: %s", yaml, err_msg());
}

static void check_sft(void) {
    const char *dir = harness_tmp_path("prepared");
    char *args[] = {"examples/quickstart.yaml", "--debug-num-examples", "3",
                    "--dataset_prepared_path", (char *)dir};
    char *text;
    CHECK(run_preprocess(5, args, &text) == CLI_EXIT_OK, "sft preprocess: %s", err_msg());
    const char *ov[] = {"dataset_prepared_path", dir};
    TrainConfig cfg;
    load_config(&cfg, "examples/quickstart.yaml", ov, 1);
    Tokenizer tok = {0};
    int32_t eos, pad;
    CHECK(tokenizer_load(&tok, cfg.tokenizer_config) == 0, "%s", err_msg());
    CHECK(tokenizer_special_ids(cfg.tokenizer_config, &tok, &eos, &pad) == 0, "%s", err_msg());
    SftDataset ds = {0};
    CHECK(sft_dataset_load(&ds, &cfg, &tok, eos) == 0 && sft_dataset_merge(&ds, &cfg) == 0, "%s",
          err_msg());
    CHECK(count_of(text, "Total input len:") == 3, "3 SFT examples printed");
    const char *cursor = text;
    for (size_t i = 0; i < 3 && i < ds.n; i++) {
        const SftExample *e = &ds.items[i];
        int32_t ids[1024];
        long labels[1024];
        int n = parse_ids(cursor, ids, labels, 1024, &cursor);
        CHECK(n == e->len, "example %zu: %d tokens printed, dataset has %d", i, n, e->len);
        int trained = 0;
        for (int t = 0; t < n && t < e->len; t++) {
            CHECK(ids[t] == e->ids[t], "example %zu token %d id", i, t);
            long want = e->labels[t] ? e->ids[t] : -100;
            CHECK(labels[t] == want, "example %zu token %d: label %ld printed, want %ld", i, t,
                  labels[t], want);
            trained += e->labels[t] != 0;
        }
        char line[64];
        snprintf(line, sizeof line, "Count of labels: %d\n", trained);
        CHECK(strstr(cursor, line) != NULL, "example %zu: \"%s\" not printed", i, line);
        cursor = strstr(cursor, "Count of labels:");
        if (!cursor || !(cursor = strstr(cursor, "\n\n"))) break;
        cursor += 2;
    }
    sft_dataset_free(&ds);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    free(text);
}

static void check_pref(const char *yaml, int n_print) {
    char num[16];
    snprintf(num, sizeof num, "%d", n_print);
    char *args[] = {(char *)yaml, "--debug", "--debug-num-examples", num};
    char *text;
    CHECK(run_preprocess(4, args, &text) == CLI_EXIT_OK, "%s: %s", yaml, err_msg());
    TrainConfig cfg;
    load_config(&cfg, yaml, NULL, 0);
    Tokenizer tok = {0};
    CHECK(tokenizer_load(&tok, cfg.tokenizer_config) == 0, "%s", err_msg());
    PrefDataset ds = {0};
    CHECK(pref_dataset_load(&ds, &cfg, &tok, stderr) == 0, "%s", err_msg());
    const char *cursor = text;
    bool kto = cfg.rl == RL_KTO;
    CHECK(count_of(text, "INPUT PROMPT:") == n_print, "%s: %d examples printed, want %d", yaml,
          count_of(text, "INPUT PROMPT:"), n_print);
    for (size_t i = 0; i < (size_t)n_print; i++) {
        if (kto) {
            const KtoRow *r = &ds.rows[i];
            expect_section(&cursor, "INPUT PROMPT:", r->prompt, r->n_prompt, i);
            expect_section(&cursor, "COMPLETION RESPONSE:", r->completion, r->n_completion, i);
            const char *label = strstr(cursor, "LABEL: ");
            CHECK(label && strncmp(label + 7, r->desirable ? "true" : "false",
                                   r->desirable ? 4 : 5) == 0,
                  "row %zu: label", i);
        } else {
            const PrefPair *p = &ds.pairs[i];
            expect_section(&cursor, "INPUT PROMPT:", p->prompt, p->n_prompt, i);
            expect_section(&cursor, "CHOSEN RESPONSE:", p->chosen, p->n_chosen, i);
            expect_section(&cursor, "REJECTED RESPONSE:", p->rejected, p->n_rejected, i);
        }
    }
    char summary[96];
    snprintf(summary, sizeof summary, kto ? "%zu KTO rows" : "%zu preference pairs",
             kto ? ds.n_rows : ds.n_pairs);
    CHECK(strstr(text, summary) != NULL, "%s: \"%s\" not printed", yaml, summary);
    pref_dataset_free(&ds);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    free(text);
}

/* GRPO over plain prompts (no Python): the printed prompt ids and the other columns. */
static void check_grpo(void) {
    const char *prompts = harness_write_grpo_prompts();
    const char *yaml = harness_tmp_path("grpo.yaml");
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "base_model: models/tiny-arith\nrl: grpo\ntrl:\n  num_generations: 2\n"
                     "  reward_funcs: [builtin.accuracy]\ndatasets:\n  - path: %s\n"
                     "micro_batch_size: 2\nlearning_rate: 1e-5\noutput_dir: %s\n",
                     prompts, harness_tmp_path("out"));
    CHECK(harness_write_file(yaml, body, (size_t)n) == 0, "write %s", yaml);
    char yaml_copy[4096];
    snprintf(yaml_copy, sizeof yaml_copy, "%s", yaml);
    char *args[] = {yaml_copy, "--debug-num-examples", "2"};
    char *text;
    CHECK(run_preprocess(3, args, &text) == CLI_EXIT_OK, "grpo preprocess: %s", err_msg());
    TrainConfig cfg;
    load_config(&cfg, yaml_copy, NULL, 0);
    Tokenizer tok = {0};
    CHECK(tokenizer_load(&tok, cfg.tokenizer_config) == 0, "%s", err_msg());
    GrpoDataset ds = {0};
    CHECK(grpo_dataset_load(&ds, &cfg, cfg.datasets, cfg.n_datasets, &tok, stderr) == 0, "%s",
          err_msg());
    const char *cursor = text;
    for (size_t i = 0; i < 2 && i < ds.n; i++) {
        expect_section(&cursor, "INPUT PROMPT:", ds.prompt_ids[i], ds.prompt_lens[i], i);
        char answer[128];
        snprintf(answer, sizeof answer, "COLUMNS: {\"answer\": \"%s\"}",
                 json_string_value(json_object_get(json_array_get(ds.rows, i), "answer")));
        CHECK(strstr(cursor, answer) != NULL, "prompt %zu: \"%s\" not printed", i, answer);
    }
    CHECK(count_of(text, "INPUT PROMPT:") == 2, "2 prompts printed");
    grpo_dataset_free(&ds);
    tokenizer_free(&tok);
    train_config_free(&cfg);
    free(text);
}

int main(void) {
    CHECK(chdir(harness_source_path(".")) == 0, "cd to the source tree");
    check_sft();
    check_pref("examples/dpo.yaml", 3);
    check_pref("examples/kto.yaml", 2);
    check_pref("examples/orpo.yaml", 1);
    check_grpo();
    return harness_finish("test_preprocess_cli");
}
