#include "train/run_record.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "dist/dist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys that say where and how often a run writes, not what it trains. */
static const char *const not_identity[] = {
    "output_dir", "resume_from_checkpoint", "overwrite_output_dir", "dataset_prepared_path",
    "logging_steps", "save_steps", "save_total_limit", "eval_steps", "max_consecutive_bad_steps",
    /* how the batch is split over ranks and micro-batches, and how the optimizer state is
     * sharded, is not what is trained: examples_per_step stands for the three */
    "micro_batch_size", "gradient_accumulation_steps", "zero_stage",
    /* where the run computes: a checkpoint written on the GPU resumes on the CPU */
    "device"};

static bool is_identity_key(const char *key) {
    for (size_t i = 0; i < sizeof not_identity / sizeof *not_identity; i++)
        if (strcmp(key, not_identity[i]) == 0) return false;
    /* only the keys rlhf.c reads: the others change nothing (no-op), are refused unless
     * neutral, or are unknown and ignored */
    for (size_t i = 0; train_config_read_key_name(i); i++)
        if (strcmp(train_config_read_key_name(i), key) == 0) return true;
    return false;
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

json_t *run_record_make(const TrainConfig *cfg) {
    json_t *config = json_object();
    const char *key;
    json_t *value;
    if (cfg->raw) json_object_foreach(cfg->raw, key, value) {
            if (!json_is_null(value) && is_identity_key(key))
                json_object_set_new(config, key, json_deep_copy(value));
        }
    /* a checkpoint of N ranks resumes on M with the same examples per optimizer step */
    json_object_set_new(
        config, "examples_per_step",
        json_integer(cfg->micro_batch_size * cfg->gradient_accumulation_steps * dist_size()));
    /* a packed row holds micro_batch_size x sequence_len tokens (sequence_len with
     * multipack_real_batches): which examples share a row (and a step) changes with it even
     * where examples_per_step does not */
    if (cfg->sample_packing)
        json_object_set_new(config, "packed_row_tokens",
                            json_integer(cfg->multipack_real_batches
                                             ? cfg->sequence_len
                                             : cfg->micro_batch_size * cfg->sequence_len));
    char *text = json_dumps(config, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17));
    char hash[17];
    snprintf(hash, sizeof hash, "%016" PRIx64, fnv1a64(text ? text : ""));
    free(text);
    json_t *record = json_object();
    json_object_set_new(record, "format", json_integer(1));
    json_object_set_new(record, "config_hash", json_string(hash));
    json_object_set_new(record, "kind", json_string(cfg->adapter ? "adapter" : "model"));
    json_object_set_new(record, "config", config);
    return record;
}

int run_record_write(const char *dir, const json_t *record) {
    char path[4200];
    if (path_join(path, sizeof path, dir, RUN_RECORD_FILE) != 0) return -1;
    char *text = json_dumps(record, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    if (!text) return err_set("%s: cannot serialise", path);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

int run_record_read(const char *dir, json_t **record) {
    *record = NULL;
    char path[4200];
    if (path_join(path, sizeof path, dir, RUN_RECORD_FILE) != 0) return -1;
    if (!file_exists(path)) return 0;
    if (json_load_path(path, record) != 0) return -1;
    if (!json_is_object(*record) || !json_is_string(json_object_get(*record, "config_hash")) ||
        !json_is_object(json_object_get(*record, "config"))) {
        json_decref(*record);
        *record = NULL;
        return err_set("%s: not a run record (config_hash and config expected)", path);
    }
    return 1;
}

bool run_record_same_run(const json_t *a, const json_t *b) {
    return json_equal(json_object_get(a, "config_hash"), json_object_get(b, "config_hash")) &&
           json_equal(json_object_get(a, "kind"), json_object_get(b, "kind"));
}

/* A value, shortened for a message. */
static void show(const json_t *v, char *out, size_t cap) {
    if (json_is_real(v)) {
        snprintf(out, cap, "%g", json_real_value(v));
        return;
    }
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(6)) : NULL;
    snprintf(out, cap, "%s", text ? text : "unset");
    if (strlen(out) > 40) strcpy(out + 37, "...");
    free(text);
}

static int diff_value(const char *path, const json_t *a, const json_t *b, char *buf, size_t cap,
                      size_t *len) {
    if (a && b && json_equal(a, b)) return 0;
    if (json_is_number(a) && json_is_number(b) && json_number_value(a) == json_number_value(b))
        return 0;
    if (json_is_object(a) && json_is_object(b)) {
        int n = 0;
        const char *k;
        json_t *v;
        char sub[512];
        json_object_foreach((json_t *)a, k, v) {
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            n += diff_value(sub, v, json_object_get(b, k), buf, cap, len);
        }
        json_object_foreach((json_t *)b, k, v) {
            if (json_object_get(a, k)) continue;
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            n += diff_value(sub, NULL, v, buf, cap, len);
        }
        return n;
    }
    if (json_is_array(a) && json_is_array(b) && json_array_size(a) == json_array_size(b) &&
        json_is_object(json_array_get(a, 0))) {
        int n = 0;
        char sub[512];
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            n += diff_value(sub, json_array_get(a, i), json_array_get(b, i), buf, cap, len);
        }
        return n;
    }
    char was[64], now[64];
    show(a, was, sizeof was);
    show(b, now, sizeof now);
    if (*len < cap)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s%s (%s -> %s)", *len ? ", " : "", path,
                                 was, now);
    return 1;
}

int run_record_diff(const json_t *was, const json_t *now, const char *const *skip, int n_skip,
                    char *buf, size_t cap) {
    const json_t *a = json_object_get(was, "config"), *b = json_object_get(now, "config");
    size_t len = 0;
    buf[0] = '\0';
    int n = 0;
    json_t *keys = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) json_object_set(keys, k, json_true());
    json_object_foreach((json_t *)b, k, v) json_object_set(keys, k, json_true());
    json_object_foreach(keys, k, v) {
        bool skipped = false;
        for (int i = 0; i < n_skip && !skipped; i++)
            skipped = strcmp(k, skip[i]) == 0;
        if (!skipped)
            n += diff_value(k, json_object_get(a, k), json_object_get(b, k), buf, cap, &len);
    }
    json_decref(keys);
    if (!json_equal(json_object_get(was, "kind"), json_object_get(now, "kind")) && len < cap)
        n++, snprintf(buf + len, cap - len, "%swhat is trained (%s -> %s)", len ? ", " : "",
                      json_string_value(json_object_get(was, "kind")),
                      json_string_value(json_object_get(now, "kind")));
    return n;
}
