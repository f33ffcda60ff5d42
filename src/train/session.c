#include "train/session.h"

#include "train/memory_plan.h"

#include "common/error.h"
#include "common/fileio.h"
#include "dist/dist.h"
#include "grpo/grpo_run.h"
#include "io/hub_resolve.h"
#include "io/model_card.h"
#include "io/model_dir.h"
#include "kernels/cpu/nf4.h"
#include "train/hub_push.h"
#include "train/output_dir.h"
#include "train/pref_task.h"
#include "train/sft_task.h"

#include <string.h>

/* The adapter to train: a fresh one as the lora_* keys describe, or the one in lora_model_dir
 * to continue from (its adapter_config.json governs, as PeftModel.from_pretrained does). */
static int make_adapter(const TrainConfig *cfg, const Model *m, LoraAdapter *lora, FILE *log) {
    if (cfg->lora_model_dir) {
        if (!dir_exists(cfg->lora_model_dir))
            return err_set("%s: key 'lora_model_dir': target directory for LoRA adapter weights "
                           "does not exist: `%s`",
                           cfg->source, cfg->lora_model_dir);
        if (lora_load(lora, &m->cfg, cfg->lora_model_dir) != 0) return -1;
        fprintf(log, "continuing from the adapter in %s (r %d, alpha %g)\n", cfg->lora_model_dir,
                lora->r, lora->alpha);
        return 0;
    }
    const char *all_linear = "all-linear";
    const char *const *targets = (const char *const *)cfg->lora_target_modules;
    int n_targets = cfg->n_lora_target_modules;
    if (cfg->lora_target_linear) targets = &all_linear, n_targets = 1;
    if (lora_create(lora, &m->cfg, (int)cfg->lora_r, cfg->lora_alpha, cfg->peft_use_rslora,
                    cfg->lora_dropout, targets, n_targets, (uint64_t)cfg->seed) != 0)
        return err_prefix("%s", cfg->source);
    return 0;
}

int train_memory_plan(TrainConfig *cfg, FILE *log) {
    ModelConfig mc;
    if (model_config_load(&mc, cfg->base_model) != 0) return -1;
    MemoryPlan plan = memory_plan_make(cfg, &mc);
    if (plan.available >= 0 && plan.total > plan.available && !cfg->gradient_checkpointing &&
        !cfg->gradient_checkpointing_set) {
        TrainConfig with = *cfg; /* shallow: read by memory_plan_make only */
        with.gradient_checkpointing = true;
        MemoryPlan recomputed = memory_plan_make(&with, &mc);
        if (recomputed.total <= recomputed.available) {
            fprintf(log,
                    "gradient_checkpointing: on (not set, and the run fits only with it: "
                    "activations %.2f GB instead of %.2f GB)\n",
                    recomputed.activations / 1e9, plan.activations / 1e9);
            cfg->gradient_checkpointing = true;
            plan = recomputed;
        }
    }
    model_config_free(&mc);
    memory_plan_print(&plan, log);
    return memory_plan_check(&plan, cfg);
}

