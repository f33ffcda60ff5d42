/* Python dataset transforms (data/python_transform.h) run as Axolotl's RL loader runs them:
 * factory(cfg, dataset_idx=i) -> map_fn or (map_fn, {"remove_columns": ...}), then
 * datasets.map over the rows. The expected rows (values and column order) were produced by the
 * real `datasets` 5.2 Dataset.map in tools/reference/.venv on the same row and functions.
 * Also: Axolotl's own documentation example (tests/fixtures/axolotl_rewards/rewards.py,
 * unchanged), the config as a DictDefault, name resolution, every error, and that repeated runs
 * leak no Python objects. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/python_transform.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char transforms_py[] =
    "import gc\n"
    "import sys\n"
    "\n"
    "\n"
    "def cfg_probe(cfg, dataset_idx, **kwargs):\n"
    "    info = {\n"
    "        'beta': cfg.trl.beta,\n"
    "        'item_access': cfg['trl']['beta'],\n"
    "        'missing': cfg.no_such_key,\n"
    "        'missing_nested': cfg.trl.no_such_key,\n"
    "        'first_type': cfg.datasets[0].type,\n"
    "        'is_dict': isinstance(cfg, dict),\n"
    "        'idx': dataset_idx,\n"
    "    }\n"
    "    return lambda example: dict(info)\n"
    "\n"
    "\n"
    "def keeps_returned(cfg, *args, **kwargs):\n"
    "    def transform(example):\n"
    "        return {'q': example['q'].upper(), 'c': example['a'] * 2}\n"
    "    return transform, {'remove_columns': ['q', 'a', 'not_a_column']}\n"
    "\n"
    "\n"
    "def big_ints(cfg, *args, **kwargs):\n"
    "    return lambda example: {'big': example['big'] + 1, 'kind': "
    "type(example['big']).__name__}\n"
    "\n"
    "\n"
    "def remove_all(cfg, *args, **kwargs):\n"
    "    return (lambda example: {'prompt': example['q'], 'a': example['a'] + 1},\n"
    "            {'remove_columns': '__all__'})\n"
    "\n"
    "\n"
    "def in_place(cfg, *args, **kwargs):\n"
    "    def transform(example):\n"
    "        example['a'] = -example['a']\n"
    "        example['added'] = 'yes'\n"
    "        return {}\n"
    "    return transform\n"
    "\n"
    "\n"
    "def returns_row(cfg, *args, **kwargs):\n"
    "    def transform(example):\n"
    "        example['a'] = 5\n"
    "        return example\n"
    "    return transform, {'remove_columns': ['q']}\n"
    "\n"
    "\n"
    "def side_effects_only(cfg, *args, **kwargs):\n"
    "    def transform(example):\n"
    "        example['a'] = 99\n"
    "        return None\n"
    "    return transform, {'remove_columns': ['q']}\n"
    "\n"
    "\n"
    "def with_tokenizer(cfg, *args, **kwargs):\n"
    "    def transform(example, tokenizer):\n"
    "        return {'tokenizer_is_none': tokenizer is None}\n"
    "    return transform\n"
    "\n"
    "\n"
    "def raises_on_row(cfg, *args, **kwargs):\n"
    "    def transform(example):\n"
    "        return {'answer': example['answer'].split('####')[1].strip()}\n"
    "    return transform\n"
    "\n"
    "\n"
    "def factory_raises(cfg, *args, **kwargs):\n"
    "    raise KeyError('reward_model')\n"
    "\n"
    "\n"
    "def none_then_dict(cfg, *args, **kwargs):\n"
    "    return lambda example: None if example['a'] == 1 else {'z': 1}\n"
    "\n"
    "\n"
    "def varying_keys(cfg, *args, **kwargs):\n"
    "    return lambda example: {'x': 1} if example['a'] == 1 else {'x': 1, 'y': 2}\n"
    "\n"
    "\n"
    "def returns_list(cfg, *args, **kwargs):\n"
    "    return lambda example: [example['a']]\n"
    "\n"
    "\n"
    "def returns_set(cfg, *args, **kwargs):\n"
    "    return lambda example: {'tags': [{'set': {'a'}}]}\n"
    "\n"
    "\n"
    "def batched_option(cfg, *args, **kwargs):\n"
    "    return (lambda example: example), {'batched': True}\n"
    "\n"
    "\n"
    "def string_remove(cfg, *args, **kwargs):\n"
    "    return (lambda example: {}), {'remove_columns': 'q'}\n"
    "\n"
    "\n"
    "def returns_int(cfg, *args, **kwargs):\n"
    "    return 7\n"
    "\n"
    "\n"
    "def no_dataset_idx(cfg):\n"
    "    return lambda example: {}\n"
    "\n"
    "\n"
    "def allocated_blocks(cfg, *args, **kwargs):\n"
    "    gc.collect()  # cycles awaiting the collector are not leaks\n"
    "    return lambda example: {'blocks': sys.getallocatedblocks()}\n";

static const char default_py[] = "def default(cfg, *args, **kwargs):\n"
                                 "    return lambda example: {'via': 'default'}\n";

static bool msg_has(const char *needle) {
    bool ok = strstr(err_msg(), needle) != NULL;
    if (!ok) fprintf(stderr, "  message lacks \"%s\": %s\n", needle, err_msg());
    return ok;
}

/* The one row most tests map: {"a": 1, "q": "x", "b": true}. */
static json_t *one_row(void) {
    return json_pack("[{s:i, s:s, s:b}]", "a", 1, "q", "x", "b", 1);
}

