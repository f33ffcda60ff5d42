#include "config/train_config.h"

#include "config/train_config_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_config_warn(TrainConfig *cfg, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cfg->warnings = xrealloc(cfg->warnings, (size_t)(cfg->n_warnings + 1) * sizeof *cfg->warnings);
    cfg->warnings[cfg->n_warnings++] = xstrdup(buf);
}

static void set_defaults(TrainConfig *cfg) {
    cfg->sequence_len = 512;
    cfg->micro_batch_size = 1;
    cfg->gradient_accumulation_steps = 1;
    cfg->num_epochs = 1.0;
    cfg->max_steps = -1;
    cfg->learning_rate = NAN; /* required: NAN until set */
    cfg->adam_beta1 = 0.9;
    cfg->adam_beta2 = 0.999;
    cfg->adam_epsilon = 1e-8;
    cfg->max_grad_norm = 1.0;
    cfg->max_consecutive_bad_steps = 5;
    cfg->warmup_steps = -1;
    cfg->warmup_ratio = -1.0;
    cfg->logging_steps = 1;
    cfg->seed = 42;
    cfg->lora_r = -1;      /* unset */
    cfg->lora_alpha = NAN; /* unset: PEFT's default, 8 */
    cfg->rl_beta = NAN;
    cfg->rpo_alpha = NAN;
    cfg->kto_desirable_weight = 1.0;
    cfg->kto_undesirable_weight = 1.0;
    cfg->orpo_alpha = NAN;
    cfg->simpo_gamma = 0.5;
    cfg->cpo_alpha = NAN;
    cfg->hub_private_repo = true;
}

static const char *override_for(const char *key, const char *const *overrides, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(overrides[2 * i], key) == 0) return overrides[2 * i + 1];
    return NULL;
}

static int read_file_keys(TrainConfig *cfg, YamlDoc *d, const char *const *overrides, int n_ov) {
    yaml_node_t *root = yaml_doc_root(d);
    if (!root) return 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(&d->doc, p->value);
        int line = yaml_node_line(k);
        if (k->type != YAML_SCALAR_NODE)
            return err_set("%s:%d: expected a key name", d->path, line);
        const char *key = (const char *)k->data.scalar.value;
        if (yaml_scalar_is_null(v)) continue; /* as in Axolotl: a null key is no key */
        const KeySpec *spec = train_config_find_key(key);
        if (!spec) {
            if (train_config_key_is_documented(key))
                train_config_warn(cfg, "%s:%d: key '%s' is not used by rlhf.c yet; ignored",
                                  d->path, line, key);
            else
                train_config_warn(cfg, "%s:%d: unknown key '%s' ignored (did you mean '%s'?)",
                                  d->path, line, key, train_config_nearest_key(key));
            continue;
        }
        if (override_for(key, overrides, n_ov)) continue;
        if (spec->kind == K_DATASETS) {
            if (train_config_read_datasets(cfg, d, v, key) != 0) return -1;
            continue;
        }
        if (spec->kind == K_TRL) {
            if (v->type != YAML_MAPPING_NODE)
                return err_set("%s:%d: key 'trl': expected a mapping (beta: 0.1, ...)", d->path,
                               line);
            json_decref(cfg->trl);
            cfg->trl = yaml_node_to_json(d, v);
            if (!cfg->trl) return -1;
            cfg->trl_line = line;
            continue;
        }
        if (strcmp(key, "dpo_beta") == 0)
            train_config_warn(cfg, "%s:%d: dpo_beta is deprecated, use rl_beta instead", d->path,
                              line);
        if (spec->kind == K_STRING_LIST && v->type == YAML_SEQUENCE_NODE) {
            if (train_config_set_key_list(cfg, spec, d, v, line) != 0) return -1;
            continue;
        }
        if (v->type != YAML_SCALAR_NODE)
            return err_set("%s:%d: key '%s': expected a single value, not a %s", d->path, line, key,
                           v->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        bool quoted = v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        if (train_config_set_key(cfg, spec, (const char *)v->data.scalar.value, quoted) != 0)
            return err_prefix("%s:%d", d->path, line);
    }
    return 0;
}

