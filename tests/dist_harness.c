#include "dist_harness.h"

#include "common/fileio.h"
#include "dist/dist.h"
#include "harness.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "trained_weights.h"
#include "train/checkpoint.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

DistWorst dist_worst;

bool dist_tests_can_run(const char *test_name) {
    const char *launcher = dist_launcher();
    if (!dist_compiled() || !launcher || access(launcher, X_OK) != 0) {
        printf("%s: skipped: this build has no MPI (install libopenmpi-dev openmpi-bin and "
               "rebuild)\n",
               test_name);
        return false;
    }
    setenv("OMP_NUM_THREADS", "1", 1);
    return true;
}

double dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dist_train(const char *config, const char *out, const char *const *extra) {
    return harness_wait_child(
        harness_spawn_train(harness_tmp_path(config), out, harness_tmp_path("train.log"), extra));
}

void dist_compare_metrics(const char *name, const char *one, const char *two) {
    dist_compare_metrics_within(name, one, two, 1e-5, 1e-6);
}

void dist_compare_metrics_within(const char *name, const char *one, const char *two, double rel,
                                 double abs_tol) {
    json_t *a = harness_read_metrics(one), *b = harness_read_metrics(two);
    CHECK(json_array_size(a) > 0 && json_array_size(a) == json_array_size(b),
          "%s: %zu and %zu log lines", name, json_array_size(a), json_array_size(b));
    double worst = 0, worst_at = 0;
    const char *worst_key = "";
    for (size_t i = 0; i < json_array_size(a) && i < json_array_size(b); i++) {
        json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        CHECK(json_object_size(x) == json_object_size(y), "%s: line %zu: %zu and %zu keys", name,
              i + 1, json_object_size(x), json_object_size(y));
        const char *key;
        json_t *v;
        json_object_foreach(x, key, v) {
            json_t *w = json_object_get(y, key);
            CHECK(w != NULL, "%s: line %zu: %s missing with 2 ranks", name, i + 1, key);
            if (!w || !json_is_number(v) || strcmp(key, "step_time") == 0 ||
                strncmp(key, "time/", 5) == 0 || strncmp(key, "cpu_time/", 9) == 0)
                continue; /* wall and CPU times */
            double p = json_number_value(v), q = json_number_value(w);
            bool exact = strcmp(key, "num_tokens") == 0 || strcmp(key, "step") == 0;
            /* 1e-6 absolute: the implicit rewards are beta x a difference of two summed
             * log-probs near -20, so their rounding is relative to those, not to the difference
             * (measured: 7e-8 on an eval_rewards/chosen of -0.003); a GRPO loss is ~0 by
             * construction at some steps (ratio 1, centred advantages) */
            CHECK(exact ? p == q : harness_close(q, p, rel, abs_tol),
                  "%s: line %zu: %s %.9g with 2 ranks, %.9g in one process", name, i + 1, key, q,
                  p);
            if (fabs(p) > 1e-6 && fabs(q - p) / fabs(p) > worst)
                worst = fabs(q - p) / fabs(p), worst_at = p, worst_key = key;
        }
    }
    printf("%s: %zu log lines, worst metric difference %.2g relative (%s, %.4g)\n", name,
           json_array_size(a), worst, worst_key, worst_at);
    if (worst > dist_worst.metric) dist_worst.metric = worst;
    json_decref(a);
    json_decref(b);
}

/* The largest difference between two fp32 safetensors files' tensors, relative to each
 * tensor's largest entry (INFINITY when they do not hold the same tensors). */
static double adapter_gap(const char *a_path, const char *b_path) {
    SafetensorsFile a, b;
    if (safetensors_open(&a, a_path) != 0) return INFINITY;
    if (safetensors_open(&b, b_path) != 0) {
        safetensors_close(&a);
        return INFINITY;
    }
    double worst = a.n_tensors == b.n_tensors ? 0 : INFINITY;
    for (size_t i = 0; i < a.n_tensors && isfinite(worst); i++) {
        const SafetensorsTensor *x = &a.tensors[i], *y = safetensors_find(&b, x->name);
        if (!y || x->dtype != ST_F32 || y->dtype != ST_F32 || x->numel != y->numel) {
            worst = INFINITY;
            break;
        }
        const float *p = x->data, *q = y->data;
        double largest = 0, gap = 0;
        for (int64_t k = 0; k < x->numel; k++)
            largest = fmax(largest, fabs(p[k])), gap = fmax(gap, fabs((double)p[k] - q[k]));
        if (largest > 0) worst = fmax(worst, gap / largest);
    }
    safetensors_close(&a);
    safetensors_close(&b);
    return worst;
}

