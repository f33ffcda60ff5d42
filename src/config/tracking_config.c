#include "config/tracking_config.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* "false", "" or unset: the value of a wandb_* key that asks for nothing. */
static bool asks_nothing(const char *v) {
    return !v || !*v || strcmp(v, "false") == 0 || strcmp(v, "False") == 0;
}

/* HF's integrations rlhf.c does not report to: named so that the refusal says why. */
static const char *const unsupported[] = {"azure_ml", "clearml", "codecarbon", "comet_ml",
                                          "dagshub",  "dvclive", "flyte",      "mlflow",
                                          "neptune",  "swanlab", "trackio",    "kubeflow"};

int tracking_config_check(TrackingConfig *t, const char *source) {
    t->tensorboard = t->use_tensorboard;
    t->wandb = t->use_wandb || (t->wandb_project && *t->wandb_project);
    t->wandb_optional = false;
    bool all = false;
    for (int i = 0; i < t->n_report_to; i++) {
        const char *name = t->report_to[i];
        if (strcmp(name, "tensorboard") == 0)
            t->tensorboard = true;
        else if (strcmp(name, "wandb") == 0)
            t->wandb = true;
        else if (strcmp(name, "all") == 0)
            all = true;
        else if (strcmp(name, "none") == 0) {
            if (t->n_report_to > 1)
                return err_set("%s: key 'report_to': \"none\" cannot be listed with other "
                               "integrations",
                               source);
        } else {
            for (size_t k = 0; k < sizeof unsupported / sizeof *unsupported; k++)
                if (strcmp(name, unsupported[k]) == 0)
                    return err_set("%s: key 'report_to': rlhf.c does not report to %s; it "
                                   "reports to tensorboard and wandb (metrics.jsonl always "
                                   "holds every logged value)",
                                   source, name);
            return err_set("%s: key 'report_to': unknown integration \"%s\" (expected "
                           "tensorboard, wandb, all or none)",
                           source, name);
        }
    }
    if (all) {
        t->tensorboard = true;
        if (!t->wandb) t->wandb = t->wandb_optional = true;
    }
    if (t->wandb_mode && strcmp(t->wandb_mode, "online") != 0 &&
        strcmp(t->wandb_mode, "offline") != 0 && strcmp(t->wandb_mode, "disabled") != 0)
        return err_set("%s: key 'wandb_mode': \"%s\" is not one of online, offline, disabled",
                       source, t->wandb_mode);
    if (!asks_nothing(t->wandb_log_model))
        return err_set("%s: key 'wandb_log_model': \"%s\" would upload the model to W&B as an "
                       "artifact, which rlhf.c does not do; remove the key or set it to false "
                       "(the saved model is in output_dir)",
                       source, t->wandb_log_model);
    if (!asks_nothing(t->wandb_watch))
        return err_set("%s: key 'wandb_watch': \"%s\" needs wandb.watch on a torch model, which "
                       "rlhf.c has not; remove the key or set it to false (grad_norm is logged "
                       "at every logging step)",
                       source, t->wandb_watch);
    return 0;
}

void tracking_config_free(TrackingConfig *t) {
    for (int i = 0; i < t->n_report_to; i++)
        free(t->report_to[i]);
    free(t->report_to);
    char *strings[] = {t->wandb_project, t->wandb_entity,    t->wandb_name, t->wandb_mode,
                       t->wandb_run_id,  t->wandb_log_model, t->wandb_watch};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        free(strings[i]);
    memset(t, 0, sizeof *t);
}
