/* include/rlhf.h over the training session (train/session.h): a trainer is a parsed config, a
 * loaded session and what its last run left behind. */
#include "rlhf.h"

#include "common/error.h"
#include "config/train_config.h"
#include "io/hub_python.h"
#include "io/hub_resolve.h"
#include "python/py_embed.h"
#include "train/hub_push.h"
#include "train/stop_signal.h"
#include "train/session.h"
#include "train/train_device.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rlhf_trainer {
    TrainConfig cfg;
    TrainSession session;
    RewardCallbacks rewards;
    void *rollout;        /* a Python callable (rlhf_trainer_set_python_rollout); NULL: none */
    TrainOutcome outcome; /* the last run's; log_history NULL before any */
    json_t *train_output; /* the last completed run's TrainOutput; NULL: none yet */
    char *state_text;     /* what rlhf_trainer_state returned last */
    char *push_url;       /* what rlhf_trainer_push_to_hub returned last */
};

/* Signals and the stop flag are process-wide: one training at a time. */
static atomic_bool training;

int rlhf_api_version(void) {
    return RLHF_API_VERSION;
}

const char *rlhf_python_version(void) {
    return py_embed_version();
}

const char *rlhf_last_error(void) {
    return err_msg();
}

int rlhf_trainer_create(const char *config, const char *name, rlhf_trainer **out) {
    if (!out) return err_set("rlhf_trainer_create: out is NULL"), RLHF_ERROR;
    *out = NULL;
    if (!config) return err_set("rlhf_trainer_create: config is NULL"), RLHF_ERROR;
#ifdef RLHF_WITH_CUDA
    train_device_register_linked(); /* device: cuda (cli/train_devices.c, linked in) */
#endif
    rlhf_trainer *t = xcalloc(1, sizeof *t);
    if (train_config_load_text(&t->cfg, config, name ? name : "<config>") != 0) {
        free(t);
        return RLHF_ERROR;
    }
    /* push_to_hub: the repository exists before anything is trained (Trainer's init_hf_repo) */
    if (train_config_resolve_models(&t->cfg) != 0 || train_memory_plan(&t->cfg, stderr) != 0 ||
        hub_push_init(&t->cfg, stderr) != 0 ||
        train_session_open(&t->session, &t->cfg, stderr) != 0) {
        train_config_free(&t->cfg);
        free(t);
        return RLHF_ERROR;
    }
    *out = t;
    return RLHF_OK;
}

static void release_callback(RewardCallback *cb) {
    free(cb->name);
    py_embed_release(cb->python);
    memset(cb, 0, sizeof *cb);
}

void rlhf_trainer_free(rlhf_trainer *t) {
    if (!t) return;
    for (int i = 0; i < t->rewards.n; i++)
        release_callback(&t->rewards.items[i]);
    free(t->rewards.items);
    py_embed_release(t->rollout);
    json_decref(t->outcome.log_history);
    json_decref(t->train_output);
    free(t->state_text);
    free(t->push_url);
    train_session_close(&t->session);
    train_config_free(&t->cfg);
    free(t);
}

size_t rlhf_trainer_warning_count(const rlhf_trainer *t) {
    return t ? (size_t)t->cfg.n_warnings : 0;
}

const char *rlhf_trainer_warning(const rlhf_trainer *t, size_t i) {
    return t && i < (size_t)t->cfg.n_warnings ? t->cfg.warnings[i] : NULL;
}

/* The slot for `name`: the one already registered under it (emptied), or a new one. */
static RewardCallback *callback_slot(rlhf_trainer *t, const char *name) {
    for (int i = 0; i < t->rewards.n; i++)
        if (strcmp(t->rewards.items[i].name, name) == 0) {
            release_callback(&t->rewards.items[i]);
            return &t->rewards.items[i];
        }
    t->rewards.items =
        xrealloc(t->rewards.items, (size_t)(t->rewards.n + 1) * sizeof(RewardCallback));
    RewardCallback *cb = &t->rewards.items[t->rewards.n++];
    memset(cb, 0, sizeof *cb);
    return cb;
}

int rlhf_trainer_set_reward(rlhf_trainer *t, const char *name, rlhf_reward_fn fn, void *user_data) {
    if (!t || !name || !*name || !fn)
        return err_set("rlhf_trainer_set_reward: a trainer, a name and a function are required"),
               RLHF_ERROR;
    RewardCallback *cb = callback_slot(t, name);
    cb->name = xstrdup(name);
    cb->fn = fn;
    cb->user_data = user_data;
    return RLHF_OK;
}

