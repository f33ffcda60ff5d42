/* Faults in a training run, through the `rlhf train` binary: a step with a NaN gradient is
 * skipped (weights and optimizer state untouched, a warning naming it, skipped_steps counted), a
 * run that diverges stops after max_consecutive_bad_steps with its checkpoints intact, SIGTERM
 * stops a run with a checkpoint from which it resumes to the weights of an uninterrupted run,
 * a save that cannot be written (disk full) fails clearly with the previous checkpoint intact, and
 * a kill while an old checkpoint is being removed leaves no half-removed checkpoint behind.
 */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char fixture[4096];

static void write_text(const char *path, const char *text) {
    harness_write_file(path, text, strlen(text));
}

/* 16 look-alike lines and one odd one out, whose rare tokens occur nowhere else. */
#define N_LINES 17
static const char *line(int i, char *buf, size_t size) {
    if (i == 11) return "Quixotic zebras juggle marmalade vigorously.";
    snprintf(buf, size, "The number %d comes after %d.", i + 1, i);
    return buf;
}

static void write_dataset(const char *path) {
    char text[8192], buf[128];
    size_t n = 0;
    for (int i = 0; i < N_LINES; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"text\": \"%s\"}\n",
                              line(i, buf, sizeof buf));
    write_text(path, text);
}

static void write_config(const char *name, const char *model, const char *extra) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\n"
             "sequence_len: 64\nmicro_batch_size: 4\nlearning_rate: 3e-3\nwarmup_steps: 1\n"
             "logging_steps: 1\nseed: 7\ndataset_prepared_path: %s\n%s",
             model, harness_tmp_path("data.jsonl"), harness_tmp_path("prepared"), extra);
    write_text(harness_tmp_path(name), text);
}

static bool same_in(const char *out, int a, int b, const char *file) {
    char pa[4300], pb[4300];
    snprintf(pa, sizeof pa, "%s/checkpoint-%d/%s", out, a, file);
    snprintf(pb, sizeof pb, "%s/checkpoint-%d/%s", out, b, file);
    return harness_same_file(pa, pb);
}

static bool log_has(const char *log_path, const char *text) {
    char *log = NULL;
    bool found = read_file(log_path, &log, NULL) == 0 && log && strstr(log, text);
    free(log);
    return found;
}

/* 17 lines, 5 steps an epoch, 2 epochs; steps 3 and 8 get a NaN gradient (as a batch that
 * overflows would: a NaN in a model file is refused at load) and are skipped. */
static void test_nan_step_skipped(void) {
    char out[4096], log[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("nan-run"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("nan.log"));
    write_config("nan.yaml", fixture, "num_epochs: 2\nsave_steps: 1\n");
    const char *none[] = {NULL};
    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "3,8", 1);
    pid_t pid = harness_spawn_train(harness_tmp_path("nan.yaml"), out, log, none);
    unsetenv("RLHF_FAULT_NAN_GRAD_STEPS");
    int rc = harness_wait_child(pid);
    CHECK(rc == 0, "the run with NaN steps completes: exit %d", rc);
    json_t *rows = harness_read_metrics(out);
    CHECK(json_array_size(rows) == 10, "%zu metrics rows for 10 steps", json_array_size(rows));
    int skipped = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        int step = (int)json_integer_value(json_object_get(row, "step"));
        bool bad = json_is_null(json_object_get(row, "grad_norm"));
        CHECK(bad == (step == 3 || step == 8), "step %d: grad_norm %s", step,
              bad ? "null" : "finite");
        if (bad) {
            skipped++;
            char want[64];
            snprintf(want, sizeof want, "warning: step %d skipped", step);
            CHECK(log_has(log, want), "the log names skipped step %d", step);
            CHECK(same_in(out, step - 1, step, "model.safetensors"),
                  "step %d skipped: weights untouched", step);
            CHECK(same_in(out, step - 1, step, "optimizer.safetensors"),
                  "step %d skipped: AdamW moments untouched", step);
        } else {
            CHECK(isfinite(harness_metric(rows, i, "loss")), "step %d: a finite loss", step);
            if (step > 1)
                CHECK(!same_in(out, step - 1, step, "model.safetensors"),
                      "step %d trained: the weights move", step);
        }
        CHECK((int)harness_metric(rows, i, "skipped_steps") == skipped,
              "step %d: skipped_steps %g, %d so far", step,
              harness_metric(rows, i, "skipped_steps"), skipped);
    }
    CHECK(skipped == 2, "%d steps skipped, expected 2", skipped);
    json_decref(rows);
}

