#include "train/checkpoint.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "common/test_hooks.h"
#include "dist/dist.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "train/device_residency.h"
#include "train/run_record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : err_set("%s: cannot open: %s", path, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[4096];
        if (path_join(child, sizeof child, path, e->d_name) != 0) {
            rc = -1;
            break;
        }
        if (dir_exists(child) ? remove_tree(child) != 0 : unlink(child) != 0) {
            rc = err_set("%s: cannot remove: %s", child, strerror(errno));
            break;
        }
        test_hook_kill_in_removal(); /* after the first unlink: a half-removed directory */
    }
    closedir(d);
    if (rc == 0 && rmdir(path) != 0) rc = err_set("%s: cannot remove: %s", path, strerror(errno));
    return rc;
}

static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* m and v: the full moments when sharded (trainer_gather_moments). Each span's moment tensors are
 * named "<key>.<parameter name>". */
static int write_optimizer(const char *path, const Trainer *tr, float *m, float *v) {
    size_t cap = 4 * (size_t)tr->n_spans, n = 0;
    SafetensorsWriteTensor *t = xcalloc(cap ? cap : 1, sizeof *t);
    char **names = xcalloc(cap ? cap : 1, sizeof *names);
    for (int p = 0; p < tr->n_spans; p++) {
        MomentTensor mt[4];
        int k = trainer_span_moments(tr, m, v, p, mt);
        for (int i = 0; i < k; i++, n++) {
            size_t len = strlen(tr->param_names[p]) + 16;
            names[n] = xmalloc(len);
            snprintf(names[n], len, "%s.%s", mt[i].key, tr->param_names[p]);
            t[n] = (SafetensorsWriteTensor){
                names[n], mt[i].codes ? ST_U8 : ST_F32, 1, {(int64_t)mt[i].numel}, mt[i].data};
        }
    }
    int rc = safetensors_write(path, t, n);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(t);
    return rc;
}

