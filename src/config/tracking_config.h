/* Where a run's metrics are reported besides metrics.jsonl: the experiment-tracking keys of
 * the config (Axolotl's use_tensorboard and wandb_* keys, HF TrainingArguments' report_to) and
 * the list of reporters they resolve to. The reporters themselves live in src/report/.
 *
 * Resolution (what a TRL/Axolotl user gets):
 *  - report_to (a name or a list, as TrainingArguments reads it): "tensorboard", "wandb",
 *    "all" (TensorBoard, and W&B when the wandb package can be imported), "none" (nothing).
 *    Names HF knows but rlhf.c does not report to (mlflow, comet_ml, ...) are refused.
 *  - use_tensorboard: true adds TensorBoard, as Axolotl appends it to report_to.
 *  - wandb_project set adds W&B (Axolotl sets use_wandb from it); use_wandb: true without a
 *    project also does, with wandb's default project. wandb_mode (online, offline, disabled)
 *    overrides $WANDB_MODE, as Axolotl exports it; without it WANDB_MODE is wandb's own.
 *  - wandb_log_model and wandb_watch upload checkpoints or torch gradients, which rlhf.c does
 *    not do: any value but false/empty is refused rather than silently dropped. */
#ifndef RLHF_CONFIG_TRACKING_CONFIG_H
#define RLHF_CONFIG_TRACKING_CONFIG_H

#include <stdbool.h>

typedef struct {
    bool use_tensorboard;
    bool use_wandb;
    char **report_to; /* as written (NULL: unset); its count follows */
    int n_report_to;
    char *wandb_project, *wandb_entity, *wandb_name, *wandb_mode, *wandb_run_id;
    char *wandb_log_model, *wandb_watch; /* only false/empty accepted */
    /* resolved by tracking_config_check */
    bool tensorboard;    /* write TensorBoard event files */
    bool wandb;          /* log to W&B */
    bool wandb_optional; /* W&B came only from report_to: all (skipped quietly when absent) */
} TrackingConfig;

/* Checks the keys and fills the resolved flags as described at the top. `source` (the config
 * file) prefixes messages. Returns 0, or -1 with an error naming the key and what it accepts. */
int tracking_config_check(TrackingConfig *t, const char *source);

/* Frees the strings; leaves the struct zeroed. */
void tracking_config_free(TrackingConfig *t);

#endif
