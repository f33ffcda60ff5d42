#define _XOPEN_SOURCE 700 /* nftw */
#include "train/output_dir.h"

#include "common/error.h"
#include "common/fileio.h"
#include "dist/dist.h"
#include "train/run_record.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether `name` (an entry of output_dir) is something a run writes. */
static bool is_run_file(const char *name) {
    static const char *const exact[] = {"config.json",
                                        "generation_config.json",
                                        "model.safetensors",
                                        "model.safetensors.index.json",
                                        "pytorch_model.bin",
                                        "pytorch_model.bin.index.json",
                                        "adapter_config.json",
                                        "adapter_model.safetensors",
                                        "adapter_model.bin",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "chat_template.jinja",
                                        "tokenizer.model",
                                        "vocab.json",
                                        "merges.txt",
                                        "added_tokens.json",
                                        "training_args.bin",
                                        "trainer_state.json",
                                        "all_results.json",
                                        "train_results.json",
                                        "eval_results.json",
                                        "metrics.jsonl",
                                        "completions.jsonl",
                                        "runs",
                                        RUN_RECORD_FILE};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(name, exact[i]) == 0) return true;
    size_t len = strlen(name);
    if (strncmp(name, "model-", 6) == 0 && len > 12 && strcmp(name + len - 12, ".safetensors") == 0)
        return true; /* shards */
    if (strncmp(name, "checkpoint-", 11) == 0 || strncmp(name, ".checkpoint-", 12) == 0)
        return true;
    return false;
}

typedef struct {
    char **names;
    int n;
} RunFiles;

static void run_files_free(RunFiles *f) {
    for (int i = 0; i < f->n; i++)
        free(f->names[i]);
    free(f->names);
    memset(f, 0, sizeof *f);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The run files in dir, sorted (none when dir does not exist). */
static int list_run_files(const char *dir, RunFiles *out) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : err_set("%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_run_file(e->d_name)) continue;
        out->names = xrealloc(out->names, (size_t)(out->n + 1) * sizeof *out->names);
        out->names[out->n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (out->n) qsort(out->names, (size_t)out->n, sizeof *out->names, cmp_names);
    return 0;
}

/* "a, b, c" (at most a dozen, then how many more). */
static void join_names(const RunFiles *f, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < f->n && len < cap; i++) {
        if (i == 12) {
            snprintf(buf + len, cap - len, " and %d more", f->n - 12);
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", f->names[i]);
    }
}

static bool removal_failed; /* remove_entry set the error */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    if (remove(path) == 0) return 0;
    removal_failed = true;
    return err_set("%s: cannot remove: %s", path, strerror(errno));
}

/* Removes the run files of dir (directories with what is in them). */
static int remove_run_files(const char *dir, const RunFiles *f) {
    for (int i = 0; i < f->n; i++) {
        char path[4200];
        if (path_join(path, sizeof path, dir, f->names[i]) != 0) return -1;
        removal_failed = false;
        if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
            return removal_failed ? -1 : err_set("%s: cannot remove: %s", path, strerror(errno));
    }
    return 0;
}

/* Why the files in dir are another run's, into why; 0 when they are this run's (`now`). */
static int other_run(const char *dir, const RunFiles *files, const json_t *now, char *why,
                     size_t cap) {
    json_t *was = NULL;
    int found = run_record_read(dir, &was);
    if (found < 0) return -1;
    if (found == 0) {
        snprintf(why, cap, "files of a run with no %s to say which config wrote them",
                 RUN_RECORD_FILE);
        (void)files;
        return 1;
    }
    if (run_record_same_run(was, now)) {
        json_decref(was);
        return 0;
    }
    char diff[2048];
    int n = run_record_diff(was, now, NULL, 0, diff, sizeof diff);
    snprintf(why, cap, "a run of another config (config hash %s, this one %s; it differs in %s)",
             json_string_value(json_object_get(was, "config_hash")),
             json_string_value(json_object_get(now, "config_hash")),
             n ? diff : "keys no longer recorded");
    json_decref(was);
    return 1;
}

static int prepare(const TrainConfig *cfg, FILE *log) {
    const char *dir = cfg->output_dir;
    json_t *now = run_record_make(cfg);
    RunFiles files;
    int rc = list_run_files(dir, &files);
    /* a record alone is a run that failed before it wrote anything: nothing to keep */
    bool record_only = files.n == 1 && strcmp(files.names[0], RUN_RECORD_FILE) == 0;
    if (rc == 0 && files.n && !record_only && !cfg->resume_from_checkpoint) {
        char why[3072], names[2048];
        int other = other_run(dir, &files, now, why, sizeof why);
        if (other < 0) {
            rc = -1;
        } else if (other && !cfg->overwrite_output_dir) {
            join_names(&files, names, sizeof names);
            rc = err_set("output_dir %s holds another run: %s. There: %s. To replace that run, "
                         "run again with --overwrite_output_dir true (it removes those files "
                         "first); to keep it, give this run another directory (--output_dir "
                         "DIR)",
                         dir, why, names);
        } else if (other) {
            join_names(&files, names, sizeof names);
            rc = remove_run_files(dir, &files);
            if (rc == 0)
                fprintf(log,
                        "overwrite_output_dir: removed the previous run's files from %s (%s)\n",
                        dir, names);
        }
    }
    run_files_free(&files);
    json_decref(now);
    return rc;
}

static int write_record(const TrainConfig *cfg) {
    json_t *now = run_record_make(cfg);
    int rc = make_dirs(cfg->output_dir);
    if (rc == 0) rc = run_record_write(cfg->output_dir, now);
    json_decref(now);
    return rc;
}

int output_dir_write_record(const TrainConfig *cfg) {
    return dist_agree(dist_is_root() ? write_record(cfg) : 0);
}

int output_dir_prepare(const TrainConfig *cfg, FILE *log) {
    return dist_agree(dist_is_root() ? prepare(cfg, log) : 0);
}