int train_session_open(TrainSession *s, const TrainConfig *cfg, FILE *log) {
    memset(s, 0, sizeof *s);
    if (train_device_open(&s->device, cfg, log) != 0) return -1;
    /* QLoRA: the layer matrices to NF4 as bitsandbytes quantises them (from their bf16 values
     * with bf16: true, as transformers loads them with torch_dtype=bfloat16); the embedding,
     * lm_head, norms and biases kept in bf16 (exact for a bf16 checkpoint). An adapter with bf16:
     * true keeps the base in bf16, as transformers loads it under Axolotl (peft keeps the
     * adapter fp32); gradients flow through the frozen weights to the adapter
     * (model/backward.c). Either is read straight from the checkpoint: no fp32 copy. */
    bool frozen = cfg->load_in_4bit || (cfg->adapter && cfg->bf16);
    int rc = frozen ? model_load_frozen(&s->model, cfg->base_model, cfg->load_in_4bit, cfg->bf16)
                    : model_load(&s->model, cfg->base_model);
    if (rc != 0) {
        train_device_close(&s->device);
        return -1;
    }
    if (cfg->load_in_4bit)
        fprintf(log,
                "base model: frozen, its layer matrices quantised to NF4 (blocks of %d, "
                "double quantisation) from their %s values, embedding, lm_head and norms "
                "kept in bf16 (load_in_4bit: true)\n",
                NF4_BLOCK, cfg->bf16 ? "bf16" : "fp32");
    else if (frozen)
        fprintf(log, "base model: frozen, its weights kept in bf16 (bf16: true with an adapter)\n");
    if (cfg->bf16) {
        /* every method's forward and backward (and a reference that is the base with the
         * adapter off) then compute on the autocast table */
        s->model.backend = backend_cpu_autocast();
        fprintf(log,
                "bf16%s: mixed precision as torch's CPU autocast: linear, attention and lm_head "
                "products take bf16-rounded inputs and sum in fp32; weights, gradients, "
                "optimizer state, norms, softmax, log-probs and losses fp32\n",
                cfg->bf16_auto ? " (auto)" : "");
    } else if (cfg->bf16_auto) {
        fputs("bf16: auto is off: this build has no AVX512_BF16 dot products\n", log);
    }
    if (cfg->adapter && make_adapter(cfg, &s->model, &s->lora, log) != 0) {
        model_free(&s->model);
        train_device_close(&s->device);
        return -1;
    }
    s->has_lora = cfg->adapter != NULL;
    if (cfg->adapter)
        fprintf(log, "trainable params: %zu || all params: %zu || trainable%%: %.4f\n",
                s->lora.n_params, s->lora.n_params + s->model.n_params,
                100.0 * (double)s->lora.n_params / (double)(s->lora.n_params + s->model.n_params));
    TokenizerLoadOptions tok_opts = {.legacy = cfg->tokenizer_legacy,
                                     .tokenizer_class = cfg->tokenizer_type};
    if (tokenizer_load_options(&s->tok, cfg->tokenizer_config, &tok_opts) != 0) {
        lora_free(&s->lora);
        model_free(&s->model);
        train_device_close(&s->device);
        return -1;
    }
    return 0;
}

/* The last value of every number logged (the later entries win), the mean training loss and
 * where the run ended: what the model card reports. */
static json_t *final_metrics(const TrainOutcome *o) {
    json_t *m = json_object();
    size_t i;
    json_t *entry;
    json_array_foreach(o->log_history, i, entry) {
        const char *key;
        json_t *v;
        json_object_foreach(entry, key, v) {
            if (json_is_number(v) && strcmp(key, "step") != 0) json_object_set(m, key, v);
        }
    }
    if (o->loss_steps > 0)
        json_object_set_new(m, "train_loss", json_real(o->loss_sum / (double)o->loss_steps));
    json_object_set_new(m, "global_step", json_integer(o->global_step));
    json_object_set_new(m, "epoch", json_real(o->epoch));
    return m;
}

static int run_method(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks,
                      TrainOutcome *out, FILE *log);

int train_session_run(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks, FILE *log) {
    TrainOutcome own, *out = hooks && hooks->outcome ? hooks->outcome : &own;
    memset(out, 0, sizeof *out);
    int rc = run_method(s, cfg, hooks, out, log);
    json_decref(s->final_metrics);
    s->final_metrics = rc == 0 ? final_metrics(out) : NULL;
    if (out == &own) json_decref(own.log_history);
    return rc;
}

static int run_method(TrainSession *s, const TrainConfig *session_cfg, const TrainHooks *hooks,
                      TrainOutcome *out, FILE *log) {
    /* a shallow copy that tells the training loop where to compute; it owns nothing */
    TrainConfig with_device = *session_cfg;
    with_device.train_device = &s->device;
    const TrainConfig *cfg = &with_device;
    LoraAdapter *trained = s->has_lora ? &s->lora : NULL;
    Model *m = &s->model;
    /* The one place that names every method's run: grpo/ builds on train/, and this dispatch is
     * the only reach of train/ into it. */
    switch (cfg->rl) {
    case RL_NONE:
        return sft_task_run(cfg, m, trained, &s->tok, out, log);
    case RL_KTO:
        return kto_task_run(cfg, m, trained, &s->tok, out, log);
    case RL_GRPO:
    case RL_GDPO:
        return grpo_run(cfg, m, trained, &s->tok, hooks ? hooks->rewards : NULL,
                        hooks ? hooks->rollout : NULL, out, log);
    case RL_DPO:
    case RL_IPO:
    case RL_ORPO:
    case RL_SIMPO:
    case RL_CPO:
        return pref_task_run(cfg, m, trained, &s->tok, out, log);
    }
    return err_set("%s: rl: method %d has no run", cfg->source, (int)cfg->rl); /* unreachable */
}

