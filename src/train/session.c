#include "train/session.h"

#include "common/error.h"
#include "common/fileio.h"
#include "dist/dist.h"
#include "grpo/grpo_run.h"
#include "io/model_dir.h"
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

int train_session_open(TrainSession *s, const TrainConfig *cfg, FILE *log) {
    memset(s, 0, sizeof *s);
    if (model_load(&s->model, cfg->base_model) != 0) return -1;
    if (cfg->adapter && make_adapter(cfg, &s->model, &s->lora, log) != 0) {
        model_free(&s->model);
        return -1;
    }
    s->has_lora = cfg->adapter != NULL;
    if (cfg->adapter)
        fprintf(log, "trainable params: %zu || all params: %zu || trainable%%: %.4f\n",
                s->lora.n_params, s->lora.n_params + s->model.n_params,
                100.0 * (double)s->lora.n_params / (double)(s->lora.n_params + s->model.n_params));
    if (tokenizer_load(&s->tok, cfg->tokenizer_config) != 0) {
        lora_free(&s->lora);
        model_free(&s->model);
        return -1;
    }
    return 0;
}

int train_session_run(TrainSession *s, const TrainConfig *cfg, const TrainHooks *hooks, FILE *log) {
    TrainOutcome *out = hooks ? hooks->outcome : NULL;
    if (out) memset(out, 0, sizeof *out);
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
        return grpo_run(cfg, m, trained, &s->tok, hooks ? hooks->rewards : NULL, out, log);
    case RL_DPO:
    case RL_IPO:
    case RL_ORPO:
    case RL_SIMPO:
    case RL_CPO:
        return pref_task_run(cfg, m, trained, &s->tok, out, log);
    }
    return err_set("%s: rl: method %d has no run", cfg->source, (int)cfg->rl); /* unreachable */
}

int train_session_save(const TrainSession *s, const TrainConfig *cfg, const char *dir, FILE *log) {
    /* rank 0 writes the model; every rank learns whether it could */
    int rc = dist_agree(
        !dist_is_root() ? 0
        : s->has_lora
            ? model_dir_write_adapter(&s->lora, cfg->base_model, cfg->tokenizer_config, dir)
            : model_dir_write(&s->model, cfg->base_model, cfg->tokenizer_config, dir,
                              model_dir_source_dtype(&s->model)));
    if (rc == 0) fprintf(log, "%s saved to %s\n", s->has_lora ? "adapter" : "model", dir);
    return rc;
}

void train_session_close(TrainSession *s) {
    tokenizer_free(&s->tok);
    lora_free(&s->lora);
    model_free(&s->model);
    memset(s, 0, sizeof *s);
}

int train_run(const TrainConfig *cfg, FILE *log) {
    TrainSession s;
    /* before the model loads: another run in output_dir stops this one at once */
    if (output_dir_prepare(cfg, log) != 0) return -1;
    if (train_session_open(&s, cfg, log) != 0) return -1;
    int rc = train_session_run(&s, cfg, NULL, log);
    if (rc == 0) rc = train_session_save(&s, cfg, cfg->output_dir, log);
    train_session_close(&s);
    return rc;
}