/* lr 1e30 sends the weights to overflow after step 1: every later step is non-finite, and the
 * run stops after 3 of them without writing the third's checkpoint. */
static void test_divergence_stops(void) {
    char out[4096], log[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("diverged"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("diverged.log"));
    write_config("diverge.yaml", fixture,
                 "max_steps: 10\nsave_steps: 1\nmax_consecutive_bad_steps: 3\n");
    const char *kv[] = {"--learning_rate", "1e30", "--warmup_steps", "0", NULL};
    int rc =
        harness_wait_child(harness_spawn_train(harness_tmp_path("diverge.yaml"), out, log, kv));
    CHECK(rc == 1, "a diverged run fails: exit %d", rc);
    CHECK(log_has(log, "3 consecutive steps (2 to 4)") && log_has(log, "max_consecutive_bad_steps"),
          "the error names the streak and the key");
    char path[4300];
    snprintf(path, sizeof path, "%s/checkpoint-4", out);
    CHECK(!dir_exists(path), "no checkpoint at the stopping step");
    CHECK(same_in(out, 1, 3, "model.safetensors"), "checkpoint-3 holds step 1's weights");
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(!file_exists(path), "no final model");
}

/* SIGTERM once the first step is logged: exit 143 with a checkpoint at the step reached; a
 * resumed run then ends with the weights of an uninterrupted one. */
static void test_sigterm_resumes(void) {
    char straight[4096], stopped[4096], log[4096], a[4300], b[4300];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("straight"));
    snprintf(stopped, sizeof stopped, "%s", harness_tmp_path("stopped"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("term.log"));
    write_config("term.yaml", fixture, "max_steps: 60\n");
    const char *none[] = {NULL};
    const char *cfg = harness_tmp_path("term.yaml");
    CHECK(harness_wait_child(harness_spawn_train(cfg, straight, log, none)) == 0, "straight run");

    pid_t pid = harness_spawn_train(cfg, stopped, log, none);
    char metrics[4300];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", stopped);
    for (int i = 0; i < 20000; i++) { /* up to 20 s for the first step */
        struct stat st;
        if (stat(metrics, &st) == 0 && st.st_size > 0) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    kill(pid, SIGTERM);
    int rc = harness_wait_child(pid);
    CHECK(rc == 143, "SIGTERM: exit %d, expected 143", rc);
    json_t *rows = harness_read_metrics(stopped);
    int64_t reached = (int64_t)harness_metric(rows, json_array_size(rows) - 1, "step");
    json_decref(rows);
    CHECK(reached >= 1 && reached < 60, "stopped at step %lld", (long long)reached);
    snprintf(a, sizeof a, "%s/checkpoint-%lld", stopped, (long long)reached);
    CHECK(dir_exists(a), "checkpoint-%lld saved on SIGTERM (save_steps 0)", (long long)reached);
    CHECK(log_has(log, "interrupted by SIGTERM"), "the log says why it stopped");

    const char *resume[] = {"--resume_from_checkpoint", "true", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, stopped, log, resume)) == 0, "resumed run");
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", stopped);
    CHECK(harness_same_file(a, b), "stopped at %lld + resumed = the uninterrupted weights",
          (long long)reached);
}

/* Every file under dir whose name contains ".tmp" (an unfinished write left behind). */
static int temp_files_in(const char *dir) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '*.tmp*')\"", dir);
    return system(cmd) == 0 ? 0 : 1;
}

/* A save that cannot be written (the disk fills up: here the file-size limit, which fails the
 * same writes with EFBIG as a full disk does with ENOSPC): the run stops with an error naming
 * the checkpoint, the previous checkpoint and final model are untouched, nothing half-written
 * stays, and a resumed run ends with the weights of an uninterrupted one. */
