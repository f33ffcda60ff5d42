#include "harness.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int harness_checks, harness_failures;
static char tmpdir[512];

bool harness_close(double got, double want, double rel, double abs_tol) {
    if (isnan(got) || isnan(want)) return false;
    return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

const char *harness_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/rlhf-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tmpdir;
}

/* The build's directory, or the environment's override: a test binary carried to another machine
 * (scripts/gpu-check.sh on a lent GPU) finds the repository and rlhf where they are there. */
static const char *dir_or_override(const char *env, const char *built) {
    const char *v = getenv(env);
    return v && *v ? v : built;
}

const char *harness_source_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir_or_override("RLHF_TEST_SOURCE_DIR", RLHF_SOURCE_DIR),
             rel);
    return buf;
}

json_t *harness_load_fixture_json(const char *rel) {
    json_error_t jerr;
    json_t *root = json_load_file(harness_source_path(rel), 0, &jerr);
    if (!root) {
        const char *slash = strrchr(rel, '/');
        fprintf(stderr, "%s: %s (line %d)\n", slash ? slash + 1 : rel, jerr.text, jerr.line);
    }
    return root;
}

int harness_write_file(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t n = fwrite(data, 1, len, fp);
    return (fclose(fp) == 0 && n == len) ? 0 : -1;
}

const char *harness_write_grpo_prompts(void) {
    char rows[4096];
    size_t n = 0;
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"prompt\": \"Q%d: add %d and %d\", \"answer\": \"%d\"}\n", i, i,
                              i + 2, 2 * i + 2);
    const char *path = harness_tmp_path("prompts.jsonl");
    harness_write_file(path, rows, n);
    return path;
}

void harness_write_arith_pairs(const char *name, int n) {
    char rows[16384];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(rows + len, sizeof rows - len,
                                "{\"prompt\": \"Q%d: %d plus %d is\", \"chosen\": \" %d.\", "
                                "\"rejected\": \" %d or so, I guess.\"}\n",
                                i, i, i + 2, 2 * i + 2, 5 * i + 1);
    harness_write_file(harness_tmp_path(name), rows, len);
}

void harness_write_arith_kto_rows(const char *name, int n) {
    char rows[16384];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        bool good = i % 3 != 1;
        len += (size_t)snprintf(rows + len, sizeof rows - len,
                                "{\"prompt\": \"Q%d: %d plus %d is\", \"completion\": \" %d%s\", "
                                "\"label\": %s}\n",
                                i, i, i + 2, good ? 2 * i + 2 : 5 * i + 1,
                                good ? "." : " or so, I guess.", good ? "true" : "false");
    }
    harness_write_file(harness_tmp_path(name), rows, len);
}

int harness_finish(const char *name) {
    if (tmpdir[0] && harness_failures) {
        fprintf(stderr, "%s: kept %s for a look at what failed\n", name, tmpdir);
    } else if (tmpdir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    }
    printf("%s: %d passed, %d failed\n", name, harness_checks - harness_failures, harness_failures);
    return harness_failures ? 1 : 0;
}

const char *harness_tmp_path(const char *name) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", harness_tmpdir(), name);
    return b;
}

bool harness_same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool same = read_file(a, &x, &nx) == 0 && read_file(b, &y, &ny) == 0 && nx == ny &&
                memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

json_t *harness_read_metrics(const char *out_dir) {
    char path[4200], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    json_t *rows = json_array();
    if (read_file(path, &text, NULL) != 0) return rows;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *row;
        if (json_load_text(l, strlen(l), "metrics", &row) == 0) json_array_append_new(rows, row);
    }
    free(text);
    return rows;
}

double harness_metric(const json_t *rows, size_t i, const char *key) {
    return json_number_value(json_object_get(json_array_get(rows, i), key));
}

int harness_check_log_history(const char *out_dir, const json_t *history, const char *skip_key) {
    json_t *got = harness_read_metrics(out_dir);
    CHECK(json_array_size(got) == json_array_size(history), "%zu steps logged, the reference %zu",
          json_array_size(got), json_array_size(history));
    size_t s;
    json_t *want;
    int compared = 0;
    json_array_foreach(history, s, want) {
        const json_t *row = json_array_get(got, s);
        const char *key;
        json_t *v;
        json_object_foreach(want, key, v) {
            if (skip_key && !strcmp(key, skip_key)) continue;
            const json_t *g = row ? json_object_get(row, key) : NULL;
            double w = json_number_value(v), x = json_number_value(g);
            CHECK(g && json_is_number(g), "step %zu: %s logged", s + 1, key);
            CHECK(!g || fabs(x - w) <= 1e-4 * fmax(1.0, fabs(w)),
                  "step %zu: %s = %.7g, reference %.7g", s + 1, key, x, w);
            compared++;
        }
    }
    json_decref(got);
    return compared;
}

