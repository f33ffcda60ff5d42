/* kill -9 at random moments: `rlhf train` with save_steps 1 is SIGKILLed mid-run (mid-step or
 * mid-checkpoint-write, wherever the seeded delay lands), resumed with resume_from_checkpoint:
 * true, killed again, ... and finally left to finish. Its model.safetensors must equal an
 * uninterrupted run's byte for byte, and after every kill each checkpoint-N in output_dir must be
 * complete (checkpoint.h, invariant 1). RLHF_CRASH_POINTS sets the number of kills (4 by
 * default), RLHF_CRASH_SEED the draw. */
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool has_checkpoint(const char *out) {
    DIR *d = opendir(out);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        found |= strncmp(e->d_name, "checkpoint-", 11) == 0;
    if (d) closedir(d);
    return found;
}

int main(void) {
    const char *env = getenv("RLHF_CRASH_POINTS");
    int points = env ? atoi(env) : 4;
    env = getenv("RLHF_CRASH_SEED");
    unsigned seed = env ? (unsigned)atoi(env) : 12345u;
    char data[8192], cfg[16384];
    size_t n = 0;
    for (int i = 0; i < 24; i++)
        n += (size_t)snprintf(data + n, sizeof data - n,
                              "{\"text\": \"The number %d comes after %d.\"}\n", i + 1, i);
    harness_write_file(harness_tmp_path("data.jsonl"), data, n);
    /* tiny steps and a checkpoint after each: saving is a large share of the time */
    snprintf(cfg, sizeof cfg,
             "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\n"
             "sequence_len: 64\nmicro_batch_size: 2\nmax_steps: 24\nlearning_rate: 3e-3\n"
             "warmup_steps: 2\nlogging_steps: 1\nsave_steps: 1\nsave_total_limit: 2\nseed: 3\n"
             "dataset_prepared_path: %s\n",
             harness_source_path("tests/fixtures/models/llama_text"),
             harness_tmp_path("data.jsonl"), harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path("crash.yaml"), cfg, strlen(cfg));
    char config[4096], straight[4096], crashed[4096], log[4096];
    snprintf(config, sizeof config, "%s", harness_tmp_path("crash.yaml"));
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("straight"));
    snprintf(crashed, sizeof crashed, "%s", harness_tmp_path("crashed"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("crash.log"));

    const char *none[] = {NULL}, *resume[] = {"--resume_from_checkpoint", "true", NULL};
    double t0 = now();
    CHECK(harness_wait_child(harness_spawn_train(config, straight, log, none)) == 0,
          "uninterrupted run");
    double full = now() - t0;

    srand(seed);
    int kills = 0, runs = 0, tmp_seen = 0;
    while (runs < points + 50) {
        bool resuming = has_checkpoint(crashed);
        pid_t pid = harness_spawn_train(config, crashed, log, resuming ? resume : none);
        runs++;
        int rc;
        if (kills < points) {
            double delay = full * (double)rand() / RAND_MAX; /* anywhere in a whole run */
            nanosleep(&(struct timespec){(time_t)delay, (long)((delay - (time_t)delay) * 1e9)},
                      NULL);
            kill(pid, SIGKILL);
            rc = harness_wait_child(pid);
            if (rc == 128 + SIGKILL) kills++;
        } else {
            rc = harness_wait_child(pid);
        }
        int tmp = 0;
        harness_check_checkpoints(crashed, &tmp);
        tmp_seen += tmp;
        if (rc == 0) {
            if (kills >= points) break;
            /* it finished before the kill: start over to place the remaining kills */
            char cmd[8300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", crashed);
            CHECK(system(cmd) == 0, "clear");
            continue;
        }
        CHECK(rc == 128 + SIGKILL, "run %d: exit %d (see %s)", runs, rc, log);
        if (rc != 128 + SIGKILL) break;
    }
    printf("%d kills over %d runs (full run %.2f s); unfinished checkpoint directories seen after "
           "%d kills\n",
           kills, runs, full, tmp_seen);
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", crashed);
    CHECK(kills == points, "%d of %d kills placed", kills, points);
    CHECK(harness_same_file(a, b), "killed %d times and resumed: the uninterrupted weights", kills);
    return harness_finish("test_crash_resume");
}
