/* Data-parallel training over MPI (src/dist, issue 11): `rlhf train --nproc 2` (two ranks on
 * this machine) against one process on the same global batch, i.e. with twice the gradient
 * accumulation: per-step losses, grad norms and metrics, and the final weights, agree to 1e-5
 * relative for SFT (full and LoRA with dropout), DPO and KTO, with and without ZeRO-1, over data
 * whose last window and last micro-batch are short (or leave a rank nothing to run), and so do
 * the eval_ lines of held-out sets split over the ranks. A 2-rank run resumed from its checkpoint
 * ends bit for bit where the uninterrupted one does, and a 2-rank checkpoint resumes in one
 * process. A rank killed with SIGKILL takes the job down with a message and no hang, leaving whole
 * checkpoints that resume to the uninterrupted weights; SIGTERM to one rank stops every rank
 * after the same step with a checkpoint. A method that cannot run on several
 * ranks fails with one message and no hang. Skipped (exit 77) in a build without MPI. */
#include "common/fileio.h"
#include "common/json_util.h"
#include "dist/dist.h"
#include "harness.h"
#include "io/safetensors.h"
#include "trained_weights.h"
#include "train/model_dir.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A config in the temporary directory: `body` after base_model and the data line. */
static void write_config(const char *name, const char *data, const char *body) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\ndatasets:\n  - path: %s\n%ssequence_len: 64\nseed: 3\n"
             "dataset_prepared_path: %s\nlogging_steps: 1\n",
             harness_source_path("tests/fixtures/models/llama_text"), harness_tmp_path(data), body,
             harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

static void write_data(void) {
    char rows[16384];
    size_t n = 0;
    /* 21 texts in micro-batches of 2: the last micro-batch has one, and windows of 4
     * micro-batches leave a last window of 3 (rank 0 runs two of it, rank 1 one) */
    for (int i = 0; i < 21; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"text\": \"The number %d comes after %d.%.*s\"}\n", i + 1, i,
                              i % 4, " and so on");
    harness_write_file(harness_tmp_path("text.jsonl"), rows, n);
    n = 0;
    for (int i = 0; i < 18; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"prompt\": \"Q%d: %d plus %d is\", \"chosen\": \" %d.\", "
                              "\"rejected\": \" %d or so, I guess.\"}\n",
                              i, i, i + 2, 2 * i + 2, 5 * i + 1);
    harness_write_file(harness_tmp_path("pairs.jsonl"), rows, n);
    n = 0;
    for (int i = 0; i < 18; i++) {
        int good = i % 3 != 1;
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"prompt\": \"Q%d: %d plus %d is\", \"completion\": \" %d%s\", "
                              "\"label\": %s}\n",
                              i, i, i + 2, good ? 2 * i + 2 : 5 * i + 1,
                              good ? "." : " or so, I guess.", good ? "true" : "false");
    }
    harness_write_file(harness_tmp_path("rows.jsonl"), rows, n);
}

/* Runs `rlhf train config --output_dir out extra...`; its exit status. */
static int train(const char *config, const char *out, const char *const *extra) {
    return harness_wait_child(
        harness_spawn_train(harness_tmp_path(config), out, harness_tmp_path("train.log"), extra));
}

/* The metrics of two runs step by step: every number within 1e-5 relative (num_tokens exactly),
 * the same keys in each line. */
static void compare_metrics(const char *name, const char *one, const char *two) {
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
            if (!w || !json_is_number(v)) continue;
            double p = json_number_value(v), q = json_number_value(w);
            bool exact = strcmp(key, "num_tokens") == 0 || strcmp(key, "step") == 0;
            /* 1e-6 absolute: the implicit rewards are beta x a difference of two summed
             * log-probs near -20, so their rounding is relative to those, not to the difference
             * (measured: 7e-8 on an eval_rewards/chosen of -0.003) */
            CHECK(exact ? p == q : harness_close(q, p, 1e-5, 1e-6),
                  "%s: line %zu: %s %.9g with 2 ranks, %.9g in one process", name, i + 1, key, q,
                  p);
            if (fabs(p) > 1e-7 && fabs(q - p) / fabs(p) > worst)
                worst = fabs(q - p) / fabs(p), worst_at = p, worst_key = key;
        }
    }
    printf("%s: %zu log lines, worst metric difference %.2g relative (%s, %.4g)\n", name,
           json_array_size(a), worst, worst_key, worst_at);
    json_decref(a);
    json_decref(b);
}