int harness_foreach_case(const char *root, const char *marker, void (*fn)(const char *name)) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", harness_source_path(root));
    DIR *d = opendir(dir);
    CHECK(d != NULL, "%s", dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, marker);
        struct stat st;
        if (e->d_name[0] == '.' || stat(path, &st) != 0) continue;
        fn(e->d_name);
        n++;
    }
    if (d) closedir(d);
    return n;
}

pid_t harness_spawn_train(const char *config, const char *out, const char *log_path,
                          const char *const *extra) {
    char rlhf[4200];
    snprintf(rlhf, sizeof rlhf, "%s/rlhf",
             dir_or_override("RLHF_TEST_BINARY_DIR", RLHF_BINARY_DIR));
    const char *argv[32] = {rlhf, "train", config, "--output_dir", out};
    int argc = 5;
    for (int i = 0; extra && extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int harness_wait_child(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

int harness_check_checkpoints(const char *out, int *temp_entries) {
    DIR *d = opendir(out);
    int found = 0, tmp = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        long long n;
        char tail;
        if (strstr(e->d_name, ".tmp")) tmp++;
        if (sscanf(e->d_name, "checkpoint-%lld%c", &n, &tail) != 1) continue;
        found++;
        char path[8192];
        const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json",
                               "tokenizer.json"};
        for (int f = 0; f < 4; f++) {
            snprintf(path, sizeof path, "%s/%s/%s", out, e->d_name, files[f]);
            CHECK(file_exists(path), "%s/%s present", e->d_name, files[f]);
        }
        snprintf(path, sizeof path, "%s/%s/trainer_state.json", out, e->d_name);
        json_t *state = NULL;
        CHECK(json_load_path(path, &state) == 0 &&
                  json_integer_value(json_object_get(state, "global_step")) == n,
              "%s: trainer_state.json whole, global_step %lld", e->d_name, n);
        json_decref(state);
    }
    if (d) closedir(d);
    if (temp_entries) *temp_entries = tmp;
    return found;
}

const char *harness_write_untied_llama_text(void) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", harness_tmp_path("untied"));
    char cmd[16384], path[4200];
    const char *base = harness_source_path("tests/fixtures/models/llama_text");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, base, dir);
    CHECK(system(cmd) == 0, "copy llama_text");
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = NULL;
    CHECK(json_load_path(path, &cfg) == 0, "%s", err_msg());
    json_object_set_new(cfg, "tie_word_embeddings", json_false());
    CHECK(json_dump_file(cfg, path, JSON_INDENT(2)) == 0, "write config.json");
    json_decref(cfg);

    snprintf(path, sizeof path, "%s/model.safetensors", base);
    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    SafetensorsWriteTensor *t = calloc(f.n_tensors + 1, sizeof *t);
    for (size_t i = 0; i < f.n_tensors; i++) {
        const SafetensorsTensor *src = &f.tensors[i];
        t[i] = (SafetensorsWriteTensor){src->name, src->dtype, src->ndim, {0}, src->data};
        memcpy(t[i].shape, src->shape, sizeof t[i].shape);
        if (strcmp(src->name, "model.embed_tokens.weight") == 0) {
            t[f.n_tensors] = t[i];
            t[f.n_tensors].name = "lm_head.weight";
        }
    }
    CHECK(t[f.n_tensors].name != NULL, "llama_text has an embedding");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(safetensors_write(path, t, f.n_tensors + 1) == 0, "%s", err_msg());
    free(t);
    safetensors_close(&f);
    return dir;
}

double harness_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0;
}

float harness_frand(uint64_t *state) {
    return (float)(harness_uniform(state) * 2.0 - 1.0);
}

float harness_bf16_edge_value(uint64_t *state) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u,
                                       0xff800000u, 0x00012345u, 0x80000000u};
    double u = harness_uniform(state);
    if (u < 0.05) {
        float f;
        memcpy(&f, &special[(int)(u * 20 * 6) % 6], sizeof f);
        return f;
    }
    return (float)(harness_uniform(state) - 0.5) * 3.0f;
}
