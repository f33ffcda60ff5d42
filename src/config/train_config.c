#include "config/train_config.h"

#include "config/key_status.h"
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
    cfg->sample_packing_bin_size = 200;
    cfg->sample_packing_group_size = 100000;
    cfg->eval_sample_packing = true; /* what Axolotl sets when sample_packing leaves it unset */
    cfg->gradient_accumulation_steps = 1;
    cfg->num_epochs = 1.0;
    cfg->max_steps = -1;
    cfg->tokenizer_legacy = -1;
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
    cfg->shuffle_merged_datasets = true;
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

static const char *const scope_words[KEY_SCOPE_COUNT] = {
    "top-level", "trl:", "vllm:", "dataset-entry", "dataset type:"};

int train_config_check_key(TrainConfig *cfg, KeyScope scope, const char *label, const char *name,
                           const json_t *value, const json_t *doc, const char *where, bool cli) {
    const KeyStatusRow *row = key_status_find(scope, name);
    if (!row) {
        const char *near = key_status_nearest(scope, name);
        char hint[256];
        if (near)
            snprintf(hint, sizeof hint, " (did you mean %s%s%s%s?)", cli ? "--" : "'", label, near,
                     cli ? "" : "'");
        else
            snprintf(hint, sizeof hint, " (no %s key is close; `rlhf config-keys` lists them)",
                     scope_words[scope]);
        if (cli) return err_set("%s: not a configuration key%s", where, hint);
        train_config_warn(cfg, "%s: unknown key '%s%s' ignored%s", where, label, name, hint);
        return 0;
    }
    if (key_status_is_neutral(row, value, doc)) return 0;
    if (row->status == KEY_REFUSED) {
        /* the first neutral value, when there is a plain one, says what to write instead */
        char instead[96] = "";
        const char *n = row->neutral;
        if (n && *n && *n != '=' && strcmp(n, "*") != 0)
            snprintf(instead, sizeof instead, " or set it to %.*s", (int)strcspn(n, "|"), n);
        return err_set("%s: key '%s%s' is not supported: %s (remove it%s)", where, label, name,
                       row->reason, instead);
    }
    train_config_warn(cfg, "%s: key '%s%s' has no effect in rlhf.c (%s); ignored", where, label,
                      name, row->reason);
    return 0;
}

/* vllm: the settings of `rlhf vllm-serve` (cli/vllm_serve.c checks their values); rlhf train
 * reads none of them: only typos, the no-op keys and non-mappings are worth a word here. */
