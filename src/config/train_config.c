#include "config/train_config.h"

#include "common/error.h"
#include "config/yaml_doc.h"
#include "dist/dist_launch.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    K_STRING,
    K_INT,
    K_FLOAT, /* a number, or a numeric string ("2e-5", as PyYAML leaves it) */
    K_BOOL,
    K_BF16,         /* true/false/"auto"/"full": the CPU computes in fp32 either way */
    K_PATH_OR_BOOL, /* resume_from_checkpoint: true (latest), false, or a path */
    K_RL,
    K_DATASETS,
    K_STRING_LIST, /* one string or a list of them (on the command line: comma-separated) */
    K_TRL,         /* the trl: mapping, kept as JSON */
} KeyKind;

typedef struct {
    const char *name;
    KeyKind kind;
    size_t offset;
} KeySpec;

#define KEY(name, kind)                                                                            \
    { #name, kind, offsetof(TrainConfig, name) }
static const KeySpec key_specs[] = {
    KEY(base_model, K_STRING),
    KEY(tokenizer_config, K_STRING),
    KEY(rl, K_RL),
    KEY(datasets, K_DATASETS),
    KEY(test_datasets, K_DATASETS),
    KEY(val_set_size, K_FLOAT),
    KEY(sequence_len, K_INT),
    KEY(micro_batch_size, K_INT),
    KEY(gradient_accumulation_steps, K_INT),
    KEY(num_epochs, K_FLOAT),
    KEY(max_steps, K_INT),
    KEY(learning_rate, K_FLOAT),
    KEY(optimizer, K_STRING),
    KEY(adam_beta1, K_FLOAT),
    KEY(adam_beta2, K_FLOAT),
    KEY(adam_epsilon, K_FLOAT),
    KEY(weight_decay, K_FLOAT),
    KEY(max_grad_norm, K_FLOAT),
    KEY(max_consecutive_bad_steps, K_INT),
    KEY(zero_stage, K_INT),
    KEY(lr_scheduler, K_STRING),
    KEY(warmup_steps, K_INT),
    KEY(warmup_ratio, K_FLOAT),
    KEY(output_dir, K_STRING),
    KEY(save_steps, K_INT),
    KEY(save_total_limit, K_INT),
    KEY(logging_steps, K_INT),
    KEY(eval_steps, K_INT),
    KEY(resume_from_checkpoint, K_PATH_OR_BOOL),
    KEY(seed, K_INT),
    KEY(bf16, K_BF16),
    KEY(gradient_checkpointing, K_BOOL),
    KEY(chat_template, K_STRING),
    KEY(chat_template_jinja, K_STRING),
    KEY(dataset_prepared_path, K_STRING),
    KEY(adapter, K_STRING),
    KEY(lora_r, K_INT),
    KEY(lora_alpha, K_FLOAT),
    KEY(lora_dropout, K_FLOAT),
    KEY(lora_target_modules, K_STRING_LIST),
    KEY(lora_target_linear, K_BOOL),
    KEY(peft_use_rslora, K_BOOL),
    {"use_rslora", K_BOOL, offsetof(TrainConfig, peft_use_rslora)},
    KEY(lora_model_dir, K_STRING),
    KEY(rl_beta, K_FLOAT),
    {"dpo_beta", K_FLOAT, offsetof(TrainConfig, rl_beta)}, /* deprecated alias */
    KEY(trl, K_TRL),
    KEY(dpo_loss_type, K_STRING_LIST),
    KEY(dpo_loss_weights, K_STRING_LIST),
    KEY(dpo_label_smoothing, K_FLOAT),
    KEY(dpo_legacy_compat, K_BOOL),
    KEY(rpo_alpha, K_FLOAT),
    KEY(precompute_ref_log_probs, K_BOOL),
    KEY(rl_adapter_ref_model, K_BOOL),
    KEY(kto_desirable_weight, K_FLOAT),
    KEY(kto_undesirable_weight, K_FLOAT),
    KEY(orpo_alpha, K_FLOAT),
    KEY(simpo_gamma, K_FLOAT),
    KEY(cpo_alpha, K_FLOAT),
    KEY(cpo_loss_type, K_STRING),
    KEY(max_prompt_len, K_INT),
    KEY(excess_length_strategy, K_STRING),
};
#undef KEY
#define N_KEY_SPECS (sizeof key_specs / sizeof *key_specs)

/* Keys Axolotl documents (axolotl-config.md §8-§9) that rlhf.c reads nowhere yet. Setting one
 * gives a warning rather than silence. */
static const char *const documented_keys[] = {
    "added_tokens_overrides",
    "attn_implementation",
    "auto_resume_from_checkpoints",
    "base_model_config",
    "batch_size",
    "bfloat16",
    "chat_template_kwargs",
    "cosine_constant_lr_ratio",
    "cosine_min_lr_ratio",
    "deepspeed",
    "default_system_message",
    "device",
    "dpo_loss_weights",
    "dpo_norm_loss",
    "dpo_padding_free",
    "dpo_use_weighting",
    "dtype",
    "early_stopping_patience",
    "eot_tokens",
    "eval_batch_size",
    "eval_strategy",
    "evals_per_epoch",
    "float16",
    "float32",
    "fp16",
    "fsdp_config",
    "fsdp_version",
    "gpu_memory_limit",
    "gradient_checkpointing_kwargs",
    "hub_model_id",
    "load_best_model_at_end",
    "load_in_4bit",
    "load_in_8bit",
    "logging_first_step",
    "lora_fan_in_fan_out",
    "lora_modules_to_save",
    "lr_scheduler_kwargs",
    "max_memory",
    "metric_for_best_model",
    "model_revision",
    "model_type",
    "optim_args",
    "peft_use_dora",
    "remove_unused_columns",
    "rpo_alpha",
    "sample_packing",
    "save_first_step",
    "save_only_model",
    "save_strategy",
    "saves_per_epoch",
    "special_tokens",
    "strict",
    "test_datasets",
    "tf32",
    "tokenizer_legacy",
    "tokenizer_save_jinja_files",
    "tokenizer_type",
    "tokenizer_use_fast",
    "tokens",
    "trust_remote_code",
    "type_of_model",
    "use_tensorboard",
    "use_wandb",
    "wandb_entity",
    "wandb_name",
    "wandb_project",
    "wandb_log_model",
    "wandb_watch",
    "flash_attention",
    "shuffle_merged_datasets",
    "train_on_inputs",
    "group_by_length",
};
#define N_DOCUMENTED (sizeof documented_keys / sizeof *documented_keys)

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

static const struct {
    const char *name;
    RlMethod rl;
} rl_names[] = {{"dpo", RL_DPO},     {"ipo", RL_IPO}, {"kto", RL_KTO},   {"orpo", RL_ORPO},
                {"simpo", RL_SIMPO}, {"cpo", RL_CPO}, {"grpo", RL_GRPO}, {"gdpo", RL_GDPO}};

const char *rl_method_name(RlMethod rl) {
    for (size_t i = 0; i < sizeof rl_names / sizeof *rl_names; i++)
        if (rl_names[i].rl == rl) return rl_names[i].name;
    return "none (supervised fine-tuning)";
}

static void add_warning(TrainConfig *cfg, const char *fmt, ...) RLHF_PRINTF(2, 3);
static void add_warning(TrainConfig *cfg, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cfg->warnings = xrealloc(cfg->warnings, (size_t)(cfg->n_warnings + 1) * sizeof *cfg->warnings);
    cfg->warnings[cfg->n_warnings++] = xstrdup(buf);
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = xmalloc((lb + 1) * sizeof *row);
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

/* The known key closest to `name` (used and documented ones alike). */
static const char *nearest_key(const char *name) {
    const char *best = key_specs[0].name;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < N_KEY_SPECS + N_DOCUMENTED; i++) {
        const char *k = i < N_KEY_SPECS ? key_specs[i].name : documented_keys[i - N_KEY_SPECS];
        size_t d = edit_distance(name, k);
        if (d < best_d) best_d = d, best = k;
    }
    return best;
}

static const KeySpec *find_spec(const char *name) {
    for (size_t i = 0; i < N_KEY_SPECS; i++)
        if (strcmp(key_specs[i].name, name) == 0) return &key_specs[i];
    return NULL;
}

static bool is_documented(const char *name) {
    for (size_t i = 0; i < N_DOCUMENTED; i++)
        if (strcmp(documented_keys[i], name) == 0) return true;
    return false;
}

static void free_string_list(char ***list, int *n) {
    for (int i = 0; i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
}

static char *copy_span(const char *start, size_t len) {
    char *s = xmalloc(len + 1);
    memcpy(s, start, len);
    s[len] = '\0';
    return s;
}

/* The count of a K_STRING_LIST field sits right after its pointer. */
_Static_assert(offsetof(TrainConfig, n_lora_target_modules) ==
                   offsetof(TrainConfig, lora_target_modules) + sizeof(char **),
               "a string list's count follows its pointer");
_Static_assert(offsetof(TrainConfig, n_dpo_loss_type) ==
                   offsetof(TrainConfig, dpo_loss_type) + sizeof(char **),
               "a string list's count follows its pointer");
_Static_assert(offsetof(TrainConfig, n_dpo_loss_weights) ==
                   offsetof(TrainConfig, dpo_loss_weights) + sizeof(char **),
               "a string list's count follows its pointer");
static int *string_list_count(TrainConfig *cfg, const KeySpec *spec) {
    return (int *)((char *)cfg + spec->offset + sizeof(char **));
}

/* A comma-separated list (a single YAML string, or a command-line value). */
static int set_string_list(TrainConfig *cfg, const KeySpec *spec, const char *text) {
    char ***list = (char ***)((char *)cfg + spec->offset);
    int *n = string_list_count(cfg, spec);
    free_string_list(list, n);
    if (strpbrk(text, "^$*+?()[]{}|\\"))
        return err_set("key '%s': \"%s\" looks like a regular expression, which rlhf.c does not "
                       "match; give module names (a list, or separated by commas)",
                       spec->name, text);
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *start = p;
        while (len && (*start == ' '))
            start++, len--;
        while (len && start[len - 1] == ' ')
            len--;
        if (len == 0)
            return err_set("key '%s': expected names separated by commas, got \"%s\"", spec->name,
                           text);
        *list = xrealloc(*list, (size_t)(*n + 1) * sizeof **list);
        (*list)[(*n)++] = copy_span(start, len);
        p += strcspn(p, ",");
        if (*p == ',') p++;
    }
    if (*n == 0) return err_set("key '%s': expected at least one name", spec->name);
    return 0;
}

/* Sets a scalar-kind field from text; `quoted` says the YAML scalar was quoted (a string). */
static int set_from_text(TrainConfig *cfg, const KeySpec *spec, const char *text, bool quoted) {
    void *field = (char *)cfg + spec->offset;
    switch (spec->kind) {
    case K_STRING:
        free(*(char **)field);
        *(char **)field = xstrdup(text);
        return 0;
    case K_INT: {
        int64_t v;
        if (quoted || yaml_text_to_int(text, &v) != 0)
            return err_set("key '%s': expected an integer, got \"%s\"", spec->name, text);
        *(int64_t *)field = v;
        return 0;
    }
    case K_FLOAT: {
        double v;
        if (yaml_text_to_double(text, &v) != 0)
            return err_set("key '%s': expected a number, got \"%s\"", spec->name, text);
        *(double *)field = v;
        return 0;
    }
    case K_BOOL: {
        bool v;
        if (quoted || yaml_text_to_bool(text, &v) != 0)
            return err_set("key '%s': expected true or false, got \"%s\"", spec->name, text);
        *(bool *)field = v;
        return 0;
    }
    case K_BF16: {
        bool v;
        if (!quoted && yaml_text_to_bool(text, &v) == 0) {
            cfg->bf16 = v;
        } else if (strcmp(text, "auto") == 0 || strcmp(text, "full") == 0) {
            cfg->bf16 = strcmp(text, "full") == 0;
        } else {
            return err_set("key 'bf16': expected true, false, auto or full, got \"%s\"", text);
        }
        return 0;
    }
    case K_PATH_OR_BOOL: {
        bool v;
        free(cfg->resume_from_checkpoint);
        cfg->resume_from_checkpoint = NULL;
        if (!quoted && yaml_text_to_bool(text, &v) == 0) {
            if (v) cfg->resume_from_checkpoint = xstrdup("true");
        } else {
            cfg->resume_from_checkpoint = xstrdup(text);
        }
        return 0;
    }
    case K_RL: {
        bool v;
        if (!quoted && yaml_text_to_bool(text, &v) == 0 && !v) {
            cfg->rl = RL_NONE;
            return 0;
        }
        for (size_t i = 0; i < sizeof rl_names / sizeof *rl_names; i++) {
            if (strcmp(text, rl_names[i].name) == 0) {
                cfg->rl = rl_names[i].rl;
                return 0;
            }
        }
        return err_set("key 'rl': unknown method \"%s\" (expected dpo, ipo, kto, orpo, simpo, cpo, "
                       "grpo or gdpo; leave it out for supervised fine-tuning)",
                       text);
    }
    case K_DATASETS:
        return err_set("key 'datasets' cannot be given on the command line");
    case K_STRING_LIST:
        return set_string_list(cfg, spec, text);
    case K_TRL:
        return err_set("key 'trl' is a mapping: set it in the config file");
    }
    return -1;
}

/* A scalar or a list of scalars; `kind` says what each should be, for messages. */
static int read_string_list(YamlDoc *d, yaml_node_t *n, const char *what, const char *kind,
                            char ***out, int *count) {
    /* A key given twice keeps the last value, as PyYAML does: drop the earlier list. */
    for (int i = 0; i < *count; i++)
        free((*out)[i]);
    free(*out);
    *out = NULL;
    *count = 0;
    if (n->type == YAML_SCALAR_NODE) {
        *out = xmalloc(sizeof **out);
        (*out)[0] = xstrdup((const char *)n->data.scalar.value);
        *count = 1;
        return 0;
    }
    if (n->type != YAML_SEQUENCE_NODE)
        return err_set("%s: expected %s or a list of them", what, kind);
    int len = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    *out = xcalloc((size_t)len, sizeof **out);
    for (int i = 0; i < len; i++) {
        yaml_node_t *item = yaml_document_get_node(&d->doc, n->data.sequence.items.start[i]);
        if (!item || item->type != YAML_SCALAR_NODE) {
            *count = i;
            return err_set("%s[%d]: expected %s", what, i, kind);
        }
        (*out)[i] = xstrdup((const char *)item->data.scalar.value);
    }
    *count = len;
    return 0;
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
            if (read_string_list(d, v, what, "a file name", &ds->data_files, &ds->n_data_files) !=
                0)
                return err_prefix("%s:%d", d->path, line);
            continue;
        }
        char **slot = strcmp(key, "path") == 0      ? &ds->path
                      : strcmp(key, "ds_type") == 0 ? &ds->ds_type
                      : strcmp(key, "split") == 0   ? &ds->split
                      : strcmp(key, "type") == 0    ? &ds->type
                                                    : NULL;
        if (!slot) {
            if (!is_strategy_key(key))
                add_warning(cfg, "%s:%d: %s[%d].%s is not used by rlhf.c yet; ignored", d->path,
                            line, list, index, key);
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
        return err_set("%s:%d: %s[%d]: missing 'path' (a local JSON/JSONL file or directory)",
                       d->path, ds->line, list, index);
    if (!ds->ds_type) ds->ds_type = xstrdup("json");
    if (!ds->split) ds->split = xstrdup("train");
    if (strcmp(ds->ds_type, "json") != 0)
        return err_set("%s:%d: %s[%d].ds_type: \"%s\" is not supported (only local json/jsonl)",
                       d->path, ds->line, list, index, ds->ds_type);
    return 0;
}

static void free_datasets(DatasetConfig *list, int n);

/* `datasets` or `test_datasets`: a list of dataset mappings. */
static int read_datasets(TrainConfig *cfg, YamlDoc *d, yaml_node_t *v, const char *list) {
    bool test = strcmp(list, "test_datasets") == 0;
    DatasetConfig **out = test ? &cfg->test_datasets : &cfg->datasets;
    int *n_out = test ? &cfg->n_test_datasets : &cfg->n_datasets;
    if (v->type != YAML_SEQUENCE_NODE)
        return err_set("%s:%d: key '%s': expected a list of datasets", d->path, yaml_node_line(v),
                       list);
    free_datasets(*out, *n_out); /* a second `datasets:` replaces the first, as in PyYAML */
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
}

static int require_positive(const char *key, double v) {
    if (v <= 0) return err_set("key '%s': must be positive, got %g", key, v);
    return 0;
}

/* adapter and the lora_* keys (axolotl-config.md §9.6). */
static int validate_adapter(TrainConfig *cfg) {
    bool lora_keys = cfg->lora_r != -1 || !isnan(cfg->lora_alpha) || cfg->lora_dropout != 0 ||
                     cfg->n_lora_target_modules || cfg->lora_target_linear ||
                     cfg->peft_use_rslora || cfg->lora_model_dir;
    if (!cfg->adapter) {
        if (lora_keys)
            add_warning(cfg,
                        "%s: lora_* keys are set but 'adapter' is not: they are ignored and "
                        "every weight is trained (set adapter: lora to train an adapter)",
                        cfg->source);
        return 0;
    }
    if (strcmp(cfg->adapter, "qlora") == 0)
        return err_set("key 'adapter': qlora needs 4-bit quantised base weights, which rlhf.c "
                       "does not have; use adapter: lora");
    if (strcmp(cfg->adapter, "lora") != 0)
        return err_set("key 'adapter': \"%s\" is not supported (lora)", cfg->adapter);
    if (!cfg->lora_model_dir && cfg->lora_r == -1)
        return err_set("key 'lora_r': missing (the adapter's rank, required with adapter: lora)");
    if (cfg->lora_r != -1 && cfg->lora_r <= 0)
        return err_set("key 'lora_r': must be positive, got %lld", (long long)cfg->lora_r);
    if (cfg->lora_r > 65536)
        return err_set("key 'lora_r': %lld is too large", (long long)cfg->lora_r);
    if (isnan(cfg->lora_alpha)) cfg->lora_alpha = 8;
    if (cfg->lora_dropout < 0 || cfg->lora_dropout >= 1)
        return err_set("key 'lora_dropout': must be in [0, 1), got %g", cfg->lora_dropout);
    if (cfg->n_lora_target_modules == 0 && !cfg->lora_target_linear) {
        static const char *const peft_default[] = {"q_proj", "v_proj"};
        cfg->lora_target_modules = xcalloc(2, sizeof *cfg->lora_target_modules);
        for (int i = 0; i < 2; i++)
            cfg->lora_target_modules[i] = xstrdup(peft_default[i]);
        cfg->n_lora_target_modules = 2;
    }
    return 0;
}

/* trl.beta, when the trl: block gives one. Returns 1 when set, 0 when not, -1 on a bad value. */
static int trl_beta(const TrainConfig *cfg, double *beta) {
    const json_t *v = cfg->trl ? json_object_get(cfg->trl, "beta") : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return err_set("%s:%d: key 'trl.beta': expected a number", cfg->source, cfg->trl_line);
    *beta = json_number_value(v);
    return 1;
}

/* The keys of the preference methods (axolotl-config.md §8.1, §8.2). */
static void warn_from_grpo(void *ctx, const char *message) {
    add_warning(ctx, "%s", message);
}

/* rl: grpo / gdpo: beta defaults to 0 (TRL's GRPOConfig), and the trl: block is GRPOConfig. */
static int validate_grpo(TrainConfig *cfg, double beta) {
    /* generation batches span the ranks, so the geometry is checked for the job's rank count
     * (in the --nproc launcher, the count it is about to start) */
    GrpoBatchShape shape = {(int)cfg->micro_batch_size, (int)cfg->gradient_accumulation_steps,
                            cfg->val_set_size > 0 || cfg->n_test_datasets > 0, dist_planned_size()};
    if (grpo_config_read(&cfg->grpo, cfg->trl, cfg->rl == RL_GDPO, beta, &shape, cfg->source,
                         cfg->trl_line, warn_from_grpo, cfg) != 0)
        return -1;
    cfg->beta = cfg->grpo.beta;
    return 0;
}

static int validate_preference(TrainConfig *cfg) {
    double b = 0;
    int has_trl_beta = trl_beta(cfg, &b);
    if (has_trl_beta < 0) return -1;
    if (cfg->rl == RL_GRPO || cfg->rl == RL_GDPO) {
        if (cfg->n_dpo_loss_type || cfg->n_dpo_loss_weights)
            return err_set("`dpo_loss_type` and `dpo_loss_weights` are for DPO only, but got rl=%s",
                           rl_method_name(cfg->rl));
        return validate_grpo(cfg, has_trl_beta ? b : cfg->rl_beta);
    }
    cfg->beta = has_trl_beta              ? b
                : !isnan(cfg->rl_beta)    ? cfg->rl_beta
                : !isnan(cfg->orpo_alpha) ? cfg->orpo_alpha
                                          : 0.1;
    if (cfg->trl) {
        const char *k;
        json_t *v;
        json_object_foreach(cfg->trl, k, v) {
            /* trl.loss_type is KTOConfig.loss_type for rl: kto (train/kto_method.c) */
            bool used =
                strcmp(k, "beta") == 0 || (cfg->rl == RL_KTO && strcmp(k, "loss_type") == 0);
            if (!used && !json_is_null(v))
                add_warning(cfg, "%s:%d: key 'trl.%s' is not used by rlhf.c yet; ignored",
                            cfg->source, cfg->trl_line, k);
        }
    }
    bool dpo = cfg->rl == RL_DPO || cfg->rl == RL_IPO;
    if ((cfg->n_dpo_loss_type || cfg->n_dpo_loss_weights) && !dpo)
        return err_set("`dpo_loss_type` and `dpo_loss_weights` are for DPO only, but got rl=%s",
                       rl_method_name(cfg->rl));
    if (cfg->n_dpo_loss_weights && !cfg->n_dpo_loss_type)
        return err_set("`dpo_loss_weights` requires `dpo_loss_type` to be set");
    if (cfg->n_dpo_loss_weights && cfg->n_dpo_loss_weights != cfg->n_dpo_loss_type)
        return err_set("`dpo_loss_type` and `dpo_loss_weights` must be the same length, but got "
                       "%d losses and %d weights",
                       cfg->n_dpo_loss_type, cfg->n_dpo_loss_weights);
    if (dpo && !cfg->n_dpo_loss_type) {
        cfg->dpo_loss_type = xcalloc(1, sizeof *cfg->dpo_loss_type);
        cfg->dpo_loss_type[0] = xstrdup(cfg->rl == RL_IPO ? "ipo" : "sigmoid");
        cfg->n_dpo_loss_type = 1;
    }
    for (int i = 0; i < cfg->n_dpo_loss_type; i++)
        if (strcmp(cfg->dpo_loss_type[i], "aot_pair") == 0) {
            /* TRL renamed it; older configs (and Axolotl's docs) still say aot_pair */
            free(cfg->dpo_loss_type[i]);
            cfg->dpo_loss_type[i] = xstrdup("aot_unpaired");
            add_warning(cfg, "key 'dpo_loss_type': aot_pair is TRL's old name of aot_unpaired; "
                             "using aot_unpaired");
        }
    if (cfg->n_dpo_loss_type) {
        cfg->dpo_loss_weight_values = xcalloc((size_t)cfg->n_dpo_loss_type, sizeof(double));
        for (int i = 0; i < cfg->n_dpo_loss_type; i++) {
            cfg->dpo_loss_weight_values[i] = 1.0;
            if (cfg->n_dpo_loss_weights &&
                yaml_text_to_double(cfg->dpo_loss_weights[i], &cfg->dpo_loss_weight_values[i]) != 0)
                return err_set("key 'dpo_loss_weights'[%d]: expected a number, got \"%s\"", i,
                               cfg->dpo_loss_weights[i]);
        }
    }
    if (!isnan(cfg->rpo_alpha) && !cfg->dpo_legacy_compat)
        return err_set("key 'rpo_alpha' was removed from TRL (0.29): use dpo_loss_type: [sigmoid, "
                       "sft] with dpo_loss_weights: [1.0, alpha], or set dpo_legacy_compat: true "
                       "for the old meaning");
    if (cfg->dpo_label_smoothing < 0 || cfg->dpo_label_smoothing >= 1)
        return err_set("key 'dpo_label_smoothing': must be in [0, 1), got %g",
                       cfg->dpo_label_smoothing);
    if (cfg->kto_desirable_weight < 0 || cfg->kto_undesirable_weight < 0)
        return err_set("keys 'kto_desirable_weight', 'kto_undesirable_weight': must not be "
                       "negative");
    if (cfg->cpo_loss_type && cfg->rl != RL_CPO)
        return err_set("key 'cpo_loss_type' is for rl: cpo only, but got rl=%s%s",
                       rl_method_name(cfg->rl),
                       cfg->rl == RL_SIMPO ? " (rl: simpo is CPO with the simpo loss)" : "");
    if (cfg->rl == RL_SIMPO && cfg->warmup_ratio >= 0)
        return err_set("warmup_ratio is not supported with the simpo trainer. Please use "
                       "`warmup_steps` instead");
    if (cfg->max_prompt_len < 0) return err_set("key 'max_prompt_len': must not be negative");
    if (!cfg->excess_length_strategy) cfg->excess_length_strategy = xstrdup("drop");
    if (strcmp(cfg->excess_length_strategy, "drop") != 0 &&
        strcmp(cfg->excess_length_strategy, "truncate") != 0 &&
        strcmp(cfg->excess_length_strategy, "raise") != 0)
        return err_set("key 'excess_length_strategy': \"%s\" is not one of drop, truncate, raise",
                       cfg->excess_length_strategy);
    return 0;
}

static int validate(TrainConfig *cfg) {
    if (!cfg->base_model) return err_set("key 'base_model': missing (a local model directory)");
    if (cfg->n_datasets == 0) return err_set("key 'datasets': missing (at least one dataset)");
    if (isnan(cfg->learning_rate)) return err_set("key 'learning_rate': missing");
    if (require_positive("learning_rate", cfg->learning_rate) ||
        require_positive("sequence_len", (double)cfg->sequence_len) ||
        require_positive("micro_batch_size", (double)cfg->micro_batch_size) ||
        require_positive("gradient_accumulation_steps", (double)cfg->gradient_accumulation_steps) ||
        require_positive("num_epochs", cfg->num_epochs) ||
        require_positive("logging_steps", (double)cfg->logging_steps))
        return -1;
    if (cfg->max_steps == 0 || cfg->max_steps < -1)
        return err_set("key 'max_steps': must be positive, got %lld", (long long)cfg->max_steps);
    if (cfg->warmup_steps >= 0 && cfg->warmup_ratio >= 0)
        return err_set("keys 'warmup_steps' and 'warmup_ratio' are mutually exclusive");
    if (cfg->warmup_ratio > 1) return err_set("key 'warmup_ratio': must be in [0, 1]");
    if (cfg->val_set_size < 0) return err_set("key 'val_set_size': must not be negative");
    if (cfg->val_set_size > 0 && cfg->n_test_datasets)
        return err_set("non-zero val_set_size should not be used with test_datasets configuration");
    if (cfg->weight_decay < 0) return err_set("key 'weight_decay': must not be negative");
    if (cfg->max_grad_norm < 0) return err_set("key 'max_grad_norm': must not be negative");
    if (cfg->max_consecutive_bad_steps < 0)
        return err_set("key 'max_consecutive_bad_steps': must not be negative (0: never stop)");
    if (cfg->zero_stage != 0 && cfg->zero_stage != 1)
        return err_set("key 'zero_stage': %lld is not supported (0: every rank keeps the whole "
                       "optimizer state; 1: each rank keeps the AdamW moments of its slice)",
                       (long long)cfg->zero_stage);
    if (cfg->save_steps < 0 || cfg->save_total_limit < 0 || cfg->eval_steps < 0)
        return err_set("keys 'save_steps', 'save_total_limit', 'eval_steps' must not be negative");
    if (cfg->adam_beta1 < 0 || cfg->adam_beta1 >= 1 || cfg->adam_beta2 < 0 || cfg->adam_beta2 >= 1)
        return err_set("keys 'adam_beta1', 'adam_beta2': must be in [0, 1)");
    if (!cfg->optimizer) cfg->optimizer = xstrdup("adamw_torch");
    if (strcmp(cfg->optimizer, "adamw_torch") != 0 &&
        strcmp(cfg->optimizer, "adamw_torch_fused") != 0 && !optimizer_is_8bit(cfg->optimizer))
        return err_set("key 'optimizer': \"%s\" is not supported (adamw_torch, adamw_torch_fused; "
                       "8-bit moments: adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit)",
                       cfg->optimizer);
    if (optimizer_is_8bit(cfg->optimizer) && cfg->zero_stage == 1)
        return err_set("key 'zero_stage': 1 shards the fp32 AdamW moments; it cannot be combined "
                       "with optimizer \"%s\" (use zero_stage: 0)",
                       cfg->optimizer);
    if (!cfg->lr_scheduler) cfg->lr_scheduler = xstrdup("cosine");
    static const char *const schedules[] = {"constant", "constant_with_warmup", "linear", "cosine"};
    bool known = false;
    for (size_t i = 0; i < 4; i++)
        known |= strcmp(cfg->lr_scheduler, schedules[i]) == 0;
    if (!known)
        return err_set("key 'lr_scheduler': \"%s\" is not supported (constant, "
                       "constant_with_warmup, linear, cosine)",
                       cfg->lr_scheduler);
    if (validate_adapter(cfg) != 0 || validate_preference(cfg) != 0) return -1;
    if (!cfg->tokenizer_config) cfg->tokenizer_config = xstrdup(cfg->base_model);
    if (!cfg->output_dir) cfg->output_dir = xstrdup("./outputs");
    return 0;
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
        const KeySpec *spec = find_spec(key);
        if (!spec) {
            if (is_documented(key))
                add_warning(cfg, "%s:%d: key '%s' is not used by rlhf.c yet; ignored", d->path,
                            line, key);
            else
                add_warning(cfg, "%s:%d: unknown key '%s' ignored (did you mean '%s'?)", d->path,
                            line, key, nearest_key(key));
            continue;
        }
        if (override_for(key, overrides, n_ov)) continue;
        if (spec->kind == K_DATASETS) {
            if (read_datasets(cfg, d, v, key) != 0) return -1;
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
            add_warning(cfg, "%s:%d: dpo_beta is deprecated, use rl_beta instead", d->path, line);
        if (spec->kind == K_STRING_LIST && v->type == YAML_SEQUENCE_NODE) {
            char ***list = (char ***)((char *)cfg + spec->offset);
            int *n = string_list_count(cfg, spec);
            free_string_list(list, n);
            if (read_string_list(d, v, key, "a name", list, n) != 0)
                return err_prefix("%s:%d", d->path, line);
            if (*n == 0)
                return err_set("%s:%d: key '%s': expected at least one name", d->path, line, key);
            continue;
        }
        if (v->type != YAML_SCALAR_NODE)
            return err_set("%s:%d: key '%s': expected a single value, not a %s", d->path, line, key,
                           v->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        bool quoted = v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        if (set_from_text(cfg, spec, (const char *)v->data.scalar.value, quoted) != 0)
            return err_prefix("%s:%d", d->path, line);
    }
    return 0;
}

static int apply_overrides(TrainConfig *cfg, const char *const *overrides, int n_ov) {
    for (int i = 0; i < n_ov; i++) {
        const char *key = overrides[2 * i], *value = overrides[2 * i + 1];
        const KeySpec *spec = find_spec(key);
        if (!spec)
            return err_set(
                "command line: --%s is not a configuration key rlhf.c uses (did you mean "
                "--%s?)",
                key, nearest_key(key));
        if (set_from_text(cfg, spec, value, false) != 0)
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
    if (rc == 0 && validate(cfg) != 0)
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

static void free_datasets(DatasetConfig *list, int n) {
    for (int i = 0; i < n; i++) {
        DatasetConfig *ds = &list[i];
        free(ds->path);
        free(ds->where);
        free(ds->ds_type);
        free(ds->split);
        free(ds->type);
        for (int f = 0; f < ds->n_data_files; f++)
            free(ds->data_files[f]);
        free(ds->data_files);
        json_decref(ds->options);
    }
    free(list);
}

void train_config_free(TrainConfig *cfg) {
    free_datasets(cfg->datasets, cfg->n_datasets);
    free_datasets(cfg->test_datasets, cfg->n_test_datasets);
    grpo_config_free(&cfg->grpo);
    json_decref(cfg->raw);
    char **strings[] = {&cfg->source,
                        &cfg->base_model,
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
    free_string_list(&cfg->lora_target_modules, &cfg->n_lora_target_modules);
    free_string_list(&cfg->dpo_loss_type, &cfg->n_dpo_loss_type);
    free_string_list(&cfg->dpo_loss_weights, &cfg->n_dpo_loss_weights);
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
