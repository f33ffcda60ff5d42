#include "rewards/reward_batch_json.h"

#include "common/error.h"

static int check_len(const json_t *arr, const char *what, int n) {
    if (!json_is_array(arr)) return err_set("reward batch: %s is not an array", what);
    if (json_array_size(arr) != (size_t)n)
        return err_set("reward batch: %s has %zu entries for %d completions", what,
                       json_array_size(arr), n);
    return 0;
}

json_t *reward_batch_to_json(const RewardBatch *b) {
    if (check_len(b->prompts, "prompts", b->n) != 0 ||
        check_len(b->completions, "completions", b->n) != 0)
        return NULL;
    if (b->n > 0 && (!b->completion_ids || !b->completion_lens)) {
        err_set("reward batch: no completion ids");
        return NULL;
    }
    json_t *obj = json_object();
    if (b->columns) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)b->columns, key, value) {
            if (check_len(value, key, b->n) != 0) {
                err_prefix("column");
                json_decref(obj);
                return NULL;
            }
            json_object_set(obj, key, value);
        }
    }
    json_t *ids = json_array();
    for (int i = 0; i < b->n; i++) {
        json_t *row = json_array();
        for (int t = 0; t < b->completion_lens[i]; t++)
            json_array_append_new(row, json_integer(b->completion_ids[i][t]));
        json_array_append_new(ids, row);
    }
    /* The fixed keys go in last, so that they win over a column of the same name. */
    json_object_set(obj, "prompts", (json_t *)b->prompts);
    json_object_set(obj, "completions", (json_t *)b->completions);
    json_object_set_new(obj, "completion_ids", ids);
    json_object_set_new(obj, "trainer_state",
                        b->trainer_state ? json_incref((json_t *)b->trainer_state) : json_object());
    return obj;
}
