/* The loaders end to end against Axolotl's order: two JSONL files (13 and 8 rows, row k saying
 * "row k"; rows 2, 9 and 15 longer than sequence_len) loaded through the SFT (alpaca), DPO, KTO
 * and GRPO loaders with seed 42 and val_set_size 0.25, then split as training splits them. The
 * train and eval rows, in order, must be those tools/reference/make_numpy_rng_fixtures.py gets
 * from `datasets` along Axolotl 0.19's code path for each (tests/fixtures/numpy_rng,
 * "loaders"): SFT shuffles before dropping the long rows, the RL methods after; with
 * shuffle_before_merging_datasets each file is shuffled first; shuffle_merged_datasets: false
 * keeps the files' order. */
#include "common/error.h"
#include "data/dataset_cache.h"
#include "data/grpo_dataset.h"
#include "data/pref_dataset.h"
#include "data/sft_dataset.h"
#include "harness.h"
#include "train/data_order.h"
#include "train/pref_task.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define N_ROWS 21

static const json_t *loaders;
static Tokenizer tok;

static bool is_long(int k) {
    const json_t *longs = json_object_get(loaders, "long");
    for (size_t i = 0; i < json_array_size(longs); i++)
        if (json_integer_value(json_array_get(longs, i)) == k) return true;
    return false;
}

/* 200 words: far beyond sequence_len 128. */
static void append_long_text(char *buf, size_t cap) {
    for (int w = 0; w < 200; w++)
        strncat(buf, " padding", cap - strlen(buf) - 1);
}

/* Writes files a.jsonl (rows 0..12) and b.jsonl (13..20) of one kind of row. */
static void write_files(const char *kind) {
    const char *names[2] = {"a.jsonl", "b.jsonl"};
    for (int f = 0, k = 0; f < 2; f++) {
        static char text[262144];
        text[0] = 0;
        for (int end = f == 0 ? 13 : N_ROWS; k < end; k++) {
            char tail[4096] = "";
            if (is_long(k)) append_long_text(tail, sizeof tail);
            char row[8192];
            if (!strcmp(kind, "sft"))
                snprintf(row, sizeof row,
                         "{\"instruction\": \"row %d\", \"input\": \"\", \"output\": \"ok%s\"}\n",
                         k, tail);
            else if (!strcmp(kind, "dpo"))
                snprintf(
                    row, sizeof row,
                    "{\"prompt\": \"row %d\", \"chosen\": \" yes%s\", \"rejected\": \" no\"}\n", k,
                    tail);
            else if (!strcmp(kind, "kto"))
                snprintf(row, sizeof row,
                         "{\"prompt\": \"row %d\", \"completion\": \" yes%s\", \"label\": true}\n",
                         k, tail);
            else
                snprintf(row, sizeof row, "{\"prompt\": \"row %d\"}\n", k);
            strncat(text, row, sizeof text - strlen(text) - 1);
        }
        harness_write_file(harness_tmp_path(names[f]), text, strlen(text));
    }
}

static bool load_config(TrainConfig *cfg, const char *rl, const char *type, const char *extra) {
    char yaml[4096];
    char type_line[64] = "";
    if (type) snprintf(type_line, sizeof type_line, "    type: %s\n", type);
    snprintf(yaml, sizeof yaml,
             "base_model: %s\n%slearning_rate: 1e-6\nsequence_len: 128\nseed: 42\n"
             "val_set_size: 0.25\ndataset_prepared_path: %s\ndatasets:\n"
             "  - path: %s\n%s  - path: %s\n%s%s",
             harness_source_path("tests/fixtures/tokenizers/qwen2_bytelevel"), rl,
             harness_tmp_path("prepared"), harness_tmp_path("a.jsonl"), type_line,
             harness_tmp_path("b.jsonl"), type_line, extra);
    const char *path = harness_tmp_path("order.yaml");
    harness_write_file(path, yaml, strlen(yaml));
    if (train_config_load(cfg, path, NULL, 0) == 0) return true;
    CHECK(0, "config: %s", err_msg());
    return false;
}

/* The k of "row k" in a token sequence (-1 when absent). */
static int row_of_ids(const int32_t *ids, int n) {
    char *text;
    size_t len;
    if (tokenizer_decode(&tok, ids, (size_t)n, true, &text, &len) != 0) return -1;
    const char *at = strstr(text, "row ");
    int k = at ? atoi(at + 4) : -1;
    free(text);
    return k;
}

static void check_rows(const char *what, const json_t *want, const int *got, size_t n) {
    bool same = json_array_size(want) == n;
    for (size_t i = 0; same && i < n; i++)
        same = json_integer_value(json_array_get(want, i)) == got[i];
    char line[512] = "";
    for (size_t i = 0; i < n && strlen(line) < 400; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), " %d", got[i]);
    CHECK(same, "%s: rows%s differ from Axolotl's (%zu of %zu)", what, line, n,
          json_array_size(want));
}

static void check_split(const char *what, const char *path_key, const int *train, size_t n_train,
                        const int *eval, size_t n_eval) {
    const json_t *want = json_object_get(loaders, path_key);
    char name[128];
    snprintf(name, sizeof name, "%s train", what);
    check_rows(name, json_object_get(want, "train"), train, n_train);
    snprintf(name, sizeof name, "%s eval", what);
    check_rows(name, json_object_get(want, "eval"), eval, n_eval);
}

