/* The keys rlhf.c reads and where each goes in a TrainConfig, and setting a key from its text
 * (the same for a file and the command line). What happens to every other key Axolotl documents
 * is in the status table (config/key_status.c), whose `used` top-level rows are exactly these. */
#include "config/train_config_internal.h"
#include "kernels/cpu/kernels.h" /* packed_bf16_available: what bf16: auto resolves to */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY(name, kind)                                                                            \
    { #name, kind, offsetof(TrainConfig, name) }
static const KeySpec key_specs[] = {
    KEY(base_model, K_STRING),
    KEY(base_model_config, K_STRING),
    KEY(tokenizer_config, K_STRING),
    KEY(tokenizer_legacy, K_OPT_BOOL),
    KEY(tokenizer_type, K_STRING),
    KEY(revision_of_model, K_STRING),
    {"model_revision", K_STRING, offsetof(TrainConfig, revision_of_model)}, /* Axolotl's alias */
    {"base_model_revision", K_STRING, offsetof(TrainConfig, revision_of_model)},
    KEY(rl, K_RL),
    KEY(datasets, K_DATASETS),
    KEY(test_datasets, K_DATASETS),
    KEY(val_set_size, K_FLOAT),
    KEY(shuffle_merged_datasets, K_BOOL),
    KEY(shuffle_before_merging_datasets, K_BOOL),
    KEY(sequence_len, K_INT),
    KEY(micro_batch_size, K_INT),
    KEY(sample_packing, K_BOOL),
    KEY(sample_packing_bin_size, K_INT),
    KEY(sample_packing_group_size, K_INT),
    KEY(sample_packing_sequentially, K_BOOL),
    KEY(eval_sample_packing, K_BOOL),
    KEY(multipack_real_batches, K_BOOL),
    KEY(gradient_accumulation_steps, K_INT),
    KEY(num_epochs, K_FLOAT),
    KEY(max_steps, K_INT),
    KEY(learning_rate, K_FLOAT),
    KEY(optimizer, K_STRING),
    KEY(device, K_STRING),
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
    KEY(load_in_4bit, K_BOOL),
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
    KEY(grpo_rng, K_STRING),
    KEY(max_prompt_len, K_INT),
    KEY(excess_length_strategy, K_STRING),
#define TRACKING_KEY(name, kind)                                                                   \
    { #name, kind, offsetof(TrainConfig, tracking.name) }
    TRACKING_KEY(use_tensorboard, K_BOOL),
    TRACKING_KEY(use_wandb, K_BOOL),
    TRACKING_KEY(report_to, K_STRING_LIST),
    TRACKING_KEY(wandb_project, K_STRING),
    TRACKING_KEY(wandb_entity, K_STRING),
    TRACKING_KEY(wandb_name, K_STRING),
    TRACKING_KEY(wandb_mode, K_STRING),
    TRACKING_KEY(wandb_run_id, K_STRING),
    TRACKING_KEY(wandb_log_model, K_STRING),
    TRACKING_KEY(wandb_watch, K_STRING),
#undef TRACKING_KEY
    KEY(push_to_hub, K_BOOL),
    KEY(hub_model_id, K_STRING),
    KEY(hub_strategy, K_STRING),
    KEY(hub_private_repo, K_BOOL),
    KEY(hub_revision, K_STRING),
    KEY(hub_token, K_STRING),
    KEY(overwrite_output_dir, K_BOOL),
};
#undef KEY
#define N_KEY_SPECS (sizeof key_specs / sizeof *key_specs)

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

const KeySpec *train_config_key_spec(size_t i) {
    return i < N_KEY_SPECS ? &key_specs[i] : NULL;
}

const char *train_config_read_key_name(size_t i) {
    return i < N_KEY_SPECS ? key_specs[i].name : NULL;
}

const KeySpec *train_config_find_key(const char *name) {
    for (size_t i = 0; i < N_KEY_SPECS; i++)
        if (strcmp(key_specs[i].name, name) == 0) return &key_specs[i];
    return NULL;
}

void train_config_free_string_list(char ***list, int *n) {
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
_Static_assert(offsetof(TrainConfig, tracking.n_report_to) ==
                   offsetof(TrainConfig, tracking.report_to) + sizeof(char **),
               "a string list's count follows its pointer");
static int *string_list_count(TrainConfig *cfg, const KeySpec *spec) {
    return (int *)((char *)cfg + spec->offset + sizeof(char **));
}

/* A comma-separated list (a single YAML string, or a command-line value). */
static int set_string_list(TrainConfig *cfg, const KeySpec *spec, const char *text) {
    char ***list = (char ***)((char *)cfg + spec->offset);
    int *n = string_list_count(cfg, spec);
    train_config_free_string_list(list, n);
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
int train_config_set_key(TrainConfig *cfg, const KeySpec *spec, const char *text, bool quoted) {
    void *field = (char *)cfg + spec->offset;
    /* an explicit choice the memory plan must not override (train/session.c) */
    if (spec->offset == offsetof(TrainConfig, gradient_checkpointing))
        cfg->gradient_checkpointing_set = true;
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
    case K_OPT_BOOL: {
        bool v;
        if (quoted || yaml_text_to_bool(text, &v) != 0)
            return err_set("key '%s': expected true or false, got \"%s\"", spec->name, text);
        *(int *)field = v;
        return 0;
    }
    case K_BF16: {
        bool v;
        cfg->bf16_auto = false;
        if (!quoted && yaml_text_to_bool(text, &v) == 0) {
            cfg->bf16 = v;
        } else if (strcmp(text, "auto") == 0) {
            /* Axolotl's auto: bf16 where the hardware supports it. Here: where this build has
             * the CPU's bf16 dot products (AVX512_BF16, which every AMX-BF16 CPU has too) */
            cfg->bf16 = packed_bf16_available();
            cfg->bf16_auto = true;
        } else if (strcmp(text, "full") == 0) {
            /* Axolotl's full: bf16 weights trained without fp32 master weights. That changes
             * what is trained, so it is refused rather than run as true */
            return err_set("key 'bf16': \"full\" (bf16 weights without fp32 master copies) is not "
                           "supported by rlhf.c; bf16: true trains with mixed precision (fp32 "
                           "weights, gradients and optimizer state, bf16 matmul inputs)");
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
int train_config_read_string_list(YamlDoc *d, yaml_node_t *n, const char *what, const char *kind,
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

int train_config_set_key_list(TrainConfig *cfg, const KeySpec *spec, YamlDoc *d, yaml_node_t *v,
                              int line) {
    char ***list = (char ***)((char *)cfg + spec->offset);
    int *n = string_list_count(cfg, spec);
    train_config_free_string_list(list, n);
    if (train_config_read_string_list(d, v, spec->name, "a name", list, n) != 0)
        return err_prefix("%s:%d", d->path, line);
    if (*n == 0)
        return err_set("%s:%d: key '%s': expected at least one name", d->path, line, spec->name);
    return 0;
}
