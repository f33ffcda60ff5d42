/* The key status table (config/key_status.h) against Axolotl's own schema and through the
 * config loader: every key Axolotl documents has a row in its scope (the list comes from
 * Axolotl's source: tools/reference/dump_axolotl_config_keys.py); the top-level `used` rows are
 * the keys rlhf.c reads; every row's name, misspelt, is answered with a key of the same scope;
 * names of other programs get no absurd suggestion; neutral values are silent, refused ones
 * errors; nested command-line overrides reach their key; --strict refuses warnings;
 * docs/config-keys.md is the table as `rlhf config-keys` prints it. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "config/key_status.h"
#include "config/train_config.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const scope_names[KEY_SCOPE_COUNT] = {"top", "trl", "vllm", "dataset",
                                                         "dataset_type"};

static bool has_warning(const TrainConfig *c, const char *a, const char *b) {
    for (int i = 0; i < c->n_warnings; i++)
        if (strstr(c->warnings[i], a) && (!b || strstr(c->warnings[i], b))) return true;
    return false;
}

/* Invariant 1: the keys of Axolotl's schema each have a row in their scope. */
static void test_axolotl_keys_covered(void) {
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(harness_source_path("tests/fixtures/config_keys/axolotl_keys.txt"), &text,
                    &len) == 0,
          "%s", err_msg());
    if (!text) return;
    int keys = 0, missing = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char scope[16], key[128];
        if (sscanf(line, "%15s %127s", scope, key) != 2) continue;
        int s = 0;
        while (s < KEY_SCOPE_COUNT && strcmp(scope_names[s], scope) != 0)
            s++;
        CHECK(s < KEY_SCOPE_COUNT, "scope %s", scope);
        if (s == KEY_SCOPE_COUNT) continue;
        keys++;
        if (!key_status_find((KeyScope)s, key)) {
            missing++;
            CHECK(0, "Axolotl's %s key '%s' has no row in the status table", scope, key);
        }
    }
    free(text);
    printf("%d Axolotl keys, %d without a row\n", keys, missing);
    CHECK(keys > 450, "the fixture lists Axolotl's keys (%d)", keys);
}

/* Invariant 2: the top-level used rows are exactly the keys read into a TrainConfig. */
static void test_used_rows_are_read_keys(void) {
    size_t n_read = 0;
    for (const char *k; (k = train_config_read_key_name(n_read)); n_read++) {
        const KeyStatusRow *row = key_status_find(KEY_SCOPE_TOP, k);
        CHECK(row && row->status == KEY_USED, "read key '%s' has a used row", k);
    }
    size_t n;
    const KeyStatusRow *rows = key_status_rows(KEY_SCOPE_TOP, &n);
    for (size_t i = 0; i < n; i++) {
        if (rows[i].status != KEY_USED) continue;
        bool read = false;
        for (size_t j = 0; j < n_read && !read; j++)
            read = strcmp(train_config_read_key_name(j), rows[i].name) == 0;
        CHECK(read, "used row '%s' is a key rlhf.c reads", rows[i].name);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(rows[j].name, rows[i].name) != 0, "'%s' has one row", rows[i].name);
    }
}

/* A config with `key: 1` placed in `scope`; *line is the key's line. */
static void config_with(KeyScope scope, const char *key, char *buf, size_t size, int *line) {
    switch (scope) {
    case KEY_SCOPE_TOP:
        snprintf(buf, size,
                 "base_model: m\ndatasets:\n  - path: d.jsonl\nlearning_rate: 1e-4\n"
                 "%s: 1\n",
                 key);
        *line = 5;
        return;
    case KEY_SCOPE_TRL:
        snprintf(buf, size,
                 "base_model: m\nrl: dpo\ndatasets:\n  - path: d.jsonl\n"
                 "learning_rate: 1e-4\ntrl:\n  beta: 0.1\n  %s: 1\n",
                 key);
        *line = 8;
        return;
    case KEY_SCOPE_VLLM:
        snprintf(buf, size,
                 "base_model: m\ndatasets:\n  - path: d.jsonl\nlearning_rate: 1e-4\n"
                 "vllm:\n  host: 0.0.0.0\n  %s: 1\n",
                 key);
        *line = 7;
        return;
    case KEY_SCOPE_DATASET_TYPE:
        snprintf(buf, size,
                 "base_model: m\ndatasets:\n  - path: d.jsonl\n    type:\n      %s: 1\n"
                 "learning_rate: 1e-4\n",
                 key);
        *line = 5;
        return;
    default:
        snprintf(buf, size,
                 "base_model: m\ndatasets:\n  - path: d.jsonl\n    %s: 1\n"
                 "learning_rate: 1e-4\n",
                 key);
        *line = 4;
        return;
    }
}

