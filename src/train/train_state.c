#include "train/train_state.h"

#include "common/error.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/run_record.h"

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

/* The checkpoint's run record against this config: keys that change what is trained must be
 * the same (else an error naming each, with both values); the length of the run (max_steps,
 * num_epochs) may change, with a note. A checkpoint without a record (written before records
 * existed, or by an embedding program) gets a note. */
static int check_checkpoint_config(const TrainConfig *cfg, const char *dir, FILE *log) {
    json_t *was = NULL;
    int found = run_record_read(dir, &was);
    if (found < 0) return -1;
    if (found == 0) {
        fprintf(log, "note: %s has no %s, so its config cannot be compared with this one\n", dir,
                RUN_RECORD_FILE);
        return 0;
    }
    json_t *now = run_record_make(cfg);
    static const char *const length[] = {"max_steps", "num_epochs"};
    char diff[3072];
    int rc = 0;
    if (run_record_diff(was, now, length, 2, diff, sizeof diff) > 0)
        rc = err_set("resume_from_checkpoint: %s was written by a run of another config: it "
                     "differs in %s. Resume with the checkpoint's values, or start a new run "
                     "(another output_dir, or --overwrite_output_dir true without "
                     "resume_from_checkpoint)",
                     dir, diff);
    else if (!run_record_same_run(was, now) &&
             run_record_diff(was, now, NULL, 0, diff, sizeof diff) > 0)
        fprintf(log, "note: resuming %s with a new length: %s\n", dir, diff);
    json_decref(was);
    json_decref(now);
    return rc;
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
    if (found == 1 && dist_is_root() && check_checkpoint_config(cfg, dir, log) != 0)
        found = -1; /* every rank learns it from checkpoint_load */
    json_t *state;
    if (checkpoint_load(found == 1 ? dir : NULL, tr, &state) != 0) return -1;
    json_t *history = json_object_get(state, "log_history");
    if (json_is_array(history)) json_array_extend(log_history, history);
    json_decref(state);
    fprintf(log, "resumed from %s at step %lld\n", dir, (long long)tr->step);
    if (out_dir) snprintf(out_dir, out_size, "%s", dir);
    return 0;
}
