/* The entries of `datasets:` and `test_datasets:` (axolotl-config.md §9.3): the keys rlhf.c
 * reads into a DatasetConfig, with the whole mapping kept as JSON for the prompt strategies. */
#include "config/train_config_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dataset-entry keys the prompt strategies read (from DatasetConfig.options). */
static const char *const strategy_dataset_keys[] = {"field_messages",
                                                    "message_property_mappings",
                                                    "roles",
                                                    "roles_to_train",
                                                    "train_on_eos",
                                                    "train_on_eot",
                                                    "drop_system_message",
                                                    "chat_template",
                                                    "field_system",
                                                    "field_tools",
                                                    "field_chosen",
                                                    "field_rejected",
                                                    "message_field_role",
                                                    "message_field_content",
                                                    "chat_template_jinja"};

static bool is_strategy_key(const char *key) {
    for (size_t i = 0; i < sizeof strategy_dataset_keys / sizeof *strategy_dataset_keys; i++)
        if (strcmp(key, strategy_dataset_keys[i]) == 0) return true;
    return false;
}

static int read_dataset(TrainConfig *cfg, YamlDoc *d, yaml_node_t *n, DatasetConfig *ds,
                        const char *list, int index) {
    ds->line = yaml_node_line(n);
    char where[4200];
    snprintf(where, sizeof where, "%s:%d: %s[%d]", d->path, ds->line, list, index);
    ds->where = xstrdup(where);
    if (n->type != YAML_MAPPING_NODE)
        return err_set("%s:%d: %s[%d]: expected a mapping with at least 'path'", d->path, ds->line,
                       list, index);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(&d->doc, p->value);
        const char *key = (const char *)k->data.scalar.value;
        int line = yaml_node_line(k);
        if (yaml_scalar_is_null(v)) continue;
        if (strcmp(key, "data_files") == 0) {
            char what[64];
            snprintf(what, sizeof what, "%s[%d].data_files", list, index);
            if (train_config_read_string_list(d, v, what, "a file name", &ds->data_files,
                                              &ds->n_data_files) != 0)
                return err_prefix("%s:%d", d->path, line);
            continue;
        }
        char **slot = strcmp(key, "path") == 0       ? &ds->path
                      : strcmp(key, "ds_type") == 0  ? &ds->ds_type
                      : strcmp(key, "split") == 0    ? &ds->split
                      : strcmp(key, "name") == 0     ? &ds->name
                      : strcmp(key, "revision") == 0 ? &ds->revision
                      : strcmp(key, "type") == 0     ? &ds->type
                                                     : NULL;
        if (!slot) {
            if (!is_strategy_key(key))
                train_config_warn(cfg, "%s:%d: %s[%d].%s is not used by rlhf.c yet; ignored",
                                  d->path, line, list, index, key);
            continue;
        }
        if (slot == &ds->type && v->type == YAML_MAPPING_NODE) {
            /* Axolotl: field names and formats given under `type:` (the mapping stays in
             * options) mean the user_defined.default strategy */
            free(ds->type);
            ds->type = xstrdup("user_defined.default");
            continue;
        }
        if (v->type != YAML_SCALAR_NODE)
            return err_set("%s:%d: %s[%d].%s: expected a string", d->path, line, list, index, key);
        free(*slot);
        *slot = xstrdup((const char *)v->data.scalar.value);
    }
    ds->options = yaml_node_to_json(d, n);
    if (!ds->options) return -1;
    if (!ds->path)
        return err_set("%s:%d: %s[%d]: missing 'path' (a local file or directory, or a Hugging "
                       "Face Hub dataset id)",
                       d->path, ds->line, list, index);
    if (!ds->split) ds->split = xstrdup("train");
    /* ds_type stays NULL when not given: the files' extension decides (data/dataset_source.h);
     * given, it names one of the builders of `datasets` that Axolotl passes it to */
    static const char *const ds_types[] = {"json", "parquet", "csv", "arrow", "text"};
    bool known = !ds->ds_type;
    for (size_t i = 0; !known && i < sizeof ds_types / sizeof *ds_types; i++)
        known = strcmp(ds->ds_type, ds_types[i]) == 0;
    if (!known)
        return err_set("%s:%d: %s[%d].ds_type: \"%s\" is not a dataset type (expected json, "
                       "parquet, csv, arrow or text)",
                       d->path, ds->line, list, index, ds->ds_type);
    return 0;
}

/* `datasets` or `test_datasets`: a list of dataset mappings. */
int train_config_read_datasets(TrainConfig *cfg, YamlDoc *d, yaml_node_t *v, const char *list) {
    bool test = strcmp(list, "test_datasets") == 0;
    DatasetConfig **out = test ? &cfg->test_datasets : &cfg->datasets;
    int *n_out = test ? &cfg->n_test_datasets : &cfg->n_datasets;
    if (v->type != YAML_SEQUENCE_NODE)
        return err_set("%s:%d: key '%s': expected a list of datasets", d->path, yaml_node_line(v),
                       list);
    train_config_free_datasets(*out,
                               *n_out); /* a second `datasets:` replaces the first, as in PyYAML */
    *out = NULL;
    *n_out = 0;
    int len = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    *out = xcalloc((size_t)(len ? len : 1), sizeof **out);
    for (int i = 0; i < len; i++) {
        *n_out = i + 1;
        yaml_node_t *item = yaml_document_get_node(&d->doc, v->data.sequence.items.start[i]);
        if (read_dataset(cfg, d, item, &(*out)[i], list, i) != 0) return -1;
    }
    return 0;
}

void train_config_free_datasets(DatasetConfig *list, int n) {
    for (int i = 0; i < n; i++) {
        DatasetConfig *ds = &list[i];
        free(ds->path);
        free(ds->where);
        free(ds->ds_type);
        free(ds->split);
        free(ds->name);
        free(ds->revision);
        free(ds->type);
        for (int f = 0; f < ds->n_data_files; f++)
            free(ds->data_files[f]);
        free(ds->data_files);
        json_decref(ds->options);
    }
    free(list);
}