/* The suggestion in "... (did you mean 'PREFIXkey'?)", or "" when there is none. */
static void suggestion(const char *warning, const char *prefix, char *out, size_t size) {
    out[0] = '\0';
    const char *p = strstr(warning, "did you mean '");
    if (!p) return;
    p += strlen("did you mean '");
    if (strncmp(p, prefix, strlen(prefix)) == 0) p += strlen(prefix);
    size_t len = strcspn(p, "'");
    snprintf(out, size, "%.*s", (int)len, p);
}

/* One misspelling of `name`, of kind k: 0 drops a middle letter, 1 swaps two, 2 doubles one. */
static bool misspell(const char *name, int k, char *out, size_t size) {
    size_t len = strlen(name), mid = len / 2;
    if (len + 2 > size || len < 3) return false;
    if (k == 0) {
        memcpy(out, name, mid);
        strcpy(out + mid, name + mid + 1);
    } else if (k == 1) {
        strcpy(out, name);
        if (out[mid] == out[mid - 1]) return false;
        out[mid] = name[mid - 1];
        out[mid - 1] = name[mid];
    } else {
        memcpy(out, name, mid + 1);
        strcpy(out + mid + 1, name + mid);
    }
    return true;
}

/* Invariant 3: each row's name misspelt, in its own place in a config file, gets a warning on
 * its own line whose suggestion is a key of the same scope. */
static void test_typos_suggest_same_scope(void) {
    int checked = 0;
    for (int s = 0; s < KEY_SCOPE_COUNT; s++) {
        size_t n;
        const KeyStatusRow *rows = key_status_rows((KeyScope)s, &n);
        const char *prefix = s == KEY_SCOPE_DATASET        ? "datasets[0]."
                             : s == KEY_SCOPE_DATASET_TYPE ? "datasets[0].type."
                                                           : key_scope_prefix(s);
        for (size_t i = 0; i < n; i++) {
            for (int k = 0; k < 3; k++) {
                char typo[160], yaml[1024], at[64], near[160];
                int line;
                if (!misspell(rows[i].name, k, typo, sizeof typo)) continue;
                if (key_status_find((KeyScope)s, typo)) continue; /* another real key */
                config_with((KeyScope)s, typo, yaml, sizeof yaml, &line);
                TrainConfig c;
                if (train_config_load_text(&c, yaml, "typo.yaml") != 0) {
                    CHECK(0, "%s%s: %s", prefix, typo, err_msg());
                    continue;
                }
                snprintf(at, sizeof at, "typo.yaml:%d:", line);
                const char *w = NULL;
                for (int j = 0; j < c.n_warnings; j++)
                    if (strstr(c.warnings[j], typo)) w = c.warnings[j];
                CHECK(w && strncmp(w, at, strlen(at)) == 0 && strstr(w, "unknown key"),
                      "%s%s: a warning on its own line (%s)", prefix, typo, w ? w : "none");
                if (w) {
                    suggestion(w, prefix, near, sizeof near);
                    CHECK(near[0] && key_status_find((KeyScope)s, near),
                          "%s%s: suggests a %s key (%s)", prefix, typo, scope_names[s], w);
                }
                checked++;
                train_config_free(&c);
            }
        }
    }
    printf("%d misspellings checked\n", checked);
}