/* TRL's trainer name tag for the model card. */
static const char *card_method(RlMethod rl) {
    switch (rl) {
    case RL_NONE:
        return "sft";
    case RL_KTO:
        return "kto";
    case RL_ORPO:
        return "orpo";
    case RL_SIMPO:
    case RL_CPO:
        return "cpo"; /* TRL's CPOTrainer runs SimPO */
    case RL_GRPO:
    case RL_GDPO:
        return "grpo";
    case RL_DPO:
    case RL_IPO:
        return "dpo";
    }
    return "dpo";
}

/* README.md as TRL writes it: base_model only when the base came from the Hub, datasets only
 * those named by a Hub id (what `datasets` would have loaded from the Hub). */
static int write_card(const TrainSession *s, const TrainConfig *cfg, const char *dir) {
    char model_name[256];
    if (cfg->hub_model_id) {
        const char *slash = strrchr(cfg->hub_model_id, '/');
        snprintf(model_name, sizeof model_name, "%s", slash ? slash + 1 : cfg->hub_model_id);
    } else {
        TrainConfig named = {.output_dir = (char *)dir};
        hub_push_repo_id(&named, model_name, sizeof model_name);
    }
    const char **hub_datasets = xcalloc((size_t)cfg->n_datasets + 1, sizeof *hub_datasets);
    int n = 0;
    for (int i = 0; i < cfg->n_datasets; i++) {
        const char *p = cfg->datasets[i].path;
        if (p && !file_exists(p) && !dir_exists(p) && hub_is_repo_id(p)) hub_datasets[n++] = p;
    }
    char repo[256];
    hub_push_repo_id(cfg, repo, sizeof repo);
    ModelCard card = {.method = card_method(cfg->rl),
                      .base_model = cfg->base_model_id,
                      .base_path = cfg->base_model,
                      .model_name = model_name,
                      .hub_model_id = cfg->push_to_hub ? repo : NULL,
                      .datasets = hub_datasets,
                      .n_datasets = n,
                      .adapter = s->has_lora,
                      .metrics = s->final_metrics};
    int rc = model_card_write(&card, dir);
    free(hub_datasets);
    return rc;
}

int train_session_save(const TrainSession *s, const TrainConfig *cfg, const char *dir, FILE *log) {
    /* rank 0 writes the model; every rank learns whether it could */
    int rc = !dist_is_root() ? 0
             : s->has_lora ? model_dir_write_adapter(&s->lora, cfg->base_model, cfg->base_model_id,
                                                     cfg->tokenizer_config, dir)
                           : model_dir_write(&s->model, cfg->base_model, cfg->tokenizer_config, dir,
                                             model_dir_source_dtype(&s->model));
    if (rc == 0 && dist_is_root()) rc = write_card(s, cfg, dir);
    rc = dist_agree(rc);
    if (rc == 0) fprintf(log, "%s saved to %s\n", s->has_lora ? "adapter" : "model", dir);
    return rc;
}

void train_session_close(TrainSession *s) {
    train_device_close(&s->device);
    tokenizer_free(&s->tok);
    json_decref(s->final_metrics);
    lora_free(&s->lora);
    model_free(&s->model);
    memset(s, 0, sizeof *s);
}

int train_run(const TrainConfig *config, FILE *log) {
    TrainSession s;
    /* a shallow copy the memory plan may turn gradient checkpointing on in; it owns nothing */
    TrainConfig run = *config;
    const TrainConfig *cfg = &run;
    /* before anything is loaded or written: a run that cannot fit, then another run in
     * output_dir, stop this one at once */
    if (train_memory_plan(&run, log) != 0) return -1;
    if (output_dir_prepare(cfg, log) != 0) return -1;
    if (cfg->push_to_hub && dist_agree(dist_is_root() ? hub_push_init(cfg, log) : 0) != 0)
        return -1;
    if (train_session_open(&s, cfg, log) != 0) return -1;
    int rc = train_session_run(&s, cfg, NULL, log);
    if (rc == 0) rc = train_session_save(&s, cfg, cfg->output_dir, log);
    if (rc == 0 && cfg->push_to_hub)
        rc = dist_agree(dist_is_root() ? hub_push_output(cfg, "End of training", log) : 0);
    train_session_close(&s);
    return rc;
}