static int apply_overrides(TrainConfig *cfg, const char *const *overrides, int n_ov) {
    for (int i = 0; i < n_ov; i++) {
        const char *key = overrides[2 * i], *value = overrides[2 * i + 1];
        const KeySpec *spec = train_config_find_key(key);
        if (!spec)
            return err_set(
                "command line: --%s is not a configuration key rlhf.c uses (did you mean "
                "--%s?)",
                key, train_config_nearest_key(key));
        if (train_config_set_key(cfg, spec, value, false) != 0)
            return err_prefix("command line --%s", key);
    }
    return 0;
}

/* The keys of a loaded document, the overrides, the defaults and the checks (d is freed). */
static int load_document(TrainConfig *cfg, YamlDoc *d, const char *path,
                         const char *const *overrides, int n_overrides) {
    int rc = read_file_keys(cfg, d, overrides, n_overrides);
    yaml_node_t *root = yaml_doc_root(d);
    if (rc == 0 && root) cfg->raw = yaml_node_to_json(d, root);
    if (rc == 0 && root && !cfg->raw) rc = -1;
    yaml_doc_free(d);
    if (rc == 0) rc = apply_overrides(cfg, overrides, n_overrides);
    /* messages that already start with the file name (file:line: ...) are not prefixed again */
    if (rc == 0 && train_config_validate(cfg) != 0)
        rc = strncmp(err_msg(), path, strlen(path)) == 0 ? -1 : err_prefix("%s", path);
    if (rc != 0) train_config_free(cfg);
    return rc;
}

int train_config_load(TrainConfig *cfg, const char *path, const char *const *overrides,
                      int n_overrides) {
    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    cfg->source = xstrdup(path);
    YamlDoc d;
    if (yaml_doc_load(&d, path) != 0) {
        train_config_free(cfg);
        return -1;
    }
    return load_document(cfg, &d, path, overrides, n_overrides);
}

int train_config_load_text(TrainConfig *cfg, const char *text, const char *name) {
    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    cfg->source = xstrdup(name);
    YamlDoc d;
    if (yaml_doc_load_text(&d, text, strlen(text), name) != 0) {
        train_config_free(cfg);
        return -1;
    }
    return load_document(cfg, &d, name, NULL, 0);
}

void train_config_free(TrainConfig *cfg) {
    train_config_free_datasets(cfg->datasets, cfg->n_datasets);
    train_config_free_datasets(cfg->test_datasets, cfg->n_test_datasets);
    grpo_config_free(&cfg->grpo);
    tracking_config_free(&cfg->tracking);
    json_decref(cfg->raw);
    char **strings[] = {&cfg->source,
                        &cfg->base_model,
                        &cfg->base_model_config,
                        &cfg->base_model_id,
                        &cfg->revision_of_model,
                        &cfg->hub_model_id,
                        &cfg->hub_strategy,
                        &cfg->hub_revision,
                        &cfg->hub_token,
                        &cfg->tokenizer_config,
                        &cfg->optimizer,
                        &cfg->lr_scheduler,
                        &cfg->output_dir,
                        &cfg->resume_from_checkpoint,
                        &cfg->chat_template,
                        &cfg->chat_template_jinja,
                        &cfg->dataset_prepared_path,
                        &cfg->adapter,
                        &cfg->lora_model_dir,
                        &cfg->excess_length_strategy,
                        &cfg->cpo_loss_type};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        free(*strings[i]);
    train_config_free_string_list(&cfg->lora_target_modules, &cfg->n_lora_target_modules);
    train_config_free_string_list(&cfg->dpo_loss_type, &cfg->n_dpo_loss_type);
    train_config_free_string_list(&cfg->dpo_loss_weights, &cfg->n_dpo_loss_weights);
    free(cfg->dpo_loss_weight_values);
    json_decref(cfg->trl);
    for (int i = 0; i < cfg->n_warnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    memset(cfg, 0, sizeof *cfg);
}

bool optimizer_is_8bit(const char *name) {
    return strcmp(name, "adamw_bnb_8bit") == 0 || strcmp(name, "adamw_8bit") == 0 ||
           strcmp(name, "paged_adamw_8bit") == 0;
}