/* Maps one_row() with spec and compares row 0, keys in order, with want (compact JSON). */
static void check_row(const char *spec, const char *want) {
    json_t *rows = one_row(), *out = NULL;
    int rc = python_transform_rows(spec, NULL, 0, rows, &out);
    CHECK(rc == 0, "%s: %s", spec, err_msg());
    char *got = rc == 0 ? json_dumps(json_array_get(out, 0), JSON_COMPACT) : NULL;
    CHECK(got && strcmp(got, want) == 0, "%s: got %s, want %s", spec, got ? got : "-", want);
    json_t *again = one_row();
    CHECK(json_equal(rows, again), "%s: the input rows were modified", spec);
    free(got);
    json_decref(again);
    json_decref(rows);
    json_decref(out);
}

/* Expects spec to fail on rows; returns so the caller checks the message. */
static bool fails(const char *spec, json_t *rows) {
    json_t *out = NULL;
    int rc = python_transform_rows(spec, NULL, 0, rows, &out);
    json_decref(rows);
    if (rc == 0) json_decref(out);
    return rc == -1 && out == NULL;
}

static void check_axolotl_docs_example(void) {
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(harness_source_path("tests/fixtures/axolotl_rewards/rewards.py"), &text,
                    &len) == 0,
          "%s", err_msg());
    CHECK(harness_write_file(harness_tmp_path("rewards.py"), text, len) == 0, "write rewards.py");
    free(text);

    const char *q0 = "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                     "many clips in May. How many clips did Natalia sell altogether in April and "
                     "May?";
    const char *q1 = "A shop sells 1,000 pens a day. How many in 2 days?";
    json_t *rows = json_pack(
        "[{s:s, s:s}, {s:s, s:s}]", "question", q0, "answer",
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
        "clips altogether in April and May.\n#### 72",
        "question", q1, "answer", "1,000 * 2 = 2,000\n####  2,000 ");
    json_t *cfg = json_pack("{s:s, s:{s:[s]}}", "rl", "grpo", "trl", "reward_funcs",
                            "rewards.rand_reward_func");
    json_t *out = NULL;
    CHECK(python_transform_rows("rewards.oai_gsm8k_transform", cfg, 0, rows, &out) == 0, "%s",
          err_msg());
    json_t *want = json_pack("[{s:s, s:[{s:s, s:s}]}, {s:s, s:[{s:s, s:s}]}]", "answer", "72",
                             "prompt", "role", "user", "content", q0, "answer", "2000", "prompt",
                             "role", "user", "content", q1);
    CHECK(out && json_equal(out, want), "GSM8K transform: %s",
          out ? json_dumps(out, JSON_COMPACT) : "-");
    for (size_t i = 0; out && i < json_array_size(out); i++)
        CHECK(!json_object_get(json_array_get(out, i), "question"), "question removed");
    json_decref(want);
    json_decref(out);
    json_decref(rows);
    json_decref(cfg);
}

