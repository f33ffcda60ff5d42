/* The checks of a training configuration once every key is read: ranges, keys that exclude
 * each other, and the defaults that depend on other keys (Axolotl's and TRL's rules). */
#include "config/train_config_internal.h"

#include "dist/dist_launch.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int require_positive(const char *key, double v) {
    if (v <= 0) return err_set("key '%s': must be positive, got %g", key, v);
    return 0;
}

/* adapter and the lora_* keys (axolotl-config.md §9.6). */
static int validate_adapter(TrainConfig *cfg) {
    bool lora_keys = cfg->lora_r != -1 || !isnan(cfg->lora_alpha) || cfg->lora_dropout != 0 ||
                     cfg->n_lora_target_modules || cfg->lora_target_linear ||
                     cfg->peft_use_rslora || cfg->lora_model_dir;
    if (cfg->load_in_4bit && !cfg->adapter) /* Axolotl's own words */
        return err_set("key 'load_in_4bit': load_in_8bit and load_in_4bit are not supported "
                       "without setting an adapter for training. If you want to full finetune, "
                       "please turn off load_in_8bit and load_in_4bit.");
    if (cfg->load_in_4bit && strcmp(cfg->adapter, "qlora") != 0)
        return err_set("key 'load_in_4bit': true needs adapter: qlora (rlhf.c quantises to NF4 "
                       "with double quantisation, as Axolotl configures bitsandbytes for QLoRA), "
                       "not adapter: %s",
                       cfg->adapter);
    if (!cfg->adapter) {
        if (lora_keys)
            train_config_warn(cfg,
                              "%s: lora_* keys are set but 'adapter' is not: they are ignored and "
                              "every weight is trained (set adapter: lora to train an adapter)",
                              cfg->source);
        return 0;
    }
    if (strcmp(cfg->adapter, "qlora") == 0 && !cfg->load_in_4bit)
        return err_set("key 'adapter': qlora: Require cfg.load_in_4bit to be True for qlora "
                       "(set load_in_4bit: true)");
    if (strcmp(cfg->adapter, "lora") != 0 && strcmp(cfg->adapter, "qlora") != 0)
        return err_set("key 'adapter': \"%s\" is not supported (lora, qlora)", cfg->adapter);
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
        return err_set("%s:%d: key 'trl.beta': expected a number", cfg->source,
                       json_is_integer(json_object_get(cfg->trl_lines, "beta"))
                           ? (int)json_integer_value(json_object_get(cfg->trl_lines, "beta"))
                           : cfg->trl_line);
    *beta = json_number_value(v);
    return 1;
}

/* rl: grpo / gdpo: beta defaults to 0 (TRL's GRPOConfig), and the trl: block is GRPOConfig. */
static int validate_grpo(TrainConfig *cfg, double beta) {
    /* generation batches span the ranks, so the geometry is checked for the job's rank count
     * (in the --nproc launcher, the count it is about to start) */
    GrpoBatchShape shape = {(int)cfg->micro_batch_size, (int)cfg->gradient_accumulation_steps,
                            cfg->val_set_size > 0 || cfg->n_test_datasets > 0, dist_planned_size()};
    if (grpo_config_read(&cfg->grpo, cfg->trl, cfg->rl == RL_GDPO, beta, &shape, cfg->source,
                         cfg->trl_line, cfg->trl_lines) != 0)
        return -1;
    if (cfg->grpo.vllm_mode_defaulted) /* Axolotl's warning, word for word */
        train_config_warn(cfg,
                          "%s: key 'trl.use_vllm': vllm_mode must be set to either `server` or "
                          "`colocate` when using vllm, using default value `server`",
                          cfg->source);
    cfg->beta = cfg->grpo.beta;
    return 0;
}