/* Real keys of other programs are not answered with an absurd key: no suggestion at all, or
 * the one that is meant. */
static void test_no_absurd_suggestions(void) {
    static const struct {
        KeyScope scope;
        const char *name, *want; /* want NULL: no suggestion */
    } cases[] = {
        {KEY_SCOPE_TOP, "per_device_train_batch_size", NULL},
        {KEY_SCOPE_TOP, "per_device_eval_batch_size", NULL},
        {KEY_SCOPE_TOP, "report_to_x", "report_to"},
        {KEY_SCOPE_TOP, "reprot_to", "report_to"},
        {KEY_SCOPE_TOP, "push_to_hb", "push_to_hub"},
        {KEY_SCOPE_TOP, "zz", NULL},
        {KEY_SCOPE_TRL, "num_generation", "num_generations"},
        {KEY_SCOPE_TRL, "learning_rate", NULL},
        {KEY_SCOPE_DATASET, "feild_messages", "field_messages"},
        {KEY_SCOPE_DATASET, "learning_rate", NULL},
        {KEY_SCOPE_DATASET_TYPE, "feild_prompt", "field_prompt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = key_status_nearest(cases[i].scope, cases[i].name);
        CHECK(cases[i].want ? got && strcmp(got, cases[i].want) == 0 : got == NULL,
              "%s%s: suggestion %s (want %s)", key_scope_prefix(cases[i].scope), cases[i].name,
              got ? got : "none", cases[i].want ? cases[i].want : "none");
    }
}

static int load(const char *extra, TrainConfig *c) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "base_model: m\ndatasets:\n  - path: d.jsonl\nlearning_rate: 1e-4\n%s", extra);
    return train_config_load_text(c, yaml, "cfg.yaml");
}

/* Neutral values are silent; a refused key with any other value is an error naming the key and
 * its line; no-op keys warn with their reason. */