static void test_disk_full_keeps_checkpoint(void) {
    char straight[4096], out[4096], log[4096], a[4300], b[4300];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("full-straight"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("full"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("full.log"));
    write_config("full.yaml", fixture, "save_steps: 2\n");
    char cfg[4096]; /* harness_tmp_path's buffers are reused */
    snprintf(cfg, sizeof cfg, "%s", harness_tmp_path("full.yaml"));
    const char *four[] = {"--max_steps", "4", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, straight, log, four)) == 0, "straight run");
    const char *two[] = {"--max_steps", "2", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, out, log, two)) == 0, "first 2 steps");
    snprintf(a, sizeof a, "%s/checkpoint-2", out);
    snprintf(b, sizeof b, "%s", harness_tmp_path("checkpoint-2.before"));
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s' && cp '%s/model.safetensors' '%s.model'", a, b, out,
             b);
    CHECK(system(cmd) == 0, "keep a copy of checkpoint-2");

    snprintf(a, sizeof a, "%s/model.safetensors", out);
    struct stat st;
    CHECK(stat(a, &st) == 0, "the model file");
    struct rlimit old, small = {(rlim_t)st.st_size / 2, 0};
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN); /* writes past the limit fail with EFBIG instead of a signal */
    const char *resume4[] = {"--max_steps", "4", "--resume_from_checkpoint", "true", NULL};
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    pid_t pid = harness_spawn_train(cfg, out, log, resume4);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0, "restore the limit");
    int rc = harness_wait_child(pid);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(rc == 1, "a save that cannot be written fails the run: exit %d", rc);
    CHECK(log_has(log, "rlhf: error: saving checkpoint 4: ") && log_has(log, "File too large"),
          "the error names the checkpoint and the cause");
    snprintf(a, sizeof a, "%s/checkpoint-4", out);
    CHECK(!dir_exists(a), "no checkpoint-4");
    CHECK(temp_files_in(out) == 0, "no half-written file left in %s", out);
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors",
                                        "trainer_state.json", "config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(a, sizeof a, "%s/checkpoint-2/%s", out, files[i]);
        snprintf(b, sizeof b, "%s/%s", harness_tmp_path("checkpoint-2.before"), files[i]);
        CHECK(harness_same_file(a, b), "checkpoint-2/%s intact", files[i]);
    }
    snprintf(a, sizeof a, "%s/model.safetensors", out);
    snprintf(b, sizeof b, "%s.model", harness_tmp_path("checkpoint-2.before"));
    CHECK(harness_same_file(a, b), "the final model of the first run intact");

    CHECK(harness_wait_child(harness_spawn_train(cfg, out, log, resume4)) == 0, "resumed run");
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(harness_same_file(a, b), "resumed after the failed save = the uninterrupted weights");
}

/* save_total_limit 1: each save removes the previous checkpoint. A kill in the middle of that
 * removal (RLHF_FAULT_KILL_IN_REMOVAL: right after its first file is unlinked) leaves only whole
 * checkpoints, and the resumed run sweeps the leftovers and ends with the uninterrupted weights. */
static void test_kill_during_rotation(void) {
    char straight[4096], out[4096], log[4096], cfg[4096], a[4300], b[4300];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("rotate-straight"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("rotate"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("rotate.log"));
    write_config("rotate.yaml", fixture, "max_steps: 4\nsave_steps: 1\nsave_total_limit: 1\n");
    snprintf(cfg, sizeof cfg, "%s", harness_tmp_path("rotate.yaml"));
    const char *none[] = {NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, straight, log, none)) == 0, "straight run");

    setenv("RLHF_FAULT_KILL_IN_REMOVAL", "1", 1);
    int rc = harness_wait_child(harness_spawn_train(cfg, out, log, none));
    unsetenv("RLHF_FAULT_KILL_IN_REMOVAL");
    CHECK(rc == 128 + SIGKILL, "killed while removing checkpoint-1: exit %d", rc);
    int temp = 0;
    CHECK(harness_check_checkpoints(out, &temp) == 1, "one checkpoint left, and it is whole");
    snprintf(a, sizeof a, "%s/checkpoint-2", out);
    CHECK(dir_exists(a), "checkpoint-2 saved before the kill");
    CHECK(temp == 1, "the half-removed checkpoint-1 is out of the way (%d hidden entries)", temp);

    const char *resume[] = {"--resume_from_checkpoint", "true", NULL};
    CHECK(harness_wait_child(harness_spawn_train(cfg, out, log, resume)) == 0, "resumed run");
    CHECK(temp_files_in(out) == 0, "the next save swept the leftovers");
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(harness_same_file(a, b), "killed in a removal + resumed = the uninterrupted weights");
}

int main(void) {
    snprintf(fixture, sizeof fixture, "%s",
             harness_source_path("tests/fixtures/models/llama_text"));
    write_dataset(harness_tmp_path("data.jsonl"));
    test_nan_step_skipped();
    test_divergence_stops();
    test_sigterm_resumes();
    test_disk_full_keeps_checkpoint();
    test_kill_during_rotation();
    return harness_finish("test_train_faults");
}
