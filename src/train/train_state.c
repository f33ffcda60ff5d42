#include "train/train_state.h"

#include "common/error.h"
#include "dist/dist.h"
#include "train/checkpoint.h"

#include <string.h>

json_t *train_state_json(const TrainConfig *cfg, int64_t step, double epoch, int64_t total,
                         json_t *log_history) {
    json_t *s = json_object();
    json_object_set_new(s, "best_metric", json_null());
    json_object_set_new(s, "best_model_checkpoint", json_null());
    json_object_set_new(s, "epoch", json_real(epoch));
    json_object_set_new(s, "eval_steps", json_integer(cfg->eval_steps));
    json_object_set_new(s, "global_step", json_integer(step));
    json_object_set_new(s, "is_hyper_param_search", json_false());
    json_object_set_new(s, "is_local_process_zero", json_true());
    json_object_set_new(s, "is_world_process_zero", json_true());
    json_object_set(s, "log_history", log_history);
    json_object_set_new(s, "logging_steps", json_integer(cfg->logging_steps));
    json_object_set_new(s, "max_steps", json_integer(total));
    json_object_set_new(s, "num_input_tokens_seen", json_integer(0));
    json_object_set_new(s, "num_train_epochs", json_real(cfg->num_epochs));
    json_object_set_new(s, "save_steps", json_integer(cfg->save_steps));
    json_object_set_new(s, "stateful_callbacks", json_object());
    json_object_set_new(s, "total_flos", json_integer(0));
    json_object_set_new(s, "train_batch_size", json_integer(cfg->micro_batch_size));
    json_object_set_new(s, "trial_name", json_null());
    json_object_set_new(s, "trial_params", json_null());
    return s;
}

/* Over several ranks rank 0 alone looks for the checkpoint and reads it (checkpoint_load hands
 * it to the others). */
int train_state_resume(const TrainConfig *cfg, Trainer *tr, json_t *log_history, FILE *log,
                       char *out_dir, size_t out_size) {
    char dir[4096] = "";
    int found = 1;
    if (!dist_is_root()) {
        /* nothing to find: rank 0 reads the checkpoint */
    } else if (strcmp(cfg->resume_from_checkpoint, "true") == 0) {
        found = checkpoint_find_latest(cfg->output_dir, dir, sizeof dir);
        if (found == 0)
            err_set("resume_from_checkpoint: true, but %s holds no checkpoint-N directory",
                    cfg->output_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", cfg->resume_from_checkpoint);
    }
    json_t *state;
    if (checkpoint_load(found == 1 ? dir : NULL, tr, &state) != 0) return -1;
    json_t *history = json_object_get(state, "log_history");
    if (json_is_array(history)) json_array_extend(log_history, history);
    json_decref(state);
    fprintf(log, "resumed from %s at step %lld\n", dir, (long long)tr->step);
    if (out_dir) snprintf(out_dir, out_size, "%s", dir);
    return 0;
}