static void test_statuses(void) {
    TrainConfig c;
    CHECK(load("sample_packing: false\nload_in_8bit: false\nload_in_4bit: false\n"
               "remove_unused_columns: false\nmodel_type: AutoModelForCausalLM\n"
               "base_model_config: m\ntf32: false\n",
               &c) == 0 &&
              c.n_warnings == 0,
          "neutral values are silent (%d warnings: %s)", c.n_warnings,
          c.n_warnings ? c.warnings[0] : "");
    train_config_free(&c);

    CHECK(load("adapter: lora\nlora_r: 8\nload_in_4bit: true\n", &c) != 0 &&
              strstr(err_msg(), "'load_in_4bit': true needs adapter: qlora"),
          "load_in_4bit: true with adapter: lora: %s", err_msg());
    CHECK(load("adapter: lora\nlora_r: 8\nload_in_8bit: true\n", &c) != 0 &&
              strstr(err_msg(), "cfg.yaml:7: key 'load_in_8bit' is not supported") &&
              strstr(err_msg(), "set it to false"),
          "load_in_8bit: true: %s", err_msg());
    CHECK(load("sample_packing: true\nsample_packing_bin_size: 7\n", &c) == 0 && c.sample_packing &&
              c.sample_packing_bin_size == 7 && c.sample_packing_group_size == 100000 &&
              !c.sample_packing_sequentially,
          "sample_packing: true is read for SFT: %s", err_msg());
    train_config_free(&c);
    CHECK(load("sample_packing: true\nsample_packing_eff_est: 0.9\n", &c) == 0 &&
              c.n_warnings == 1 && strstr(c.warnings[0], "sample_packing_eff_est"),
          "sample_packing_eff_est warns (rlhf.c plans on the rows it packed): %d warnings",
          c.n_warnings);
    train_config_free(&c);
    CHECK(load("rl: dpo\nsample_packing: true\n", &c) != 0 &&
              strstr(err_msg(), "key 'sample_packing'") && strstr(err_msg(), "rl unset"),
          "sample_packing: true with rl: dpo: %s", err_msg());
    CHECK(load("sample_packing: true\nsample_packing_group_size: 0\n", &c) != 0 &&
              strstr(err_msg(), "sample_packing_group_size"),
          "sample_packing_group_size: 0: %s", err_msg());
    CHECK(
        load("rl: grpo\ntrl:\n  num_generations: 2\n  reward_funcs: [builtin.length]\n"
             "  vllm_guided_decoding_regex: \"[0-9]+\"\n",
             &c) != 0 &&
            strstr(err_msg(), "cfg.yaml:9: key 'trl.vllm_guided_decoding_regex' is not supported"),
        "trl.vllm_guided_decoding_regex: %s", err_msg());
    CHECK(load("rl: dpo\ntrl:\n  sync_ref_model: true\n", &c) != 0 &&
              strstr(err_msg(), "cfg.yaml:7: key 'trl.sync_ref_model'") &&
              strstr(err_msg(), "not rl: dpo"),
          "trl.sync_ref_model with rl: dpo: %s", err_msg());
    CHECK(load("rl: dpo\ntrl:\n  sync_ref_model: false\n", &c) == 0, "%s", err_msg());
    train_config_free(&c);
    CHECK(load("rl: grpo\ntrl:\n  num_generations: 2\n  reward_funcs: [builtin.length]\n"
               "  temperature: hot\n",
               &c) != 0 &&
              strstr(err_msg(), "cfg.yaml:9: key 'trl.temperature': expected a number"),
          "an error about a trl: key names its own line: %s", err_msg());
    /* read, then refused where model paths are resolved (train_config_resolve_models) */
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "base_model: %s\nbase_model_config: ./other\ndatasets:\n  - path: d.jsonl\n"
             "learning_rate: 1e-4\n",
             harness_source_path("models/tiny-arith"));
    CHECK(train_config_load_text(&c, yaml, "cfg.yaml") == 0, "%s", err_msg());
    CHECK(train_config_resolve_models(&c) != 0 && strstr(err_msg(), "base_model_config"),
          "a base_model_config other than base_model: %s", err_msg());
    train_config_free(&c);
    CHECK(load("datasets:\n  - path: d.jsonl\n    shards: 4\n", &c) != 0 &&
              strstr(err_msg(), "cfg.yaml:7: key 'datasets[0].shards' is not supported"),
          "datasets[0].shards: %s", err_msg());

    CHECK(load("flash_attention: true\nrl: kto\nremove_unused_columns: false\n"
               "trl:\n  beta: 0.2\n  num_generations: 4\n  use_vllm: true\n",
               &c) == 0,
          "%s", err_msg());
    CHECK(has_warning(&c, "cfg.yaml:5: key 'flash_attention' has no effect", "CPU kernels"),
          "no-op key: warned with its reason");
    CHECK(has_warning(&c, "cfg.yaml:10: key 'trl.num_generations' is read by rl: grpo, gdpo only",
                      "rl: kto"),
          "a GRPO key with rl: kto: warned on its own line");
    CHECK(has_warning(&c, "cfg.yaml:11: key 'trl.use_vllm' is read by rl: grpo, gdpo only",
                      "rl: kto"),
          "trl.use_vllm: true with rl: kto (GRPO's generation server key)");
    CHECK(!has_warning(&c, "remove_unused_columns", NULL) && !has_warning(&c, "trl.beta", NULL),
          "remove_unused_columns and trl.beta are silent for KTO");
    CHECK(c.beta == 0.2, "trl.beta read");
    train_config_free(&c);
}

/* --trl.K, --datasets.N.K, --vllm.K and the dash spelling reach their keys; typos there are
 * errors with a suggestion from the same scope. */