/* The keys of the preference methods (axolotl-config.md §8.1, §8.2). */
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
            train_config_warn(cfg,
                              "key 'dpo_loss_type': aot_pair is TRL's old name of aot_unpaired; "
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

int train_config_validate(TrainConfig *cfg) {
    if (!cfg->base_model)
        return err_set("key 'base_model': missing (a local model directory or a Hub id)");
    if (cfg->n_datasets == 0) return err_set("key 'datasets': missing (at least one dataset)");
    if (isnan(cfg->learning_rate)) return err_set("key 'learning_rate': missing");
    if (require_positive("learning_rate", cfg->learning_rate) ||
        require_positive("sequence_len", (double)cfg->sequence_len) ||
        require_positive("micro_batch_size", (double)cfg->micro_batch_size) ||
        require_positive("gradient_accumulation_steps", (double)cfg->gradient_accumulation_steps) ||
        require_positive("num_epochs", cfg->num_epochs) ||
        require_positive("logging_steps", (double)cfg->logging_steps))
        return -1;
    if (cfg->sample_packing && cfg->rl != RL_NONE)
        return err_set("key 'sample_packing': true is supported for supervised fine-tuning "
                       "only (rl unset); rl: %s trains on unpacked pairs or completions",
                       rl_method_name(cfg->rl));
    if (require_positive("sample_packing_bin_size", (double)cfg->sample_packing_bin_size) ||
        require_positive("sample_packing_group_size", (double)cfg->sample_packing_group_size))
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
    if (cfg->grpo_rng && strcmp(cfg->grpo_rng, "torch") != 0 &&
        strcmp(cfg->grpo_rng, "streams") != 0)
        return err_set("key 'grpo_rng': \"%s\" is not supported (torch: TRL's draws for the seed, "
                       "one process; streams: per-completion streams, any number of ranks)",
                       cfg->grpo_rng);
    if (cfg->grpo_rng && cfg->rl != RL_GRPO && cfg->rl != RL_GDPO)
        return err_set("key 'grpo_rng' is for rl: grpo or gdpo only");
    if (cfg->save_steps < 0 || cfg->save_total_limit < 0 || cfg->eval_steps < 0)
        return err_set("keys 'save_steps', 'save_total_limit', 'eval_steps' must not be negative");
    if (cfg->adam_beta1 < 0 || cfg->adam_beta1 >= 1 || cfg->adam_beta2 < 0 || cfg->adam_beta2 >= 1)
        return err_set("keys 'adam_beta1', 'adam_beta2': must be in [0, 1)");
    if (tracking_config_check(&cfg->tracking, cfg->source) != 0) return -1;
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
    if (!cfg->device) cfg->device = xstrdup("auto");
    if (strcmp(cfg->device, "cpu") != 0 && strcmp(cfg->device, "cuda") != 0 &&
        strcmp(cfg->device, "cuda-emu") != 0 && strcmp(cfg->device, "auto") != 0)
        return err_set("key 'device': \"%s\" is not a device (cpu, cuda, auto; cuda-emu: the "
                       "CUDA backend emulated on the CPU, for tests)",
                       cfg->device);
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
    if (cfg->tokenizer_type) {
        bool known_class = false;
        for (size_t i = 0; tokenizer_load_classes[i]; i++)
            known_class |= strcmp(cfg->tokenizer_type, tokenizer_load_classes[i]) == 0;
        if (!known_class)
            return err_set("key 'tokenizer_type': \"%s\" is not built (AutoTokenizer, "
                           "PreTrainedTokenizerFast, TokenizersBackend, LlamaTokenizer or "
                           "LlamaTokenizerFast)",
                           cfg->tokenizer_type);
    }
    if (!cfg->tokenizer_config)
        cfg->tokenizer_config =
            xstrdup(cfg->base_model_config ? cfg->base_model_config : cfg->base_model);
    if (cfg->hub_model_id) cfg->push_to_hub = true; /* Axolotl's rule */
    if (cfg->hub_strategy && strcmp(cfg->hub_strategy, "end") != 0 &&
        strcmp(cfg->hub_strategy, "every_save") != 0 &&
        strcmp(cfg->hub_strategy, "checkpoint") != 0 &&
        strcmp(cfg->hub_strategy, "all_checkpoints") != 0)
        return err_set("key 'hub_strategy': \"%s\" is not one of end, every_save, checkpoint, "
                       "all_checkpoints",
                       cfg->hub_strategy);
    if (!cfg->output_dir) cfg->output_dir = xstrdup("./outputs");
    return 0;
}