static void check_config_as_dict_default(void) {
    json_t *cfg = json_pack("{s:s, s:{s:f}, s:[{s:s, s:s}]}", "rl", "grpo", "trl", "beta", 0.001,
                            "datasets", "path", "openai/gsm8k", "type", "pyr_transforms.cfg_probe");
    json_t *rows = one_row(), *out = NULL;
    CHECK(python_transform_rows("pyr_transforms.cfg_probe", cfg, 2, rows, &out) == 0, "%s",
          err_msg());
    json_t *row = json_array_get(out, 0);
    json_t *want = json_pack("{s:f, s:f, s:n, s:n, s:s, s:b, s:i}", "beta", 0.001, "item_access",
                             0.001, "missing", "missing_nested", "first_type",
                             "pyr_transforms.cfg_probe", "is_dict", 1, "idx", 2);
    const char *key;
    json_t *value;
    json_object_foreach(want, key, value) {
        CHECK(json_equal(json_object_get(row, key), value), "cfg_probe: %s", key);
    }
    json_decref(want);
    json_decref(out);
    json_decref(rows);
    json_decref(cfg);
}

static void check_datasets_map_semantics(void) {
    /* A removed column that is also returned keeps the new value in its place; a removed name
     * the rows lack is ignored, as Axolotl filters the list. */
    check_row("pyr_transforms.keeps_returned", "{\"q\":\"X\",\"b\":true,\"c\":2}");
    check_row("pyr_transforms.remove_all", "{\"a\":2,\"prompt\":\"x\"}");
    check_row("pyr_transforms.in_place", "{\"a\":-1,\"q\":\"x\",\"b\":true,\"added\":\"yes\"}");
    check_row("pyr_transforms.returns_row", "{\"a\":5,\"b\":true}");
    check_row("pyr_transforms.side_effects_only", "{\"a\":1,\"q\":\"x\",\"b\":true}");
    check_row("pyr_transforms.with_tokenizer",
              "{\"a\":1,\"q\":\"x\",\"b\":true,\"tokenizer_is_none\":true}");
    /* Axolotl's name rules: no dot means ".default"; only the last two parts count. */
    check_row("pyr_tdefault", "{\"a\":1,\"q\":\"x\",\"b\":true,\"via\":\"default\"}");
    check_row("some.package.pyr_transforms.returns_row", "{\"a\":5,\"b\":true}");
}

/* Integers beyond int64 (JSON bignums) reach Python as ints and come back exact, as a row of
 * datasets (Arrow would refuse them; Python's json keeps them). */
static void check_big_ints(void) {
    const char *text = "[{\"big\": 18446744073709551615, \"a\": 1}]";
    json_t *rows, *out = NULL;
    CHECK(json_load_text(text, strlen(text), "rows", &rows) == 0, "%s", err_msg());
    int rc = python_transform_rows("pyr_transforms.big_ints", NULL, 0, rows, &out);
    CHECK(rc == 0, "big_ints: %s", err_msg());
    const json_t *row = rc == 0 ? json_array_get(out, 0) : NULL;
    const char *big = row ? json_bignum_text(json_object_get(row, "big")) : NULL;
    CHECK(big && strcmp(big, "18446744073709551616") == 0, "big + 1 = %s", big ? big : "-");
    CHECK(row && json_is_string(json_object_get(row, "kind")) &&
              strcmp(json_string_value(json_object_get(row, "kind")), "int") == 0,
          "a bignum is a Python int");
    json_decref(rows);
    json_decref(out);
}