int rlhf_trainer_set_python_reward(rlhf_trainer *t, const char *name, void *callable) {
    if (!t || !name || !*name || !callable)
        return err_set("rlhf_trainer_set_python_reward: a trainer, a name and a callable are "
                       "required"),
               RLHF_ERROR;
    /* (a build without Python is refused by py_embed_keep_callable, saying so) */
    if (py_embed_compiled() && !py_embed_hosted())
        return err_set("rlhf_trainer_set_python_reward: reward function %s: the library is not "
                       "running inside a Python interpreter",
                       name),
               RLHF_ERROR;
    char what[300];
    snprintf(what, sizeof what, "reward function %.250s", name);
    if (py_embed_keep_callable(callable, what) != 0) return RLHF_ERROR;
    RewardCallback *cb = callback_slot(t, name);
    cb->name = xstrdup(name);
    cb->python = callable;
    return RLHF_OK;
}

int rlhf_trainer_set_python_rollout(rlhf_trainer *t, void *callable) {
    if (!t || !callable)
        return err_set("rlhf_trainer_set_python_rollout: a trainer and a callable are required"),
               RLHF_ERROR;
    if (py_embed_compiled() && !py_embed_hosted())
        return err_set("rlhf_trainer_set_python_rollout: the library is not running inside a "
                       "Python interpreter"),
               RLHF_ERROR;
    if (py_embed_keep_callable(callable, "rollout function") != 0) return RLHF_ERROR;
    py_embed_release(t->rollout);
    t->rollout = callable;
    return RLHF_OK;
}

/* HF's TrainOutput of a completed run, and the summary entry its Trainer appends to
 * log_history. */
static void record_train_output(rlhf_trainer *t) {
    const TrainOutcome *o = &t->outcome;
    double loss = o->loss_steps ? o->loss_sum / (double)o->loss_steps : 0.0;
    int64_t steps = o->global_step - o->first_step;
    double runtime = o->seconds;
    json_t *metrics = json_pack(
        "{s:f,s:f,s:f,s:f}", "train_runtime", runtime, "train_steps_per_second",
        runtime > 0 ? (double)steps / runtime : 0.0, "train_loss", loss, "epoch", o->epoch);
    json_decref(t->train_output);
    t->train_output = json_pack("{s:I,s:f,s:O}", "global_step", (json_int_t)o->global_step,
                                "training_loss", loss, "metrics", metrics);
    if (o->log_history) {
        json_t *summary = json_deep_copy(metrics);
        json_object_set_new(summary, "step", json_integer(o->global_step));
        json_array_append_new(o->log_history, summary);
    }
    json_decref(metrics);
}

/* Sets cfg.resume_from_checkpoint for one run; *saved keeps the config's own value. */
static void swap_resume(TrainConfig *cfg, const char *resume, char **saved) {
    *saved = cfg->resume_from_checkpoint;
    cfg->resume_from_checkpoint = resume && *resume ? xstrdup(resume) : NULL;
}

int rlhf_trainer_train(rlhf_trainer *t, const char *resume_from_checkpoint, unsigned flags) {
    if (!t) return err_set("rlhf_trainer_train: trainer is NULL"), RLHF_ERROR;
    bool expected = false;
    if (!atomic_compare_exchange_strong(&training, &expected, true))
        return err_set("another training is running in this process (one at a time: signals and "
                       "the stop request are process-wide)"),
               RLHF_ERROR;
    char *config_resume = NULL;
    if (resume_from_checkpoint) swap_resume(&t->cfg, resume_from_checkpoint, &config_resume);
    json_decref(t->outcome.log_history);
    memset(&t->outcome, 0, sizeof t->outcome);
    bool handlers = !(flags & RLHF_TRAIN_NO_SIGNAL_HANDLERS);
    if (handlers)
        stop_signal_install();
    else
        stop_signal_clear();
    TrainHooks hooks = {.rewards = &t->rewards, .rollout = t->rollout, .outcome = &t->outcome};
    int rc = train_session_run(&t->session, &t->cfg, &hooks, stderr);
    int sig = stop_signal_received();
    if (handlers) stop_signal_uninstall();
    stop_signal_clear(); /* a request that came after the last step must not stop the next run */
    if (resume_from_checkpoint) {
        free(t->cfg.resume_from_checkpoint);
        t->cfg.resume_from_checkpoint = config_resume;
    }
    atomic_store(&training, false);
    if (rc == 0) {
        record_train_output(t);
        return RLHF_OK;
    }
    /* stopped by the stop flag: the loop saved a checkpoint and said so in the message */
    return sig && strncmp(err_msg(), "interrupted by ", 15) == 0 ? RLHF_INTERRUPTED : RLHF_ERROR;
}

void rlhf_request_stop(void) {
    stop_signal_request();
}

