/* common/numpy_pcg64 data/dataset_merge's dataset shuffle and train/data_order's split against
 * NumPy and `datasets` themselves: tests/fixtures/numpy_rng/numpy_rng.json
 * (tools/reference/make_numpy_rng_fixtures.py) holds default_rng(seed)'s raw stream, its
 * permutation(n) for n = 0 .. 1000, NumPy's own C random_interval() over bounds around 2^32 (its
 * 32- to 64-bit switch), Dataset.shuffle and train_test_split's row orders, and the rows Axolotl's
 * rl: path (merge_datasets, then create_train_validation_split) trains and evaluates on for two
 * merged files. Every value must be equal. */
#include "common/error.h"
#include "common/numpy_pcg64.h"
#include "config/train_config.h"
#include "data/dataset_merge.h"
#include "harness.h"
#include "train/data_order.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static uint64_t u64_of(const json_t *s) {
    return strtoull(json_string_value(s), NULL, 10);
}

/* Compares n size_t values with a JSON array of integers; prints the first difference. */
static int check_indices(const json_t *want, const size_t *got, size_t n, const char *what) {
    if (json_array_size(want) != n) {
        fprintf(stderr, "%s: %zu values, the reference has %zu\n", what, n, json_array_size(want));
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        if ((size_t)json_integer_value(json_array_get(want, i)) != got[i]) {
            fprintf(stderr, "%s: [%zu] is %zu, the reference's %lld\n", what, i, got[i],
                    (long long)json_integer_value(json_array_get(want, i)));
            return 1;
        }
    return 0;
}

static void check_raw(const json_t *cases) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        uint64_t seed = u64_of(json_object_get(c, "seed"));
        NumpyPcg64 g;
        numpy_pcg64_seed(&g, seed);
        const json_t *raw = json_object_get(c, "raw");
        for (size_t k = 0; k < json_array_size(raw); k++) {
            uint64_t got = numpy_pcg64_next64(&g), want = u64_of(json_array_get(raw, k));
            CHECK(got == want, "default_rng(%llu) random_raw #%zu: %llu, NumPy %llu",
                  (unsigned long long)seed, k, (unsigned long long)got, (unsigned long long)want);
        }
    }
}

static int check_permutations(const json_t *cases) {
    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(cases, i, c) {
        uint64_t seed = u64_of(json_object_get(c, "seed"));
        size_t n = (size_t)json_integer_value(json_object_get(c, "n"));
        size_t *perm = malloc((n ? n : 1) * sizeof *perm);
        numpy_permutation_seeded(seed, perm, n);
        char what[96];
        snprintf(what, sizeof what, "default_rng(%llu).permutation(%zu)", (unsigned long long)seed,
                 n);
        CHECK(check_indices(json_object_get(c, "perm"), perm, n, what) == 0, "%s", what);
        free(perm);
        n_cases++;
    }
    return n_cases;
}

static void check_intervals(const json_t *cases) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        uint64_t seed = u64_of(json_object_get(c, "seed"));
        NumpyPcg64 g;
        numpy_pcg64_seed(&g, seed);
        const json_t *max = json_object_get(c, "max"), *values = json_object_get(c, "values");
        for (size_t k = 0; k < json_array_size(max); k++) {
            uint64_t m = u64_of(json_array_get(max, k)), want = u64_of(json_array_get(values, k));
            uint64_t got = numpy_random_interval(&g, m);
            CHECK(got == want, "seed %llu: random_interval(%llu) #%zu is %llu, NumPy's %llu",
                  (unsigned long long)seed, (unsigned long long)m, k, (unsigned long long)got,
                  (unsigned long long)want);
        }
    }
}

/* A config with only what data_order reads. */
static TrainConfig order_config(int64_t seed, double val_set_size) {
    TrainConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.source = "test.yaml";
    cfg.seed = seed;
    cfg.val_set_size = val_set_size;
    cfg.shuffle_merged_datasets = true;
    return cfg;
}