/* Full weights to 1e-5 of the largest; an adapter to 1e-4 of each tensor's largest. Why the
 * adapter's is wider: one process and 2 ranks add the micro-batches' gradients in other orders
 * (last bits), and AdamW divides each step by sqrt(v), so an entry whose gradient sits near 0
 * takes a step set by those bits. A LoRA adapter is small (B starts at 0, A at kaiming scale),
 * so one such entry shows against its tensor's largest: dr_grpo-lora-zero1 measured every entry
 * within 3e-6 of its tensor's largest but one of layer 0's o_proj lora_A at 2.5e-5 (4.4e-6
 * absolute, lr 2e-3) once training attention summed in another order (2026-11-28). A missed
 * all-reduce or a rank's stale shard moves whole tensors by far more. */
void dist_compare_outputs(const char *name, const char *one, const char *two) {
    char full[4400];
    snprintf(full, sizeof full, "%s/model.safetensors", one);
    dist_compare_outputs_within(name, one, two, file_exists(full) ? 1e-5 : 1e-4);
}

double dist_outputs_gap(const char *one, const char *two) {
    char w1[4400], w2[4400];
    snprintf(w1, sizeof w1, "%s/model.safetensors", one);
    if (file_exists(w1)) {
        double scale, gap = saved_weights_gap(one, two, &scale);
        return scale > 0 ? gap / scale : INFINITY;
    }
    snprintf(w1, sizeof w1, "%s/adapter_model.safetensors", one);
    snprintf(w2, sizeof w2, "%s/adapter_model.safetensors", two);
    return file_exists(w1) && file_exists(w2) ? adapter_gap(w1, w2) : INFINITY;
}

void dist_compare_outputs_within(const char *name, const char *one, const char *two, double bound) {
    char w1[4400];
    snprintf(w1, sizeof w1, "%s/model.safetensors", one);
    bool adapter = !file_exists(w1);
    double rel = dist_outputs_gap(one, two);
    if (!adapter) {
        CHECK(rel <= bound, "%s: final weights differ by %.3g of the largest", name, rel);
        printf("%s: final weights within %.2g of the largest\n", name, rel);
    } else { /* an adapter: the files must match as closely, checked as tensors */
        CHECK(rel <= bound, "%s: adapters differ by %.3g of a tensor's largest", name, rel);
        printf("%s: adapter within %.2g of each tensor's largest\n", name, rel);
    }
    if (rel > dist_worst.weight) dist_worst.weight = rel;
}

void dist_one_vs_two(const char *name, const char *config, const char *ga1, const char *ga2,
                     const char *const *extra) {
    char one[4096], two[4200];
    snprintf(one, sizeof one, "%s", harness_tmp_path(name));
    snprintf(two, sizeof two, "%s-2ranks", one);
    const char *a[24] = {"--gradient_accumulation_steps", ga1},
               *b[24] = {"--nproc", "2", "--gradient_accumulation_steps", ga2};
    int na = 2, nb = 4;
    for (int i = 0; extra[i]; i++)
        a[na++] = extra[i], b[nb++] = extra[i];
    a[na] = b[nb] = NULL;
    CHECK(dist_train(config, one, a) == 0, "%s: one process (see %s)", name,
          harness_tmp_path("train.log"));
    CHECK(dist_train(config, two, b) == 0, "%s: 2 ranks (see %s)", name,
          harness_tmp_path("train.log"));
    dist_compare_metrics(name, one, two);
    dist_compare_outputs(name, one, two);
}

/* CHECKs that a_dir/file and b_dir/file hold the same bytes. */
static void same_file(const char *a_dir, const char *b_dir, const char *file, const char *what) {
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/%s", a_dir, file);
    snprintf(b, sizeof b, "%s/%s", b_dir, file);
    CHECK(harness_same_file(a, b), "%s: %s and %s", what, a, b);
}

/* argv-style arguments: `head` then `tail` (both NULL-terminated) into out (room for 32). */
static void join_args(const char **out, const char *const *head, const char *const *tail) {
    int n = 0;
    for (int i = 0; head[i] && n < 31; i++)
        out[n++] = head[i];
    for (int i = 0; tail && tail[i] && n < 31; i++)
        out[n++] = tail[i];
    out[n] = NULL;
}