static int check_vllm_block(TrainConfig *cfg, YamlDoc *d, yaml_node_t *v) {
    if (v->type != YAML_MAPPING_NODE)
        return err_set("%s:%d: key 'vllm': expected a mapping (host: ..., port: ...)", d->path,
                       yaml_node_line(v));
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        yaml_node_t *val = yaml_document_get_node(&d->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return err_set("%s:%d: expected a key name", d->path, yaml_node_line(k));
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", d->path, yaml_node_line(k));
        json_t *value = yaml_node_to_json(d, val);
        if (!value) return -1;
        int rc =
            train_config_check_key(cfg, KEY_SCOPE_VLLM, "vllm.", (const char *)k->data.scalar.value,
                                   value, NULL, where, false);
        json_decref(value);
        if (rc != 0) return -1;
    }
    return 0;
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
        if (yaml_scalar_is_null(v)) continue;             /* as in Axolotl: a null key is no key */
        if (override_for(key, overrides, n_ov)) continue; /* the command line decides */
        const KeySpec *spec = train_config_find_key(key);
        if (!spec) {
            if (strcmp(key, "vllm") == 0) {
                if (check_vllm_block(cfg, d, v) != 0) return -1;
                continue;
            }
            char where[4200];
            snprintf(where, sizeof where, "%s:%d", d->path, line);
            json_t *value = yaml_node_to_json(d, v);
            if (!value) return -1;
            int rc =
                train_config_check_key(cfg, KEY_SCOPE_TOP, "", key, value, cfg->raw, where, false);
            json_decref(value);
            if (rc != 0) return -1;
            continue;
        }
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

/* The methods of a trl: row's mask, for messages ("grpo, gdpo"). */
static void method_names(unsigned mask, char *buf, size_t size) {
    buf[0] = '\0';
    for (int rl = RL_NONE; rl <= RL_GDPO; rl++)
        if (mask & (1u << rl)) {
            size_t n = strlen(buf);
            snprintf(buf + n, size - n, "%s%s", n ? ", " : "", rl_method_name((RlMethod)rl));
        }
}

/* Each key of the trl: block (file and command line) against the status table, once rl is
 * known: warnings point at the key's own line. */
static int check_trl_keys(TrainConfig *cfg, YamlDoc *d, const char *const *overrides, int n_ov) {
    if (!cfg->trl) return 0;
    yaml_node_t *root = yaml_doc_root(d);
    yaml_node_t *block = root ? yaml_map_get(d, root, "trl") : NULL;
    const char *k;
    json_t *v;
    json_object_foreach(cfg->trl, k, v) {
        if (json_is_null(v)) continue;
        char where[4200], flag[300];
        snprintf(flag, sizeof flag, "trl.%s", k);
        int line = 0;
        for (yaml_node_pair_t *p =
                 block && block->type == YAML_MAPPING_NODE ? block->data.mapping.pairs.start : NULL;
             p && p < block->data.mapping.pairs.top; p++) {
            yaml_node_t *key = yaml_document_get_node(&d->doc, p->key);
            if (key->type == YAML_SCALAR_NODE &&
                strcmp((const char *)key->data.scalar.value, k) == 0)
                line = yaml_node_line(key);
        }
        if (line > 0) {
            if (!cfg->trl_lines) cfg->trl_lines = json_object();
            json_object_set_new(cfg->trl_lines, k, json_integer(line));
        }
        if (override_for(flag, overrides, n_ov) || line == 0)
            snprintf(where, sizeof where, "command line --trl.%s", k);
        else
            snprintf(where, sizeof where, "%s:%d", d->path, line);
        const KeyStatusRow *row = key_status_find(KEY_SCOPE_TRL, k);
        if (row && row->status == KEY_USED) {
            if (cfg->rl == RL_NONE) {
                train_config_warn(cfg,
                                  "%s: key 'trl.%s' is read by the rl: methods only; ignored "
                                  "for supervised fine-tuning",
                                  where, k);
            } else if (row->methods && !(row->methods & (1u << cfg->rl))) {
                char names[128];
                method_names(row->methods, names, sizeof names);
                /* TRL's DPO and KTO trainers read it too, and it changes what they train
                 * (TR-DPO): never ignored where it is not built */
                if (strcmp(k, "sync_ref_model") == 0 && json_is_true(v))
                    return err_set("%s: key 'trl.sync_ref_model': reference syncing (TR-DPO) is "
                                   "built for rl: %s only, not rl: %s",
                                   where, names, rl_method_name(cfg->rl));
                train_config_warn(cfg,
                                  "%s: key 'trl.%s' is read by rl: %s only; ignored with rl: %s",
                                  where, k, names, rl_method_name(cfg->rl));
            }
            continue;
        }
        if (train_config_check_key(cfg, KEY_SCOPE_TRL, "trl.", k, v, cfg->trl, where, false) != 0)
            return -1;
    }
    return 0;
}

/* The keys of a loaded document, the overrides, the defaults and the checks (d is freed). */
static int load_document(TrainConfig *cfg, YamlDoc *d, const char *path,
                         const char *const *overrides, int n_overrides) {
    yaml_node_t *root = yaml_doc_root(d);
    int rc = 0;
    cfg->raw = root ? yaml_node_to_json(d, root) : json_object();
    if (!cfg->raw) rc = -1;
    if (rc == 0) rc = read_file_keys(cfg, d, overrides, n_overrides);
    if (rc == 0) rc = train_config_apply_overrides(cfg, overrides, n_overrides);
    if (rc == 0) rc = check_trl_keys(cfg, d, overrides, n_overrides);
    if (rc == 0) rc = train_config_finish_datasets(cfg);
    yaml_doc_free(d);
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
    /* --learning-rate is --learning_rate (the spelling of Axolotl's own command line) */
    char **names = xcalloc((size_t)n_overrides + 1, sizeof *names);
    const char **pairs = xcalloc(2 * (size_t)n_overrides + 1, sizeof *pairs);
    for (int i = 0; i < n_overrides; i++) {
        names[i] = xstrdup(overrides[2 * i]);
        for (char *c = names[i]; *c; c++)
            if (*c == '-') *c = '_';
        pairs[2 * i] = names[i];
        pairs[2 * i + 1] = overrides[2 * i + 1];
    }
    int rc = load_document(cfg, &d, path, pairs, n_overrides);
    for (int i = 0; i < n_overrides; i++)
        free(names[i]);
    free(names);
    free(pairs);
    return rc;
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
                        &cfg->tokenizer_type,
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
                        &cfg->cpo_loss_type,
                        &cfg->device,
                        &cfg->grpo_rng};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        free(*strings[i]);
    train_config_free_string_list(&cfg->lora_target_modules, &cfg->n_lora_target_modules);
    train_config_free_string_list(&cfg->dpo_loss_type, &cfg->n_dpo_loss_type);
    train_config_free_string_list(&cfg->dpo_loss_weights, &cfg->n_dpo_loss_weights);
    free(cfg->dpo_loss_weight_values);
    json_decref(cfg->trl);
    json_decref(cfg->trl_lines);
    for (int i = 0; i < cfg->n_warnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    memset(cfg, 0, sizeof *cfg);
}

bool optimizer_is_8bit(const char *name) {
    return strcmp(name, "adamw_bnb_8bit") == 0 || strcmp(name, "adamw_8bit") == 0 ||
           strcmp(name, "paged_adamw_8bit") == 0;
}