static int write_json(const char *path, const json_t *value) {
    char *text = json_dumps(value, JSON_INDENT(2));
    if (!text) return err_set("%s: cannot serialise", path);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

/* checkpoint-N directories in output_dir with their N, sorted by N. */
typedef struct {
    int64_t step;
    char name[256]; /* a d_name fits */
} CheckpointEntry;

static int entry_cmp(const void *a, const void *b) {
    const CheckpointEntry *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

static int list_checkpoints(const char *output_dir, CheckpointEntry **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(output_dir);
    if (!d)
        return errno == ENOENT ? 0 : err_set("%s: cannot open: %s", output_dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "checkpoint-%lld%c", &step, &tail) != 1 || step < 0) continue;
        char full[4096];
        if (path_join(full, sizeof full, output_dir, e->d_name) != 0 || !dir_exists(full)) continue;
        *out = xrealloc(*out, (*n + 1) * sizeof **out);
        (*out)[*n].step = step;
        snprintf((*out)[*n].name, sizeof(*out)[*n].name, "%s", e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(*out, *n, sizeof **out, entry_cmp);
    return 0;
}

int checkpoint_find_latest(const char *output_dir, char *out, size_t cap) {
    CheckpointEntry *list;
    size_t n;
    if (list_checkpoints(output_dir, &list, &n) != 0) return -1;
    int found = n > 0;
    if (found && path_join(out, cap, output_dir, list[n - 1].name) != 0) found = -1;
    free(list);
    return found;
}

/* Hidden names under output_dir for directories that are not checkpoints (yet, or any more). A
 * kill can leave them behind; the next save sweeps them. */
static bool is_unfinished_name(const char *name) {
    size_t len = strlen(name);
    return strncmp(name, ".checkpoint-", 12) == 0 && len > 16 &&
           strcmp(name + len - 4, ".tmp") == 0;
}

static int sweep_unfinished(const char *output_dir) {
    DIR *d = opendir(output_dir);
    if (!d)
        return errno == ENOENT ? 0 : err_set("%s: cannot open: %s", output_dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        char path[4096];
        if (!is_unfinished_name(e->d_name)) continue;
        rc = path_join(path, sizeof path, output_dir, e->d_name);
        if (rc == 0) rc = remove_tree(path);
    }
    closedir(d);
    return rc;
}

/* A checkpoint leaves by an atomic rename first, so a kill while its files are being unlinked
 * never leaves a half-deleted checkpoint-N that a resume could pick. */
static int remove_checkpoint(const char *output_dir, const char *name) {
    char path[4096], gone[4200];
    if (path_join(path, sizeof path, output_dir, name) != 0) return -1;
    snprintf(gone, sizeof gone, "%s/.%s.removing.tmp", output_dir, name);
    if (remove_tree(gone) != 0) return -1;
    if (rename(path, gone) != 0)
        return err_set("%s: cannot move aside for removal: %s", path, strerror(errno));
    fsync_dir(output_dir);
    return remove_tree(gone);
}

static int rotate(const char *output_dir, int64_t keep) {
    if (keep <= 0) return 0;
    CheckpointEntry *list;
    size_t n;
    if (list_checkpoints(output_dir, &list, &n) != 0) return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && n > (size_t)keep && i < n - (size_t)keep; i++)
        rc = remove_checkpoint(output_dir, list[i].name);
    free(list);
    return rc;
}

/* output_dir's run record (train/run_record.h), when it has one, into the checkpoint: a resume
 * compares it with the config given then. */
static int copy_run_record(const char *output_dir, const char *dir) {
    char from[4200], to[4200];
    if (path_join(from, sizeof from, output_dir, RUN_RECORD_FILE) != 0 ||
        path_join(to, sizeof to, dir, RUN_RECORD_FILE) != 0)
        return -1;
    if (!file_exists(from)) return 0;
    char *text;
    size_t len;
    if (read_file(from, &text, &len) != 0) return -1;
    int rc = write_file_atomic(to, text, len);
    free(text);
    return rc;
}

/* What rank 0 does of a save: the directory, written and renamed into place. */
static int save_on_root(const CheckpointTarget *target, const Trainer *tr, const json_t *state,
                        float *m, float *v) {
    int64_t step = tr->step;
    char final_dir[4096], temp_dir[4096], path[4200];
    snprintf(final_dir, sizeof final_dir, "%s/checkpoint-%lld", target->output_dir,
             (long long)step);
    snprintf(temp_dir, sizeof temp_dir, "%s/.checkpoint-%lld.tmp", target->output_dir,
             (long long)step);
    if (sweep_unfinished(target->output_dir) != 0) return -1;
    int rc = tr->lora ? model_dir_write_adapter(tr->lora, target->model_dir, target->base_id,
                                                target->tokenizer_dir, temp_dir)
                      : model_dir_write(tr->model, target->model_dir, target->tokenizer_dir,
                                        temp_dir, ST_F32);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", temp_dir);
        rc = write_optimizer(path, tr, m, v);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/trainer_state.json", temp_dir);
        rc = write_json(path, state);
    }
    if (rc == 0) rc = copy_run_record(target->output_dir, temp_dir);
    if (rc == 0 && target->write_extra) rc = target->write_extra(target->extra_ctx, temp_dir);
    if (rc == 0 && dir_exists(final_dir)) /* a re-save of step N */
        rc = remove_checkpoint(target->output_dir, strrchr(final_dir, '/') + 1);
    if (rc == 0 && rename(temp_dir, final_dir) != 0)
        rc = err_set("%s: cannot rename into place: %s", final_dir, strerror(errno));
    if (rc != 0) {
        remove_tree(temp_dir);
        return err_prefix("saving checkpoint %lld", (long long)step);
    }
    fsync_dir(target->output_dir);
    return rotate(target->output_dir, target->save_total_limit);
}

int checkpoint_save(const CheckpointTarget *target, const Trainer *tr, const json_t *state) {
    float *m, *v;
    bool owned;
    /* weights and moments on a device: the writers below read the host copies (the step goes
     * on from the device ones) */
    device_residency_to_host(tr->resident);
    trainer_gather_moments(tr, &m, &v, &owned);
    int rc = dist_is_root() ? save_on_root(target, tr, state, m, v) : 0;
    device_residency_to_device(tr->resident);
    if (owned) free(m), free(v);
    return dist_agree(rc);
}