void dist_check_resume(const char *config, const char *ga2, const char *ga1,
                       const char *const *same) {
    char straight[4096], resumed[4096], single[4096], from[4200], to[4200];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("resume-straight"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("resume-2ranks"));
    snprintf(single, sizeof single, "%s", harness_tmp_path("resume-1proc"));
    const char *two[] = {
        "--nproc", "2", "--gradient_accumulation_steps", ga2, "--zero_stage", "1", "--save_steps",
        "2",       NULL};
    const char *resume[] = {"--resume_from_checkpoint", "true", NULL};
    const char *again[32], *one[] = {"--gradient_accumulation_steps",
                                     ga1,
                                     "--save_steps",
                                     "2",
                                     "--resume_from_checkpoint",
                                     "true",
                                     NULL};
    join_args(again, two, resume);
    CHECK(dist_train(config, straight, two) == 0, "%s: uninterrupted 2-rank run", config);
    snprintf(from, sizeof from, "%s/checkpoint-2", straight);
    CHECK(make_dirs(resumed) == 0 && make_dirs(single) == 0, "dirs");
    snprintf(to, sizeof to, "%s/checkpoint-2", resumed);
    dist_copy_tree(from, to);
    snprintf(to, sizeof to, "%s/checkpoint-2", single);
    dist_copy_tree(from, to);
    CHECK(dist_train(config, resumed, again) == 0, "%s: resumed 2-rank run", config);
    same_file(straight, resumed, "model.safetensors", "2 ranks resumed: the uninterrupted weights");
    same_file(straight, resumed, "checkpoint-6/optimizer.safetensors", "the same AdamW moments");
    for (int i = 0; same && same[i]; i++)
        same_file(straight, resumed, same[i], "resumed on 2 ranks");
    CHECK(dist_train(config, single, one) == 0, "%s: 2-rank checkpoint resumed in 1 process",
          config);
    dist_compare_outputs("resume-in-1-process", straight, single);
}

void dist_check_rank_dies(const char *config, const char *const *extra, const char *straight,
                          const char *ckpt_file) {
    char out[4096], log[4096], path[4400], latest[4200];
    snprintf(out, sizeof out, "%s", harness_tmp_path("die"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("die.log"));
    const char *nproc[] = {"--nproc", "2", NULL},
               *resume[] = {"--resume_from_checkpoint", "true", NULL};
    const char *run[32], *again[32];
    join_args(run, nproc, extra);
    join_args(again, run, resume);
    pid_t pid = harness_spawn_train(harness_tmp_path(config), out, log, run);
    snprintf(path, sizeof path, "%s/checkpoint-2", out);
    double start = dist_now();
    while (!dir_exists(path) && dist_now() - start < 60)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = dist_rank_pid(pid, 1);
    CHECK(victim > 0, "rank 1 found among mpirun's children");
    if (victim > 0) kill(victim, SIGKILL);
    double killed = dist_now();
    int rc = dist_wait_at_most(pid, 60);
    printf("%s: rank 1 killed at %.2f s; mpirun exited %d after %.2f s\n", config, killed - start,
           rc, dist_now() - killed);
    CHECK(rc > 0, "the job ends with a failure status, not a hang (%d)", rc);
    CHECK(dist_log_mentions(log, "rank 1") && dist_log_mentions(log, "signal 9"),
          "the log says rank 1 was killed (see %s)", log);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(!file_exists(path), "no final model from the killed job");
    CHECK(harness_check_checkpoints(out, NULL) >= 1, "checkpoints left whole");
    if (ckpt_file) {
        CHECK(checkpoint_find_latest(out, latest, sizeof latest) == 1, "a checkpoint left");
        snprintf(path, sizeof path, "%s/%s", latest, ckpt_file);
        CHECK(file_exists(path), "the latest checkpoint holds %s", ckpt_file);
    }
    CHECK(dist_train(config, out, again) == 0, "resumed after the kill");
    same_file(straight, out, "model.safetensors", "resumed to the uninterrupted weights");
}

void dist_copy_tree(const char *from, const char *to) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    CHECK(system(cmd) == 0, "%s", cmd);
}

pid_t dist_rank_pid(pid_t launcher, int rank) {
    DIR *d = opendir("/proc");
    pid_t found = -1;
    for (struct dirent *e; d && found < 0 && (e = readdir(d)) != NULL;) {
        char path[512], buf[8192];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *fp = fopen(path, "r");
        if (!fp) continue;
        int ppid = -1;
        /* pid (comm) state ppid: comm may hold spaces, so read after the last ')' */
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        char *close = strrchr(buf, ')');
        if (!close || sscanf(close + 1, " %*c %d", &ppid) != 1 || ppid != launcher) continue;
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        fp = fopen(path, "r");
        if (!fp) continue;
        n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        char want[64];
        int wlen = snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
        for (size_t i = 0; i + (size_t)wlen <= n; i += strlen(buf + i) + 1)
            if (strncmp(buf + i, want, (size_t)wlen + 1) == 0) found = (pid_t)atoi(e->d_name);
    }
    if (d) closedir(d);
    return found;
}

int dist_wait_at_most(pid_t pid, double seconds) {
    double end = dist_now() + seconds;
    while (dist_now() < end) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    kill(pid, SIGKILL);
    harness_wait_child(pid);
    return -1;
}

bool dist_log_mentions(const char *path, const char *what) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return false;
    bool found = strstr(text, what) != NULL;
    free(text);
    return found;
}

int dist_error_lines(const char *path) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return 0;
    int errors = 0;
    for (const char *p = text; (p = strstr(p, "rlhf: error:")) != NULL; p++)
        errors++;
    free(text);
    return errors;
}