/* datasets' shuffle and train_test_split(shuffle=False) as data_order makes them. */
static void check_datasets_cases(const json_t *cases) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        int64_t seed = json_integer_value(json_object_get(c, "seed"));
        size_t n = (size_t)json_integer_value(json_object_get(c, "n"));
        TrainConfig cfg = order_config(seed, 0);
        size_t *order;
        CHECK(dataset_merge_order(&cfg, &n, 1, &order) == 0 && order, "merge one dataset");
        CHECK(check_indices(json_object_get(c, "shuffle"), order, n, "Dataset.shuffle") == 0,
              "Dataset.shuffle(seed=%lld) of %zu rows", (long long)seed, n);
        free(order);
        size_t k;
        json_t *s;
        json_array_foreach(json_object_get(c, "splits"), k, s) {
            json_t *ts = json_object_get(s, "test_size");
            bool shuffle = json_is_true(json_object_get(s, "shuffle"));
            const json_t *train = json_object_get(s, "train"), *test = json_object_get(s, "test");
            size_t *perm = malloc(n * sizeof *perm), *rows = malloc(n * sizeof *rows);
            if (shuffle) {
                /* train_test_split(shuffle=True): permutation[:n_test] is the test set */
                numpy_permutation_seeded((uint64_t)seed, perm, n);
                size_t n_test = json_array_size(test);
                CHECK(check_indices(test, perm, n_test, "split test") == 0 &&
                          check_indices(train, perm + n_test, n - n_test, "split train") == 0,
                      "train_test_split(shuffle=True, seed=%lld) of %zu rows", (long long)seed, n);
            } else {
                cfg.val_set_size =
                    json_is_integer(ts) ? (double)json_integer_value(ts) : json_real_value(ts);
                size_t n_val;
                CHECK(data_order_validation_draw(n, &cfg, &order, &n_val) == 0, "%s", err_msg());
                CHECK(check_indices(test, order, n_val, "held out") == 0 &&
                          check_indices(train, order + n_val, n - n_val, "kept") == 0,
                      "val_set_size %g of %zu rows as train_test_split(shuffle=False)",
                      cfg.val_set_size, n);
                free(order);
            }
            free(perm);
            free(rows);
        }
    }
}

/* Axolotl's rl: path end to end on row indices: two files merged and shuffled, then the last
 * val_set_size of them held out. */
static void check_axolotl_rl(const json_t *c) {
    TrainConfig cfg = order_config(json_integer_value(json_object_get(c, "seed")),
                                   json_real_value(json_object_get(c, "val_set_size")));
    const json_t *files = json_object_get(c, "files");
    size_t parts[2] = {(size_t)json_integer_value(json_array_get(files, 0)),
                       (size_t)json_integer_value(json_array_get(files, 1))};
    size_t n = parts[0] + parts[1];
    size_t *merged, *split, n_val;
    CHECK(dataset_merge_order(&cfg, parts, 2, &merged) == 0, "%s", err_msg());
    CHECK(data_order_validation_draw(n, &cfg, &split, &n_val) == 0, "%s", err_msg());
    size_t *rows = malloc(n * sizeof *rows), *eval = NULL;
    for (size_t i = 0; i < n; i++)
        rows[i] = i;
    dataset_permute(rows, n, sizeof *rows, merged);
    size_t kept = n;
    data_order_move_held_out((void **)&rows, &kept, sizeof *rows, split, n_val, (void **)&eval);
    CHECK(check_indices(json_object_get(c, "train"), rows, kept, "Axolotl train") == 0,
          "Axolotl's rl: train rows");
    CHECK(check_indices(json_object_get(c, "eval"), eval, n_val, "Axolotl eval") == 0,
          "Axolotl's rl: eval rows");
    free(rows), free(eval), free(merged), free(split);
}

/* The switches: off keeps the order; before-merging shuffles each part in place first;
 * a negative seed is refused only when a shuffle is due. */
static void check_switches(void) {
    size_t parts[2] = {5, 7}, *order;
    TrainConfig cfg = order_config(3, 0);
    cfg.shuffle_merged_datasets = false;
    CHECK(dataset_merge_order(&cfg, parts, 2, &order) == 0 && order == NULL,
          "shuffle_merged_datasets: false keeps the order");
    cfg.shuffle_before_merging_datasets = true;
    CHECK(dataset_merge_order(&cfg, parts, 2, &order) == 0 && order, "before merging");
    size_t p5[5], p7[7];
    numpy_permutation_seeded(3, p5, 5);
    numpy_permutation_seeded(3, p7, 7);
    bool same = true;
    for (size_t i = 0; i < 12; i++)
        same = same && order[i] == (i < 5 ? p5[i] : 5 + p7[i - 5]);
    CHECK(same, "shuffle_before_merging_datasets shuffles each dataset with the seed");
    free(order);
    CHECK(dataset_merge_order(&cfg, parts, 1, &order) == 0 && order == NULL,
          "one dataset: shuffle_before_merging_datasets plays no part");
    cfg = order_config(-1, 0);
    CHECK(dataset_merge_order(&cfg, parts, 2, &order) != 0 && strstr(err_msg(), "'seed'"),
          "a negative seed is refused: %s", err_msg());
    cfg.shuffle_merged_datasets = false;
    CHECK(dataset_merge_order(&cfg, parts, 2, &order) == 0 && order == NULL,
          "a negative seed with no shuffle is fine");
}

int main(void) {
    json_t *root = harness_load_fixture_json("tests/fixtures/numpy_rng/numpy_rng.json");
    if (!root) return 1;
    check_raw(json_object_get(root, "raw"));
    int n_perm = check_permutations(json_object_get(root, "permutation"));
    CHECK(n_perm >= 50, "%d permutation cases", n_perm);
    check_intervals(json_object_get(root, "interval"));
    check_datasets_cases(json_object_get(root, "datasets_cases"));
    check_axolotl_rl(json_object_get(root, "axolotl_rl"));
    check_switches();
    json_decref(root);
    return harness_finish("test_numpy_rng");
}