/* Into m and v when sharded (trainer_moment_buffers), else into the trainer's own moments. */
static int read_moments(const char *path, const Trainer *tr, float *m, float *v) {
    SafetensorsFile f;
    if (safetensors_open(&f, path) != 0) return -1;
    int rc = 0;
    for (int p = 0; rc == 0 && p < tr->n_spans; p++) {
        MomentTensor mt[4];
        int k = trainer_span_moments(tr, m, v, p, mt);
        for (int i = 0; rc == 0 && i < k; i++) {
            char name[200];
            snprintf(name, sizeof name, "%s.%s", mt[i].key, tr->param_names[p]);
            const SafetensorsTensor *t = safetensors_find(&f, name);
            if (!t || t->dtype != (mt[i].codes ? ST_U8 : ST_F32) || (size_t)t->numel != mt[i].numel)
                rc = err_set("%s: tensor \"%s\" is missing or has the wrong type or size (was the "
                             "checkpoint made with another optimizer?)",
                             path, name);
            else
                memcpy(mt[i].data, t->data, moment_tensor_bytes(&mt[i]));
        }
    }
    safetensors_close(&f);
    return rc;
}

/* The weights of a full fine-tuning checkpoint, into the model. */
static int read_weights(const char *dir, Model *m) {
    Model saved;
    if (model_load(&saved, dir) != 0) return -1;
    int rc = 0;
    if (saved.n_params != m->n_params)
        rc = err_set("%s: the checkpoint's model has %zu parameters, the configured one %zu", dir,
                     saved.n_params, m->n_params);
    else
        memcpy(m->params, saved.params, m->n_params * sizeof(float));
    model_free(&saved);
    return rc;
}

/* The adapter of a LoRA checkpoint, into the trained one: same tensors, same shapes. */
static int read_adapter(const char *dir, const Model *m, LoraAdapter *lora) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (!file_exists(path))
        return err_set("%s: no adapter_config.json: this checkpoint is not of an adapter run", dir);
    LoraAdapter saved;
    if (lora_load(&saved, &m->cfg, dir) != 0) return -1;
    int rc = 0;
    bool same = saved.n_info == lora->n_info && saved.n_params == lora->n_params &&
                saved.r == lora->r && saved.scaling == lora->scaling;
    for (int i = 0; same && i < lora->n_info; i++)
        same = strcmp(saved.info[i].name, lora->info[i].name) == 0;
    if (!same)
        rc = err_set("%s: the checkpoint's adapter (r %d, %d tensors) is not the configured one "
                     "(r %d, %d tensors, same targets and scaling expected)",
                     dir, saved.r, saved.n_info, lora->r, lora->n_info);
    else
        memcpy(lora->params, saved.params, lora->n_params * sizeof(float));
    lora_free(&saved);
    return rc;
}

/* What rank 0 does of a load: everything but handing the state to the other ranks. */
static int load_on_root(const char *dir, Trainer *tr, float *m, float *v, json_t **state) {
    char path[4200];
    if ((tr->lora ? read_adapter(dir, tr->model, tr->lora) : read_weights(dir, tr->model)) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (read_moments(path, tr, m, v) != 0) return -1;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    if (json_load_path(path, state) != 0) return -1;
    int64_t step;
    if (json_get_int64(*state, "global_step", &step) != 1 || step < 0) {
        json_decref(*state);
        *state = NULL;
        return err_set("%s: key 'global_step': missing or not a non-negative integer", path);
    }
    tr->adamw.step = step;
    tr->step = step;
    return 0;
}

int checkpoint_load(const char *dir, Trainer *tr, json_t **state) {
    *state = NULL;
    float *m, *v;
    bool owned;
    trainer_moment_buffers(tr, &m, &v, &owned);
    int rc = dist_is_root() ? (dir ? load_on_root(dir, tr, m, v, state) : -1) : 0;
    rc = dist_agree(rc);
    if (rc == 0) trainer_distribute(tr, m, v);
    if (owned) free(m), free(v);
    if (rc != 0) {
        if (*state) json_decref(*state);
        *state = NULL;
        return -1;
    }
    if (!*state) *state = json_object(); /* the log history lives on rank 0 */
    return 0;
}