static void check_errors(void) {
    json_t *rows = json_pack("[{s:s}, {s:s}, {s:s}]", "answer", "#### 1", "answer", "#### 2",
                             "answer", "no marker");
    CHECK(fails("pyr_transforms.raises_on_row", rows), "raising row mapped");
    CHECK(msg_has("dataset type 'pyr_transforms.raises_on_row', row 2: IndexError") &&
              msg_has("pyr_transforms.py:"),
          "raise on a row");

    CHECK(fails("pyr_transforms.factory_raises", one_row()), "raising factory");
    CHECK(msg_has("Failed to load dataset transform function for type "
                  "'pyr_transforms.factory_raises'") &&
              msg_has("dataset_idx=0) raised: KeyError: 'reward_model'"),
          "raise in factory");

    CHECK(fails("no_such_file.transform", one_row()), "missing module");
    CHECK(msg_has("Failed to load dataset transform function for type 'no_such_file.transform'") &&
              msg_has("No module named 'no_such_file'"),
          "missing module");

    CHECK(fails("pyr_transforms.nope", one_row()), "missing function");
    CHECK(msg_has("has no attribute 'nope'"), "missing function");

    CHECK(fails("pyr_transforms.no_dataset_idx", one_row()), "factory without dataset_idx");
    CHECK(msg_has("unexpected keyword argument 'dataset_idx'"), "dataset_idx is a keyword");

    json_t *two = json_pack("[{s:i}, {s:i}]", "a", 1, "a", 2);
    CHECK(fails("pyr_transforms.none_then_dict", two), "None then dict");
    CHECK(msg_has("row 1: the transform returned a dict, but None for row 0"), "None then dict");

    two = json_pack("[{s:i}, {s:i}]", "a", 1, "a", 2);
    CHECK(fails("pyr_transforms.varying_keys", two), "varying keys");
    CHECK(msg_has("row 1: the transform returned key 'y'"), "varying keys");

    CHECK(fails("pyr_transforms.returns_list", one_row()), "a list result");
    CHECK(msg_has("row 0: the transform returned a list; expected a dict"), "list result");

    CHECK(fails("pyr_transforms.returns_set", one_row()), "a set in the result");
    CHECK(msg_has("row 0: the transform's result['tags'][0]['set']: not a JSON value") &&
              msg_has("got set"),
          "set");

    CHECK(fails("pyr_transforms.batched_option", one_row()), "batched");
    CHECK(msg_has("map option 'batched' is not supported"), "batched");

    CHECK(fails("pyr_transforms.string_remove", one_row()), "remove_columns: 'q'");
    CHECK(msg_has("remove_columns must be a list of column names or \"__all__\""), "string");

    CHECK(fails("pyr_transforms.returns_int", one_row()), "factory gives an int");
    CHECK(msg_has("the transform returned a int; expected a function"), "int");

    CHECK(fails("pyr_transforms.in_place", json_pack("[s]", "not a row")), "a string row");
    CHECK(msg_has("row 0: expected an object"), "string row");
}

/* A leaked reference on any path costs at least one block per run, so 1000 runs after warming
 * up must add fewer than 1000 live blocks. (A few hundred come and go with interpreter caches
 * filling up, whatever the number of runs.) */
static void check_no_python_leak(void) {
    enum { RUNS = 1000 };
    double blocks[2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < (round == 0 ? 50 : RUNS); i++) {
            json_t *rows = one_row(), *out = NULL;
            python_transform_rows("pyr_transforms.keeps_returned", NULL, 0, rows, &out);
            json_decref(out);
            json_decref(rows);
            CHECK(fails("pyr_transforms.raises_on_row", json_pack("[{s:s}]", "answer", "x")),
                  "raises");
        }
        json_t *rows = one_row(), *out = NULL;
        CHECK(python_transform_rows("pyr_transforms.allocated_blocks", NULL, 0, rows, &out) == 0,
              "%s", err_msg());
        blocks[round] = json_number_value(json_object_get(json_array_get(out, 0), "blocks"));
        json_decref(out);
        json_decref(rows);
    }
    CHECK(blocks[0] > 0 && blocks[1] - blocks[0] < RUNS, "Python blocks %g -> %g over %d runs",
          blocks[0], blocks[1], RUNS);
}

int main(void) {
    const char *dir = harness_tmpdir();
    CHECK(harness_write_file(harness_tmp_path("pyr_transforms.py"), transforms_py,
                             strlen(transforms_py)) == 0,
          "write");
    CHECK(harness_write_file(harness_tmp_path("pyr_tdefault.py"), default_py, strlen(default_py)) ==
              0,
          "write");
    /* Axolotl runs as `python -m`: the working directory is where modules are found. */
    CHECK(chdir(dir) == 0, "chdir %s", dir);

    check_axolotl_docs_example();
    check_config_as_dict_default();
    check_datasets_map_semantics();
    check_big_ints();
    check_errors();
    check_no_python_leak();
    return harness_finish("test_python_transform");
}
