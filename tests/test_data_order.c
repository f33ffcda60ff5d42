/* train/data_order against the orders HF's Trainer and TRL's RepeatSampler really gave:
 * tests/fixtures/data_order/trainer_order.json (tools/reference/make_data_order_fixtures.py)
 * records the example indices a real Trainer.train() fed its model, batch by batch, for 2 epochs
 * per seed, and RepeatSampler's draws for 2 epochs. The same seeds must give the same batches:
 * epoch e's batches are consecutive batch_size slices of data_order_shuffle's order (the last
 * one short), as train_task.c takes them. */
#include "harness.h"
#include "train/data_order.h"

#include <jansson.h>
#include <stdlib.h>

/* Compares epoch e's batches (from *next on in `batches`) with `order`; advances *next. */
static int check_epoch(const json_t *batches, size_t *next, const size_t *order, size_t n,
                       size_t bs, int64_t seed, int64_t epoch) {
    int bad = 0;
    for (size_t first = 0; first < n; first += bs, (*next)++) {
        const json_t *b = json_array_get(batches, *next);
        size_t len = n - first < bs ? n - first : bs;
        if (json_array_size(b) != len) {
            fprintf(stderr, "seed %lld epoch %lld: batch %zu has %zu examples, Trainer's %zu\n",
                    (long long)seed, (long long)epoch, *next, len, json_array_size(b));
            return 1;
        }
        for (size_t k = 0; k < len; k++)
            if ((size_t)json_integer_value(json_array_get(b, k)) != order[first + k]) {
                if (!bad)
                    fprintf(stderr, "seed %lld epoch %lld: example %zu is %zu, Trainer's %lld\n",
                            (long long)seed, (long long)epoch, first + k, order[first + k],
                            (long long)json_integer_value(json_array_get(b, k)));
                bad++;
            }
    }
    return bad;
}

int main(void) {
    json_t *root = harness_load_fixture_json("tests/fixtures/data_order/trainer_order.json");
    if (!root) return 1;
    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        int64_t seed = json_integer_value(json_object_get(c, "seed"));
        size_t n = (size_t)json_integer_value(json_object_get(c, "n"));
        size_t bs = (size_t)json_integer_value(json_object_get(c, "batch_size"));
        int64_t epochs = json_integer_value(json_object_get(c, "epochs"));
        json_t *batches = json_object_get(c, "batches");
        size_t *order = malloc(n * sizeof *order), next = 0;
        for (int64_t e = 0; e < epochs; e++) {
            data_order_shuffle(order, n, seed, e);
            CHECK(check_epoch(batches, &next, order, n, bs, seed, e) == 0,
                  "seed %lld, %zu examples, batch %zu: epoch %lld as Trainer's", (long long)seed, n,
                  bs, (long long)e);
        }
        CHECK(next == json_array_size(batches), "every recorded batch compared (%zu of %zu)", next,
              json_array_size(batches));
        free(order);
        n_cases++;
    }
    CHECK(n_cases >= 4, "the Trainer cases ran (%d)", n_cases);

    /* RepeatSampler keeps the complete batch_size chunks of each epoch's permutation. */
    int n_repeat = 0;
    json_array_foreach(json_object_get(root, "repeat_sampler"), i, c) {
        int64_t seed = json_integer_value(json_object_get(c, "seed"));
        size_t n = (size_t)json_integer_value(json_object_get(c, "n"));
        size_t bs = (size_t)json_integer_value(json_object_get(c, "batch_size"));
        size_t *order = malloc(n * sizeof *order);
        size_t e;
        json_t *want;
        json_array_foreach(json_object_get(c, "epochs"), e, want) {
            data_order_shuffle_repeat_sampler(order, n, seed, (int64_t)e);
            CHECK(json_array_size(want) == n / bs * bs, "RepeatSampler keeps whole batches");
            int bad = 0;
            for (size_t k = 0; k < json_array_size(want); k++)
                bad += (size_t)json_integer_value(json_array_get(want, k)) != order[k];
            CHECK(bad == 0, "RepeatSampler seed %lld epoch %zu: %d of %zu prompts differ",
                  (long long)seed, e, bad, json_array_size(want));
        }
        free(order);
        n_repeat++;
    }
    CHECK(n_repeat >= 2, "the RepeatSampler cases ran (%d)", n_repeat);
    json_decref(root);
    return harness_finish("test_data_order");
}