static void compare_weights(const char *name, const char *one, const char *two) {
    double scale, gap = saved_weights_gap(one, two, &scale);
    CHECK(gap <= 1e-5 * scale, "%s: final weights differ by %.3g (largest weight %.3g)", name, gap,
          scale);
    printf("%s: final weights within %.2g of the largest\n", name, gap / scale);
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

/* One process with accumulation `ga1` against 2 ranks with half of it, each with `extra` keys. */
static void one_vs_two(const char *name, const char *config, const char *ga1, const char *ga2,
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
    CHECK(train(config, one, a) == 0, "%s: one process (see %s)", name,
          harness_tmp_path("train.log"));
    CHECK(train(config, two, b) == 0, "%s: 2 ranks (see %s)", name, harness_tmp_path("train.log"));
    compare_metrics(name, one, two);
    char w1[4400], w2[4400];
    snprintf(w1, sizeof w1, "%s/model.safetensors", one);
    if (file_exists(w1)) {
        compare_weights(name, one, two);
    } else { /* an adapter: the files must match as closely, checked as tensors */
        snprintf(w1, sizeof w1, "%s/adapter_model.safetensors", one);
        snprintf(w2, sizeof w2, "%s/adapter_model.safetensors", two);
        CHECK(file_exists(w1) && file_exists(w2), "%s: adapters written", name);
        double worst = adapter_gap(w1, w2);
        CHECK(worst <= 1e-5, "%s: adapters differ by %.3g of a tensor's largest", name, worst);
        printf("%s: adapter within %.2g of each tensor's largest\n", name, worst);
    }
}

static void test_parity(void) {
    write_config("sft.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 6\nlearning_rate: 3e-3\n"
                 "warmup_steps: 1\n");
    /* 3 held out: 18 to train are 9 micro-batches, so every epoch ends with a window of one,
     * which leaves rank 1 nothing to run; evaluation splits 2 + 1 examples over the ranks */
    write_config("sft-eval.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 6\nlearning_rate: 3e-3\n"
                 "warmup_steps: 1\nval_set_size: 3\neval_steps: 2\n");
    write_config("lora.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 4\nlearning_rate: 1e-2\n"
                 "warmup_steps: 0\nadapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.1\n"
                 "lora_target_linear: true\n");
    write_config("dpo.yaml", "pairs.jsonl",
                 "rl: dpo\nrl_beta: 0.1\nmicro_batch_size: 2\nnum_epochs: 2\n"
                 "learning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\nval_set_size: 5\n"
                 "eval_steps: 2\n");
    write_config("kto.yaml", "rows.jsonl",
                 "rl: kto\nrl_beta: 0.1\nmicro_batch_size: 3\nnum_epochs: 2\n"
                 "learning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\n"
                 "remove_unused_columns: false\n");
    const char *zero0[] = {NULL}, *zero1[] = {"--zero_stage", "1", NULL};
    one_vs_two("sft", "sft.yaml", "4", "2", zero0);
    one_vs_two("sft-zero1", "sft.yaml", "4", "2", zero1);
    one_vs_two("sft-eval", "sft-eval.yaml", "4", "2", zero0);
    one_vs_two("sft-lora-dropout-zero1", "lora.yaml", "2", "1", zero1);
    one_vs_two("dpo", "dpo.yaml", "4", "2", zero0);
    one_vs_two("dpo-zero1", "dpo.yaml", "4", "2", zero1);
    one_vs_two("kto", "kto.yaml", "2", "1", zero0);
}

static void copy_tree(const char *from, const char *to) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* A 2-rank run stopped after its checkpoint-2 and resumed (on 2 ranks, or on one with twice the
 * accumulation) continues as the uninterrupted run. */
static void test_resume(void) {
    char straight[4096], resumed[4096], single[4096];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("resume-straight"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("resume-2ranks"));
    snprintf(single, sizeof single, "%s", harness_tmp_path("resume-1proc"));
    const char *run[] = {
        "--nproc", "2", "--gradient_accumulation_steps", "2", "--zero_stage", "1", "--save_steps",
        "2",       NULL};
    CHECK(train("sft.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    /* the state of a run killed right after checkpoint-2: that checkpoint alone */
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/checkpoint-2", straight);
    CHECK(make_dirs(resumed) == 0 && make_dirs(single) == 0, "dirs");
    snprintf(to, sizeof to, "%s/checkpoint-2", resumed);
    copy_tree(from, to);
    snprintf(to, sizeof to, "%s/checkpoint-2", single);
    copy_tree(from, to);
    const char *again[] = {"--nproc",
                           "2",
                           "--gradient_accumulation_steps",
                           "2",
                           "--zero_stage",
                           "1",
                           "--save_steps",
                           "2",
                           "--resume_from_checkpoint",
                           "true",
                           NULL};
    CHECK(train("sft.yaml", resumed, again) == 0, "resumed 2-rank run");
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", resumed);
    CHECK(harness_same_file(a, b), "2 ranks resumed from checkpoint-2: the uninterrupted weights");
    snprintf(a, sizeof a, "%s/checkpoint-6/optimizer.safetensors", straight);
    snprintf(b, sizeof b, "%s/checkpoint-6/optimizer.safetensors", resumed);
    CHECK(harness_same_file(a, b), "and the same AdamW moments in checkpoint-6");
    const char *one[] = {"--gradient_accumulation_steps", "4", "--resume_from_checkpoint", "true",
                         NULL};
    CHECK(train("sft.yaml", single, one) == 0, "the 2-rank checkpoint resumed in one process");
    compare_weights("resume-in-1-process", straight, single);
}

/* The pids of mpirun's children (the ranks it started on this machine) with their rank. */
static pid_t rank_pid(pid_t launcher, int rank) {
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

/* waitpid with a deadline: the exit status, or -1 after `seconds` (the child is then killed). */
static int wait_at_most(pid_t pid, double seconds) {
    double end = now() + seconds;
    while (now() < end) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    kill(pid, SIGKILL);
    harness_wait_child(pid);
    return -1;
}

static bool log_mentions(const char *path, const char *what) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return false;
    bool found = strstr(text, what) != NULL;
    free(text);
    return found;
}

/* Rank 1 SIGKILLed mid-run (after checkpoint-2 is written): mpirun ends the job, with a message
 * naming the rank, in seconds; the checkpoints left are whole and resume to the uninterrupted
 * run's weights (in `straight`). */
static void test_rank_dies(const char *straight) {
    char out[4096], log[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("die"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("die.log"));
    const char *run[] = {"--nproc", "2", NULL};
    pid_t pid = harness_spawn_train(harness_tmp_path("long.yaml"), out, log, run);
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    double start = now();
    while (!dir_exists(ckpt) && now() - start < 60)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = rank_pid(pid, 1);
    CHECK(victim > 0, "rank 1 found among mpirun's children");
    if (victim > 0) kill(victim, SIGKILL);
    double killed = now();
    int rc = wait_at_most(pid, 60);
    printf("rank 1 killed at %.2f s; mpirun exited %d after %.2f s\n", killed - start, rc,
           now() - killed);
    CHECK(rc > 0, "the job ends with a failure status, not a hang (%d)", rc);
    CHECK(log_mentions(log, "rank 1") && log_mentions(log, "signal 9"),
          "the log says rank 1 was killed (see %s)", log);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", out);
    CHECK(!file_exists(ckpt), "no final model from the killed job");
    CHECK(harness_check_checkpoints(out, NULL) >= 1, "checkpoints left whole");
    const char *again[] = {"--nproc", "2", "--resume_from_checkpoint", "true", NULL};
    CHECK(train("long.yaml", out, again) == 0, "resumed after the kill");
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(harness_same_file(a, b), "resumed to the uninterrupted weights");
}

/* SIGTERM to rank 1 alone: every rank stops after the same step, rank 0 saves that step's
 * checkpoint, the job exits 143, and resuming ends at the uninterrupted weights. */
static void test_signal_one_rank(const char *straight) {
    char out[4096], log[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("term"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("term.log"));
    const char *run[] = {"--nproc", "2", "--save_steps", "0", NULL};
    pid_t pid = harness_spawn_train(harness_tmp_path("long.yaml"), out, log, run);
    double start = now();
    json_t *rows = NULL;
    do { /* a few steps in */
        nanosleep(&(struct timespec){0, 5000000}, NULL);
        json_decref(rows);
        rows = harness_read_metrics(out);
    } while (json_array_size(rows) < 3 && now() - start < 60);
    json_decref(rows);
    pid_t victim = rank_pid(pid, 1);
    CHECK(victim > 0, "rank 1 found");
    if (victim > 0) kill(victim, SIGTERM);
    int rc = wait_at_most(pid, 60);
    CHECK(rc == 143, "the job stops with 128 + SIGTERM (%d)", rc);
    rows = harness_read_metrics(out);
    long long last = (long long)harness_metric(rows, json_array_size(rows) - 1, "step");
    json_decref(rows);
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-%lld", out, last);
    CHECK(harness_check_checkpoints(out, NULL) == 1 && dir_exists(ckpt),
          "one whole checkpoint, of the last step logged (%lld)", last);
    const char *again[] = {"--nproc", "2", "--save_steps", "0", "--resume_from_checkpoint",
                           "true",    NULL};
    CHECK(train("long.yaml", out, again) == 0, "resumed after SIGTERM");
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(harness_same_file(a, b), "resumed to the uninterrupted weights");
}

/* A failure every rank meets (GRPO, not yet over several ranks) is reported once, and the job
 * ends; so is a config error, by --nproc before any rank starts. */
static void test_failures(void) {
    write_config("grpo.yaml", "rows.jsonl",
                 "rl: grpo\ntrl:\n  num_generations: 2\n  reward_funcs: [builtin.accuracy]\n"
                 "micro_batch_size: 2\nmax_steps: 1\nlearning_rate: 1e-3\n");
    char log[4096];
    snprintf(log, sizeof log, "%s", harness_tmp_path("fail.log"));
    const char *run[] = {"--nproc", "2", NULL};
    pid_t pid =
        harness_spawn_train(harness_tmp_path("grpo.yaml"), harness_tmp_path("grpo"), log, run);
    int rc = wait_at_most(pid, 60);
    CHECK(rc > 0, "rl: grpo on 2 ranks fails without hanging (%d)", rc);
    char *text = NULL;
    size_t len;
    CHECK(read_file(log, &text, &len) == 0, "log");
    int errors = 0;
    for (const char *p = text; p && (p = strstr(p, "rlhf: error:")) != NULL; p++)
        errors++;
    CHECK(errors == 1 && strstr(text, "several processes"), "one error line:\n%s", text);
    free(text);
    remove(log);
    const char *bad[] = {"--nproc", "2", "--zero_stage", "3", NULL};
    rc = harness_wait_child(
        harness_spawn_train(harness_tmp_path("sft.yaml"), harness_tmp_path("bad"), log, bad));
    CHECK(rc == 1 && log_mentions(log, "key 'zero_stage'") && !log_mentions(log, "mpirun"),
          "zero_stage 3: refused before launching, naming the key (%d)", rc);
}

int main(void) {
    const char *launcher = dist_launcher();
    if (!dist_compiled() || !launcher || access(launcher, X_OK) != 0) {
        printf("test_dist_train: skipped: this build has no MPI (install libopenmpi-dev "
               "openmpi-bin and rebuild)\n");
        return 77;
    }
    /* One thread per process: two ranks of one thread against one process of one thread leaves
     * the order in which the ranks' gradients are summed as the only difference (with more
     * threads, one process differs from itself on another thread count by as much) */
    setenv("OMP_NUM_THREADS", "1", 1);
    write_data();
    test_parity();
    test_resume();
    write_config("long.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 1\nmax_steps: 30\nlearning_rate: 1e-3\n"
                 "warmup_steps: 0\nsave_steps: 1\nsave_total_limit: 2\n");
    char straight[4096];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("long-straight"));
    const char *run[] = {"--nproc", "2", NULL};
    CHECK(train("long.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    test_rank_dies(straight);
    test_signal_one_rank(straight);
    test_failures();
    return harness_finish("test_dist_train");
}