const char *rlhf_trainer_state(rlhf_trainer *t) {
    if (!t) return NULL;
    const TrainOutcome *o = &t->outcome;
    json_t *history = o->log_history ? json_incref(o->log_history) : json_array();
    json_t *state = json_pack("{s:I,s:I,s:f,s:o,s:O}", "global_step", (json_int_t)o->global_step,
                              "max_steps", (json_int_t)o->max_steps, "epoch",
                              isfinite(o->epoch) ? o->epoch : 0.0, "log_history", history,
                              "train_output", t->train_output ? t->train_output : json_null());
    if (!state) return NULL;
    free(t->state_text);
    t->state_text = json_dumps(state, JSON_COMPACT);
    json_decref(state);
    return t->state_text;
}

int rlhf_trainer_save_model(rlhf_trainer *t, const char *dir) {
    if (!t || !dir || !*dir)
        return err_set("rlhf_trainer_save_model: a trainer and a directory are required"),
               RLHF_ERROR;
    return train_session_save(&t->session, &t->cfg, dir, stderr) == 0 ? RLHF_OK : RLHF_ERROR;
}

int rlhf_trainer_push_to_hub(rlhf_trainer *t, const char *dir, const char *repo_id,
                             int private_repo, const char *revision, const char *commit_message,
                             const char *token, const char **url) {
    if (url) *url = NULL;
    if (!t || !dir || !*dir || !repo_id || !*repo_id)
        return err_set("rlhf_trainer_push_to_hub: a trainer, a directory and a repository id are "
                       "required"),
               RLHF_ERROR;
    if (!hub_is_repo_id(repo_id))
        return err_set("push_to_hub: '%s' is not a Hub repository id (org/name)", repo_id),
               RLHF_ERROR;
    HubUpload u = {.repo_id = repo_id,
                   .revision = revision,
                   .commit_message = "",
                   .private_repo = private_repo,
                   .token = token};
    char buf[1024];
    if (hub_python_upload(&u, buf, sizeof buf) != 0) return RLHF_ERROR; /* create */
    u.folder = dir;
    u.commit_message = commit_message ? commit_message : "End of training";
    if (hub_python_upload(&u, buf, sizeof buf) != 0) return RLHF_ERROR;
    free(t->push_url);
    t->push_url = xstrdup(buf);
    if (url) *url = t->push_url;
    return RLHF_OK;
}

size_t rlhf_trainer_param_count(const rlhf_trainer *t) {
    if (!t) return 0;
    const TrainSession *s = &t->session;
    return (size_t)s->model.n_param_tensors + (s->has_lora ? (size_t)s->lora.n_info : 0);
}

int rlhf_trainer_param_info(const rlhf_trainer *t, size_t i, rlhf_param_info *info) {
    if (!t || !info) return err_set("rlhf_trainer_param_info: trainer or info is NULL"), RLHF_ERROR;
    size_t count = rlhf_trainer_param_count(t);
    if (i >= count)
        return err_set("parameter %zu does not exist (the trainer holds %zu)", i, count),
               RLHF_ERROR;
    const TrainSession *s = &t->session;
    size_t n_base = (size_t)s->model.n_param_tensors;
    if (i < n_base) {
        const ParamInfo *p = &s->model.param_info[i];
        *info = (rlhf_param_info){.name = p->name,
                                  .ndim = p->ndim,
                                  .shape = {p->shape[0], p->ndim > 1 ? p->shape[1] : 0},
                                  .numel = p->numel,
                                  .trainable = !s->has_lora};
    } else {
        const LoraParamInfo *p = &s->lora.info[i - n_base];
        *info = (rlhf_param_info){.name = p->name,
                                  .ndim = 2,
                                  .shape = {p->shape[0], p->shape[1]},
                                  .numel = p->numel,
                                  .trainable = 1};
    }
    return RLHF_OK;
}

int rlhf_trainer_param_read(const rlhf_trainer *t, size_t i, float *out, size_t n) {
    rlhf_param_info info;
    if (rlhf_trainer_param_info(t, i, &info) != RLHF_OK) return RLHF_ERROR;
    if (!out || n != info.numel)
        return err_set("parameter %s holds %zu values; the buffer given holds %zu", info.name,
                       info.numel, out ? n : 0),
               RLHF_ERROR;
    const TrainSession *s = &t->session;
    size_t n_base = (size_t)s->model.n_param_tensors;
    const float *src = i < n_base ? s->model.params + s->model.param_info[i].offset
                                  : s->lora.params + s->lora.info[i - n_base].offset;
    memcpy(out, src, n * sizeof *out);
    return RLHF_OK;
}