static void test_nested_overrides(void) {
    const char *path = harness_tmp_path("nested.yaml");
    const char *yaml = "base_model: m\nrl: dpo\ndatasets:\n  - path: d.jsonl\n    type: "
                       "chatml.intel\nlearning_rate: 1e-4\ntrl:\n  beta: 0.1\n";
    harness_write_file(path, yaml, strlen(yaml));
    const char *ov[] = {"trl.beta",         "0.25",    "datasets.0.path", "other.jsonl",
                        "learning-rate",    "3e-4",    "vllm.port",       "8001",
                        "datasets.0.split", "held_out"};
    TrainConfig c;
    CHECK(train_config_load(&c, path, ov, 5) == 0, "%s", err_msg());
    if (c.source) {
        CHECK(c.beta == 0.25, "--trl.beta 0.25 (beta %g)", c.beta);
        CHECK(strcmp(c.datasets[0].path, "other.jsonl") == 0 &&
                  strcmp(c.datasets[0].split, "held_out") == 0,
              "--datasets.0.path, --datasets.0.split");
        CHECK(strcmp(json_string_value(json_object_get(
                         json_array_get(json_object_get(c.raw, "datasets"), 0), "path")),
                     "other.jsonl") == 0,
              "the override reaches the raw config too");
        CHECK(c.learning_rate == 3e-4, "--learning-rate is --learning_rate");
        train_config_free(&c);
    }
    static const struct {
        const char *key, *want;
    } bad[] = {{"trl.num_generation", "--trl.num_generations"},
               {"datasets.0.feild_messages", "--datasets.0.field_messages"},
               {"datasets.1.path", "datasets has 1 entry"},
               {"vllm.prot", "--vllm.port"},
               {"trl.learning_rate", "no trl: key is close"},
               {"model.path", "nested keys are --trl.KEY"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *o[] = {bad[i].key, "1"};
        CHECK(train_config_load(&c, path, o, 1) != 0 && strstr(err_msg(), bad[i].want), "--%s: %s",
              bad[i].key, err_msg());
    }
}

/* rlhf train --strict: a config with warnings stops before anything is loaded; --key=value. */
static void test_strict(void) {
    const char *path = harness_tmp_path("strict.yaml");
    const char *yaml = "base_model: /nonexistent\ndatasets:\n  - path: d.jsonl\nlearning_rate: "
                       "1e-4\nflash_attention: true\n";
    harness_write_file(path, yaml, strlen(yaml));
    char *args[] = {(char *)path, "--strict", "--output_dir=/nonexistent/out"};
    CHECK(cli_train(3, args) == CLI_EXIT_FAILURE && strstr(err_msg(), "--strict") &&
              strstr(err_msg(), "flash_attention"),
          "--strict refuses the warning: %s", err_msg());
    char *lax[] = {(char *)path, "--output_dir=/nonexistent/out"};
    CHECK(cli_train(2, lax) == CLI_EXIT_FAILURE && !strstr(err_msg(), "--strict") &&
              strstr(err_msg(), "/nonexistent"),
          "without --strict it goes on to load the model: %s", err_msg());
}

/* docs/config-keys.md holds the table as `rlhf config-keys` prints it. */
static void test_docs_table(void) {
    char *doc = NULL, *printed = NULL;
    size_t doc_len = 0, printed_len = 0;
    CHECK(read_file(harness_source_path("docs/config-keys.md"), &doc, &doc_len) == 0, "%s",
          err_msg());
    FILE *f = fopen(harness_tmp_path("table.md"), "w");
    key_status_print_markdown(f);
    fclose(f);
    CHECK(read_file(harness_tmp_path("table.md"), &printed, &printed_len) == 0, "%s", err_msg());
    const char *table = doc ? strstr(doc, "\n| key | status |") : NULL;
    if (table) table++;
    CHECK(table && printed && strcmp(table, printed) == 0,
          "docs/config-keys.md ends with the table `rlhf config-keys` prints (regenerate it: "
          "see the top of the file)");
    free(doc);
    free(printed);
}

int main(void) {
    test_axolotl_keys_covered();
    test_used_rows_are_read_keys();
    test_typos_suggest_same_scope();
    test_no_absurd_suggestions();
    test_statuses();
    test_nested_overrides();
    test_strict();
    test_docs_table();
    return harness_finish("test_config_keys");
}
