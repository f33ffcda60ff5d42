/* Faults in a training run, through the `rlhf train` binary: a step with a NaN loss is skipped
 * (weights and optimizer state untouched, a warning naming it, skipped_steps counted), a run
 * that diverges stops after max_consecutive_bad_steps with its checkpoints intact, and SIGTERM
 * stops a run with a checkpoint from which it resumes to the weights of an uninterrupted run. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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

/* A token of the odd line that no other line has. */
static int32_t odd_token(void) {
    Tokenizer tok;
    CHECK(tokenizer_load(&tok, fixture) == 0, "tokenizer");
    int32_t found = -1;
    char buf[128];
    int32_t *odd;
    size_t n_odd;
    const char *o = line(11, buf, sizeof buf);
    CHECK(tokenizer_encode(&tok, o, strlen(o), false, &odd, &n_odd) == 0, "encode");
    for (size_t k = n_odd; k-- > 1 && found < 0;) { /* not the first: later positions see it */
        bool elsewhere = false;
        for (int i = 0; i < N_LINES && !elsewhere; i++) {
            if (i == 11) continue;
            int32_t *ids;
            size_t n;
            const char *t = line(i, buf, sizeof buf);
            CHECK(tokenizer_encode(&tok, t, strlen(t), false, &ids, &n) == 0, "encode");
            for (size_t j = 0; j < n; j++)
                elsewhere |= ids[j] == odd[k];
            free(ids);
        }
        if (!elsewhere) found = odd[k];
    }
    free(odd);
    tokenizer_free(&tok);
    CHECK(found >= 0, "a token unique to the odd line");
    return found;
}

/* The llama_text fixture untied (lm_head.weight a copy of the embeddings, so that a NaN in one
 * embedding row poisons only the sequences holding that token), with that token's row NaN. */
static void write_poisoned_model(const char *dir, int32_t token) {
    char path[16384], *st = NULL, *cfg = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", fixture);
    CHECK(read_file(path, &st, &len) == 0, "fixture weights");
    uint64_t hlen;
    memcpy(&hlen, st, 8);
    json_t *header;
    CHECK(json_load_text(st + 8, hlen, "header", &header) == 0, "header");
    json_t *embed = json_object_get(header, "model.embed_tokens.weight");
    int64_t begin = json_integer_value(json_array_get(json_object_get(embed, "data_offsets"), 0));
    int64_t end = json_integer_value(json_array_get(json_object_get(embed, "data_offsets"), 1));
    int64_t hidden = json_integer_value(json_array_get(json_object_get(embed, "shape"), 1));
    size_t data_len = len - 8 - hlen;
    json_t *head = json_deep_copy(embed);
    json_array_set_new(json_object_get(head, "data_offsets"), 0, json_integer((int64_t)data_len));
    json_array_set_new(json_object_get(head, "data_offsets"), 1,
                       json_integer((int64_t)data_len + end - begin));
    json_object_set_new(header, "lm_head.weight", head);
    char *htext = json_dumps(header, JSON_COMPACT);
    size_t hl = (strlen(htext) + 7) / 8 * 8;
    size_t total = 8 + hl + data_len + (size_t)(end - begin);
    char *out = xmalloc(total);
    memcpy(out, &(uint64_t){hl}, 8);
    memset(out + 8, ' ', hl);
    memcpy(out + 8, htext, strlen(htext));
    memcpy(out + 8 + hl, st + 8 + hlen, data_len);
    memcpy(out + 8 + hl + data_len, st + 8 + hlen + begin, (size_t)(end - begin));
    float *row = (float *)(out + 8 + hl + begin) + (size_t)token * (size_t)hidden;
    for (int64_t h = 0; h < hidden; h++)
        row[h] = NAN;
    snprintf(path, sizeof path, "mkdir -p '%s' && cp '%s'/tokenizer*.json '%s/'", dir, fixture,
             dir);
    CHECK(system(path) == 0, "copy the tokenizer");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    harness_write_file(path, out, total);
    snprintf(path, sizeof path, "%s/config.json", fixture);
    CHECK(read_file(path, &cfg, NULL) == 0, "config.json");
    char *tie = strstr(cfg, "\"tie_word_embeddings\": true");
    CHECK(tie != NULL, "a tied fixture");
    memcpy(tie, "\"tie_word_embeddings\":false", strlen("\"tie_word_embeddings\":false"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    free(cfg), free(out), free(htext), free(st);
    json_decref(header);
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

/* 17 lines, 5 steps an epoch, 2 epochs: the odd line's step in each epoch is skipped. */
static void test_nan_step_skipped(void) {
    char model[4096], out[4096], log[4096];
    snprintf(model, sizeof model, "%s", harness_tmp_path("poisoned"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("nan-run"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("nan.log"));
    write_poisoned_model(model, odd_token());
    write_config("nan.yaml", model, "num_epochs: 2\nsave_steps: 1\n");
    const char *none[] = {NULL};
    int rc = harness_wait_child(harness_spawn_train(harness_tmp_path("nan.yaml"), out, log, none));
    CHECK(rc == 0, "the run with NaN steps completes: exit %d", rc);
    json_t *rows = harness_read_metrics(out);
    CHECK(json_array_size(rows) == 10, "%zu metrics rows for 10 steps", json_array_size(rows));
    int skipped = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        int step = (int)json_integer_value(json_object_get(row, "step"));
        bool bad = json_is_null(json_object_get(row, "loss"));
        if (bad) {
            skipped++;
            char want[64];
            snprintf(want, sizeof want, "warning: step %d skipped", step);
            CHECK(log_has(log, want), "the log names skipped step %d", step);
            CHECK(step > 1, "skipped step %d", step);
            if (step > 1) {
                CHECK(same_in(out, step - 1, step, "model.safetensors"),
                      "step %d skipped: weights untouched", step);
                CHECK(same_in(out, step - 1, step, "optimizer.safetensors"),
                      "step %d skipped: AdamW moments untouched", step);
            }
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
    CHECK(skipped == 2, "%d steps skipped, expected one an epoch", skipped);
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

int main(void) {
    snprintf(fixture, sizeof fixture, "%s",
             harness_source_path("tests/fixtures/models/llama_text"));
    write_dataset(harness_tmp_path("data.jsonl"));
    test_nan_step_skipped();
    test_divergence_stops();
    test_sigterm_resumes();
    return harness_finish("test_train_faults");
}