static void check_sft(void) {
    write_files("sft");
    TrainConfig cfg;
    if (!load_config(&cfg, "", "alpaca", "")) return;
    int32_t eos, pad;
    SftDataset ds = {0}, val = {0};
    char dir[4096];
    FILE *log = tmpfile();
    CHECK(tokenizer_special_ids(cfg.tokenizer_config, &tok, &eos, &pad) == 0, "%s", err_msg());
    /* twice: tokenised, then from the cache, the same order */
    for (int pass = 0; pass < 2; pass++) {
        int rc = sft_dataset_prepare(&ds, &cfg, &tok, eos, 1 << 20, false, log, dir, sizeof dir);
        CHECK(rc == 0, "sft prepare: %s", err_msg());
        if (rc != 0) break;
        CHECK(ds.dropped_too_long == 3, "3 long rows dropped, not %zu", ds.dropped_too_long);
        size_t *order, n_val;
        CHECK(data_order_validation_draw(ds.n, &cfg, &order, &n_val) == 0, "%s", err_msg());
        data_order_move_held_out((void **)&ds.items, &ds.n, sizeof *ds.items, order, n_val,
                                 (void **)&val.items);
        val.n = n_val;
        free(order);
        int train[N_ROWS], eval[N_ROWS];
        for (size_t i = 0; i < ds.n; i++)
            train[i] = row_of_ids(ds.items[i].ids, ds.items[i].len);
        for (size_t i = 0; i < val.n; i++)
            eval[i] = row_of_ids(val.items[i].ids, val.items[i].len);
        check_split(pass ? "sft (cached)" : "sft", "sft", train, ds.n, eval, val.n);
        sft_dataset_free(&ds);
        sft_dataset_free(&val);
    }
    fclose(log);
    train_config_free(&cfg);
}

static void check_pref(const char *rl, const char *path_key, const char *extra) {
    bool kto = !strcmp(rl, "rl: kto\n");
    write_files(kto ? "kto" : "dpo");
    TrainConfig cfg;
    if (!load_config(&cfg, rl, NULL, extra)) return;
    PrefDataset ds, val;
    FILE *log = tmpfile();
    int rc = pref_dataset_load(&ds, &cfg, &tok, log);
    CHECK(rc == 0, "%s load: %s", path_key, err_msg());
    if (rc == 0) rc = pref_task_held_out(&ds, &cfg, &tok, kto, &val, log);
    CHECK(rc == 0, "%s held out: %s", path_key, err_msg());
    if (rc == 0) {
        int train[N_ROWS], eval[N_ROWS];
        size_t n_train = kto ? ds.n_rows : ds.n_pairs, n_eval = kto ? val.n_rows : val.n_pairs;
        for (size_t i = 0; i < n_train; i++)
            train[i] = kto ? row_of_ids(ds.rows[i].prompt, ds.rows[i].n_prompt)
                           : row_of_ids(ds.pairs[i].prompt, ds.pairs[i].n_prompt);
        for (size_t i = 0; i < n_eval; i++)
            eval[i] = kto ? row_of_ids(val.rows[i].prompt, val.rows[i].n_prompt)
                          : row_of_ids(val.pairs[i].prompt, val.pairs[i].n_prompt);
        char what[64];
        snprintf(what, sizeof what, "%.3s %s", rl + 4, path_key);
        check_split(what, path_key, train, n_train, eval, n_eval);
        pref_dataset_free(&ds);
        pref_dataset_free(&val);
    }
    fclose(log);
    train_config_free(&cfg);
}

static void check_grpo(void) {
    write_files("grpo");
    TrainConfig cfg;
    if (!load_config(&cfg, "rl: grpo\n", NULL,
                     "micro_batch_size: 8\ntrl:\n  reward_funcs: [builtin.accuracy]\n"))
        return;
    GrpoDataset ds, val;
    FILE *log = tmpfile();
    int rc = grpo_dataset_load(&ds, &cfg, cfg.datasets, cfg.n_datasets, &tok, log);
    CHECK(rc == 0, "grpo load: %s", err_msg());
    size_t *order, n_val;
    if (rc == 0) {
        CHECK(data_order_validation_draw(ds.n, &cfg, &order, &n_val) == 0, "%s", err_msg());
        grpo_dataset_split(&ds, order, n_val, &val);
        free(order);
        int train[N_ROWS], eval[N_ROWS];
        for (size_t i = 0; i < ds.n; i++)
            train[i] =
                atoi(json_string_value(json_object_get(json_array_get(ds.rows, i), "prompt")) + 4);
        for (size_t i = 0; i < val.n; i++)
            eval[i] =
                atoi(json_string_value(json_object_get(json_array_get(val.rows, i), "prompt")) + 4);
        check_split("grpo", "grpo", train, ds.n, eval, val.n);
        grpo_dataset_free(&ds);
        grpo_dataset_free(&val);
    }
    fclose(log);
    train_config_free(&cfg);
}

int main(void) {
    json_t *root = harness_load_fixture_json("tests/fixtures/numpy_rng/numpy_rng.json");
    if (!root) return 1;
    loaders = json_object_get(root, "loaders");
    if (tokenizer_load(&tok, harness_source_path("tests/fixtures/tokenizers/qwen2_bytelevel")) !=
        0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    check_sft();
    check_pref("rl: dpo\n", "rl", "");
    check_pref("rl: kto\n", "rl", "");
    check_pref("rl: dpo\n", "rl_before_merging", "shuffle_before_merging_datasets: true\n");
    check_pref("rl: dpo\n", "rl_unshuffled", "shuffle_merged_datasets: false\n");
    check_grpo();
    tokenizer_free(&tok);
    json_decref(root);
    return harness_finish("test_dataset_order");
}
