/* Command-line overrides of the training configuration: `--key value` for a top-level key,
 * `--trl.key value`, `--vllm.key value`, `--datasets.N.key value` and `--test_datasets.N.key
 * value` for nested ones (Axolotl's CLI nests one level: trl. and vllm.; the dataset form is
 * rlhf.c's). Values are read as a YAML plain scalar (true, 3, 0.1, text). Every override is
 * also written into cfg->raw, the config as Python code and the run record see it. An unknown
 * key here is an error (a typo on the command line is never meant), with the nearest key of
 * the same scope. */
#include "config/key_status.h"
#include "config/train_config_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* raw[parent][index][key] = value (parent NULL: raw[key]; index < 0: raw[parent][key]),
 * creating the parent mapping when missing. Steals value. */
static void set_raw(TrainConfig *cfg, const char *parent, long index, const char *key,
                    json_t *value) {
    json_t *at = cfg->raw;
    if (parent) {
        json_t *p = json_object_get(at, parent);
        if (index >= 0) {
            p = json_array_get(p, (size_t)index);
        } else if (!json_is_object(p)) {
            p = json_object();
            json_object_set_new(at, parent, p);
        }
        at = p;
    }
    if (json_is_object(at))
        json_object_set_new(at, key, value);
    else
        json_decref(value);
}

static int override_top(TrainConfig *cfg, const char *key, const char *text) {
    char where[400];
    snprintf(where, sizeof where, "command line --%s", key);
    const KeySpec *spec = train_config_find_key(key);
    if (spec && (spec->kind == K_DATASETS || spec->kind == K_TRL))
        return err_set("%s: '%s' is a list or mapping; override one of its keys instead "
                       "(--%s)",
                       where, key,
                       spec->kind == K_TRL ? "trl.beta 0.2" : "datasets.0.path data.jsonl");
    json_t *value = yaml_text_to_json(text);
    if (!spec) {
        int rc = train_config_check_key(cfg, KEY_SCOPE_TOP, "", key, value, cfg->raw, where, true);
        if (rc != 0) {
            json_decref(value);
            /* a key Axolotl documents but rlhf.c does not read: say so the same way */
            return rc;
        }
        set_raw(cfg, NULL, -1, key, value);
        return 0;
    }
    if (train_config_set_key(cfg, spec, text, false) != 0) {
        json_decref(value);
        return err_prefix("%s", where);
    }
    set_raw(cfg, NULL, -1, key, value);
    return 0;
}

static int override_trl(TrainConfig *cfg, const char *key, const char *text) {
    char where[400];
    snprintf(where, sizeof where, "command line --trl.%s", key);
    if (!key_status_find(KEY_SCOPE_TRL, key))
        return train_config_check_key(cfg, KEY_SCOPE_TRL, "trl.", key, NULL, NULL, where, true);
    if (!cfg->trl) cfg->trl = json_object();
    json_object_set_new(cfg->trl, key, yaml_text_to_json(text));
    set_raw(cfg, "trl", -1, key, yaml_text_to_json(text));
    return 0; /* its status is checked with the file's trl: keys, once rl is known */
}

static int override_vllm(TrainConfig *cfg, const char *key, const char *text) {
    char where[400];
    snprintf(where, sizeof where, "command line --vllm.%s", key);
    json_t *value = yaml_text_to_json(text);
    int rc = train_config_check_key(cfg, KEY_SCOPE_VLLM, "vllm.", key, value, NULL, where, true);
    if (rc == 0)
        set_raw(cfg, "vllm", -1, key, value);
    else
        json_decref(value);
    return rc;
}

/* --datasets.N.key / --test_datasets.N.key: rest is "N.key". */
static int override_dataset(TrainConfig *cfg, const char *list, const char *rest,
                            const char *text) {
    bool test = strcmp(list, "test_datasets") == 0;
    DatasetConfig *entries = test ? cfg->test_datasets : cfg->datasets;
    int n = test ? cfg->n_test_datasets : cfg->n_datasets;
    char *end;
    errno = 0;
    long index = strtol(rest, &end, 10);
    if (end == rest || *end != '.' || errno || index < 0)
        return err_set("command line --%s.%s: expected --%s.N.KEY (N: the entry's position, from "
                       "0)",
                       list, rest, list);
    const char *key = end + 1;
    char where[400], label[64];
    snprintf(where, sizeof where, "command line --%s.%s", list, rest);
    snprintf(label, sizeof label, "%s.%ld.", list, index);
    if (index >= n)
        return err_set("%s: %s has %d entr%s; there is no %s[%ld]", where, list, n,
                       n == 1 ? "y" : "ies", list, index);
    const KeyStatusRow *row = key_status_find(KEY_SCOPE_DATASET, key);
    json_t *value = yaml_text_to_json(text);
    if (!row || row->status != KEY_USED) {
        int rc =
            train_config_check_key(cfg, KEY_SCOPE_DATASET, label, key, value, NULL, where, true);
        json_decref(value);
        return rc;
    }
    if (train_config_set_dataset_key(&entries[index], key, text) != 0) {
        json_decref(value);
        return err_prefix("%s", where);
    }
    set_raw(cfg, list, index, key, value);
    return 0;
}

int train_config_apply_overrides(TrainConfig *cfg, const char *const *overrides, int n) {
    for (int i = 0; i < n; i++) {
        const char *key = overrides[2 * i], *text = overrides[2 * i + 1];
        const char *dot = strchr(key, '.');
        if (!dot) {
            if (override_top(cfg, key, text) != 0) return -1;
            continue;
        }
        size_t plen = (size_t)(dot - key);
        int rc;
        if (plen == 3 && strncmp(key, "trl", 3) == 0 && !strchr(dot + 1, '.'))
            rc = override_trl(cfg, dot + 1, text);
        else if (plen == 4 && strncmp(key, "vllm", 4) == 0 && !strchr(dot + 1, '.'))
            rc = override_vllm(cfg, dot + 1, text);
        else if (plen == 8 && strncmp(key, "datasets", 8) == 0)
            rc = override_dataset(cfg, "datasets", dot + 1, text);
        else if (plen == 13 && strncmp(key, "test_datasets", 13) == 0)
            rc = override_dataset(cfg, "test_datasets", dot + 1, text);
        else
            rc = err_set("command line --%s: nested keys are --trl.KEY, --vllm.KEY, "
                         "--datasets.N.KEY and --test_datasets.N.KEY",
                         key);
        if (rc != 0) return -1;
    }
    return 0;
}
