/* External command rewards (rewards/command_reward.h): the JSON-lines round trip, the request's
 * shape, and every failure the protocol names (timeouts, exits, signals, cut-off and garbled
 * answers, a child that stops reading), with no zombie left behind and SIGPIPE survived.
 *
 * No interpreter is needed: run with `--child MODE [FILE]` this program is itself the reward
 * command (child_main below), and the tests start it through /proc/self/exe. */
#include "common/error.h"
#include "harness.h"
#include "rewards/command_reward.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Long enough for a sanitizer build on a loaded machine to start the child; only the timeout
 * tests use a short one. */
#define SLOW_OK 60.0
#define SHORT   0.3

/* ------------------------------------------------------------------ the child */

static void answer(const char *line) {
    fputs(line, stdout);
    fflush(stdout);
}

static void sleep_forever(void) {
    for (;;)
        pause();
}

/* "ok" mode's scores, all derived from the request so that a wrongly built one shows: the
 * completion's length, 1000 per token id, a "bonus" column, 1e6 per trainer_state.global_step
 * and 1e8 per batch this process has answered before (a restarted child starts again at 0).
 * A completion "none" gets null. Returns a malloc'd JSON line. */
static char *ok_scores(const json_t *req, int batches_before) {
    const json_t *comps = json_object_get(req, "completions");
    const json_t *ids = json_object_get(req, "completion_ids");
    const json_t *prompts = json_object_get(req, "prompts");
    const json_t *bonus = json_object_get(req, "bonus");
    const json_t *step = json_object_get(json_object_get(req, "trainer_state"), "global_step");
    size_t n = json_array_size(comps);
    if (json_array_size(ids) != n || json_array_size(prompts) != n || !json_is_integer(step))
        return strdup("\"malformed request\"\n");
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(comps, i);
        if (json_is_array(c)) c = json_object_get(json_array_get(c, 0), "content");
        const char *text = json_string_value(c);
        if (!text || strcmp(text, "none") == 0) {
            json_array_append_new(out, json_null());
            continue;
        }
        double s = (double)strlen(text) + 1000.0 * (double)json_array_size(json_array_get(ids, i)) +
                   1e6 * (double)json_integer_value(step) + 1e8 * batches_before;
        if (bonus) s += json_number_value(json_array_get(bonus, i));
        json_array_append_new(out, json_real(s));
    }
    char *text = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    size_t len = strlen(text);
    text = realloc(text, len + 2);
    memcpy(text + len, "\n", 2);
    return text;
}

/* n zeros (plus `extra` more), as a JSON line. */
static char *zeros(size_t n, size_t extra) {
    char *s = malloc(4 * (n + extra) + 4);
    size_t k = 0;
    s[k++] = '[';
    for (size_t i = 0; i < n + extra; i++)
        k += (size_t)sprintf(s + k, i ? ",0" : "0");
    memcpy(s + k, "]\n", 3);
    return s;
}

static int child_main(const char *mode, const char *file) {
    if (file && strcmp(mode, "sleep") == 0) {
        FILE *fp = fopen(file, "w");
        if (fp) {
            fprintf(fp, "%d\n", (int)getpid());
            fclose(fp);
        }
    }
    if (strcmp(mode, "noread") == 0) sleep_forever();
    char *line = NULL;
    size_t cap = 0;
    int batches = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_t *req = json_loads(line, 0, NULL);
        size_t n = json_array_size(json_object_get(req, "completions"));
        char *reply = NULL;
        if (strcmp(mode, "ok") == 0 || strcmp(mode, "ignore_eof") == 0) {
            reply = ok_scores(req, batches);
        } else if (strcmp(mode, "dump") == 0) {
            FILE *fp = fopen(file, "w");
            if (fp) {
                fputs(line, fp);
                fclose(fp);
            }
            reply = zeros(n, 0);
        } else if (strcmp(mode, "count") == 0) {
            reply = zeros(n, 1);
        } else if (strcmp(mode, "garbage") == 0) {
            answer("this is not json\n");
        } else if (strcmp(mode, "nan") == 0) {
            answer("[NaN, 1]\n");
        } else if (strcmp(mode, "object") == 0) {
            answer("{\"scores\": [1, 2]}\n");
        } else if (strcmp(mode, "string") == 0) {
            answer("[0, \"x\"]\n");
        } else if (strcmp(mode, "twolines") == 0) {
            /* one write, so both lines reach the reader together */
            if (write(STDOUT_FILENO, "[0,0]\ndebug\n", 12) != 12) _exit(1);
        } else if (strcmp(mode, "sleep") == 0) {
            sleep_forever();
        } else if (strcmp(mode, "exit3") == 0) {
            _exit(3);
        } else if (strcmp(mode, "abort") == 0) {
            struct rlimit none = {0, 0};
            setrlimit(RLIMIT_CORE, &none); /* no core file in the test directory */
            abort();
        } else if (strcmp(mode, "partial") == 0 || strcmp(mode, "partial_exit") == 0) {
            answer("[1, 2");
            if (strcmp(mode, "partial_exit") == 0) _exit(0);
            close(STDOUT_FILENO);
            sleep_forever();
        } else if (strcmp(mode, "closein") == 0) {
            /* stdin is closed before the answer goes out, so the next request surely meets a
             * closed pipe */
            close(STDIN_FILENO);
            reply = ok_scores(req, batches);
            answer(reply);
            sleep_forever();
        } else if (strcmp(mode, "die_between") == 0) {
            reply = ok_scores(req, batches);
            answer(reply);
            _exit(5);
        }
        if (reply) answer(reply);
        free(reply);
        json_decref(req);
        batches++;
    }
    free(line);
    if (strcmp(mode, "ignore_eof") == 0) {
        signal(SIGTERM, SIG_IGN);
        sleep_forever();
    }
    _exit(0); /* no sanitizer leak report from a child: the test reads its exit status */
}

/* ------------------------------------------------------------------ helpers */

static char self_path[4096];

/* `exec '<this program>' --child MODE [FILE]` (static buffer, one at a time). */
static const char *child_cmd(const char *mode, const char *file) {
    static char buf[8192];
    snprintf(buf, sizeof buf, "exec '%s' --child %s%s%s%s", self_path, mode, file ? " '" : "",
             file ? file : "", file ? "'" : "");
    return buf;
}

/* Whether every child this process started has been reaped. */
static bool no_children(void) {
    errno = 0;
    return waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD;
}

/* A batch of string completions with token counts, a "bonus" column and trainer_state. */
typedef struct {
    RewardBatch b;
    json_t *prompts, *completions, *columns, *state;
    int32_t ids[4][4];
    const int32_t *rows[4];
    int lens[4];
} Batch;

static void batch_init(Batch *t, const char *completions_json, const int *lens, int step) {
    memset(t, 0, sizeof *t);
    t->completions = json_loads(completions_json, 0, NULL);
    int n = (int)json_array_size(t->completions);
    t->prompts = json_array();
    json_t *bonus = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(t->prompts, json_string("What is 6*7?"));
        json_array_append_new(bonus, json_real(0.25 * i));
        t->lens[i] = lens[i];
        for (int k = 0; k < lens[i]; k++)
            t->ids[i][k] = 100 * i + k;
        t->rows[i] = t->ids[i];
    }
    t->columns = json_object();
    json_object_set_new(t->columns, "bonus", bonus);
    t->state = json_pack("{s:i, s:i, s:f}", "global_step", step, "max_steps", 10, "epoch", 0.5);
    t->b = (RewardBatch){.n = n,
                         .prompts = t->prompts,
                         .completions = t->completions,
                         .completion_ids = t->rows,
                         .completion_lens = t->lens,
                         .columns = t->columns,
                         .trainer_state = t->state};
}

static void batch_free(Batch *t) {
    json_decref(t->prompts);
    json_decref(t->completions);
    json_decref(t->columns);
    json_decref(t->state);
}

/* A two-completion batch for the failure tests. */
static void small_batch(Batch *t) {
    static const int lens[] = {1, 2};
    batch_init(t, "[\"a\", \"bb\"]", lens, 1);
}

/* ------------------------------------------------------------------ round trip */

static void test_scores(void) {
    RewardFunc f;
    CHECK(command_reward_open(&f, "len_score", child_cmd("ok", NULL), SLOW_OK) == 0, "%s",
          err_msg());
    CHECK(f.name && strcmp(f.name, "len_score") == 0, "name");
    Batch t;
    static const int lens[] = {2, 3, 0};
    batch_init(&t, "[\"abc\", \"none\", [{\"role\": \"assistant\", \"content\": \"hello\"}]]", lens,
               3);
    double out[3] = {0};
    CHECK(f.score(f.impl, &t.b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 3 + 2000 + 3e6 + 0.0, "score 0: %.17g", out[0]);
    CHECK(isnan(out[1]), "null -> NaN: %g", out[1]);
    CHECK(out[2] == 5 + 0 + 3e6 + 0.5, "conversational score: %.17g", out[2]);
    batch_free(&t);

    /* The same process answers the next batch (1e8 per batch it answered before). */
    static const int lens2[] = {1};
    batch_init(&t, "[\"xy\"]", lens2, 4);
    CHECK(f.score(f.impl, &t.b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 2 + 1000 + 4e6 + 1e8, "second batch, same child: %.17g", out[0]);

    /* An empty batch is not sent. */
    RewardBatch empty = t.b;
    empty.n = 0;
    CHECK(f.score(f.impl, &empty, NULL) == 0, "%s", err_msg());
    CHECK(f.score(f.impl, &t.b, out) == 0 && out[0] == 2 + 1000 + 4e6 + 2e8, "third batch: %.17g",
          out[0]);
    batch_free(&t);
    reward_func_close(&f);
    CHECK(f.impl == NULL && f.name == NULL, "closed");
    CHECK(no_children(), "the child exited at end of input and was reaped");
}

/* The request is one line holding the Python contract's keyword arguments. */
static void test_request_shape(void) {
    const char *dump = harness_tmp_path("request.json");
    RewardFunc f;
    CHECK(command_reward_open(&f, "dump", child_cmd("dump", dump), SLOW_OK) == 0, "%s", err_msg());
    Batch t;
    static const int lens[] = {2, 0};
    batch_init(&t, "[\"line one\\nline two\", [{\"role\": \"assistant\", \"content\": \"hi\"}]]",
               lens, 7);
    double out[2] = {1, 1};
    CHECK(f.score(f.impl, &t.b, out) == 0, "%s", err_msg());
    CHECK(out[0] == 0 && out[1] == 0, "zeros: %g %g", out[0], out[1]);
    reward_func_close(&f);

    FILE *fp = fopen(dump, "r");
    char buf[4096] = "";
    size_t len = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp) fclose(fp);
    CHECK(len > 0 && buf[len - 1] == '\n' && memchr(buf, '\n', len) == buf + len - 1,
          "exactly one line: %s", buf);
    json_t *req = json_loadb(buf, len, 0, NULL);
    CHECK(json_equal(json_object_get(req, "prompts"), t.prompts), "prompts");
    CHECK(json_equal(json_object_get(req, "completions"), t.completions), "completions");
    json_t *want_ids = json_loads("[[0, 1], []]", 0, NULL);
    CHECK(json_equal(json_object_get(req, "completion_ids"), want_ids), "completion_ids");
    CHECK(json_equal(json_object_get(req, "bonus"), json_object_get(t.columns, "bonus")),
          "dataset column");
    CHECK(json_equal(json_object_get(req, "trainer_state"), t.state), "trainer_state");
    CHECK(json_object_size(req) == 5, "no other keys: %zu", json_object_size(req));
    json_decref(want_ids);
    json_decref(req);
    batch_free(&t);
    CHECK(no_children(), "reaped");
}

/* ------------------------------------------------------------------ failures */

/* Opens `mode`, runs `good` successful batches, then expects the next to fail with a message
 * holding need1 and need2 and the function's name, the one after that to fail at once without
 * a new child, and no child left. */
static void expect_failure(const char *mode, const char *command, double timeout_s, int good,
                           const char *need1, const char *need2) {
    RewardFunc f;
    if (command_reward_open(&f, mode, command ? command : child_cmd(mode, NULL), timeout_s) != 0) {
        CHECK(false, "%s: open: %s", mode, err_msg());
        return;
    }
    Batch t;
    small_batch(&t);
    double out[2];
    for (int i = 0; i < good; i++)
        CHECK(f.score(f.impl, &t.b, out) == 0, "%s: batch %d: %s", mode, i, err_msg());
    CHECK(f.score(f.impl, &t.b, out) == -1, "%s: the batch should fail", mode);
    const char *msg = err_msg();
    printf("%s -> %s\n", mode, msg); /* the messages users will see, for reading in the log */
    CHECK(strstr(msg, "reward function '") && strstr(msg, mode) && strstr(msg, need1) &&
              (!need2 || strstr(msg, need2)),
          "%s: message: %s", mode, msg);
    CHECK(no_children(), "%s: the failed child was reaped", mode);
    CHECK(f.score(f.impl, &t.b, out) == -1 && strstr(err_msg(), "earlier") &&
              strstr(err_msg(), need1),
          "%s: stays failed: %s", mode, err_msg());
    CHECK(no_children(), "%s: not restarted", mode);
    batch_free(&t);
    reward_func_close(&f);
    CHECK(no_children(), "%s: closed", mode);
}

static void test_answer_errors(void) {
    expect_failure("count", NULL, SLOW_OK, 0, "3 scores for 2 completions", NULL);
    expect_failure("garbage", NULL, SLOW_OK, 0, "invalid JSON", "'this is not json'");
    expect_failure("nan", NULL, SLOW_OK, 0, "invalid JSON", "write null");
    expect_failure("object", NULL, SLOW_OK, 0, "an object, not an array", "scores");
    expect_failure("string", NULL, SLOW_OK, 0, "score 1 is a string", NULL);
    expect_failure("twolines", NULL, SLOW_OK, 0, "more than one line", "debug");
}

static void test_child_deaths(void) {
    expect_failure("exit3", NULL, SLOW_OK, 0, "exited with status 3", NULL);
    expect_failure("abort", NULL, SLOW_OK, 0, "killed by signal 6", NULL);
    expect_failure("partial", NULL, SLOW_OK, 0, "closed its stdout", "'[1, 2'");
    expect_failure("partial_exit", NULL, SLOW_OK, 0, "exited with status 0", "'[1, 2'");
    expect_failure("die_between", NULL, SLOW_OK, 1, "exited with status 5", NULL);
    expect_failure("not_found", "/nonexistent/reward-command", SLOW_OK, 0, "status 127", NULL);
}

/* A child that closed its stdin: the write fails with EPIPE, and the SIGPIPE that comes with it
 * neither kills this process nor stays pending or blocked. */
static void test_sigpipe(void) {
    expect_failure("closein", NULL, SLOW_OK, 1, "closed its stdin", NULL);
    sigset_t pending, mask;
    sigpending(&pending);
    sigprocmask(SIG_BLOCK, NULL, &mask);
    CHECK(!sigismember(&pending, SIGPIPE), "no SIGPIPE left pending");
    CHECK(!sigismember(&mask, SIGPIPE), "SIGPIPE unblocked again");
    struct sigaction sa;
    sigaction(SIGPIPE, NULL, &sa);
    CHECK(sa.sa_handler == SIG_DFL, "SIGPIPE disposition untouched");
}

static void test_timeouts(void) {
    /* It reads the request, then never answers. */
    expect_failure("sleep", NULL, SHORT, 0, "timed out after 0.3 s", "answer");

    /* It never reads: a request larger than any pipe buffer must not block the write. */
    RewardFunc f;
    CHECK(command_reward_open(&f, "noread", child_cmd("noread", NULL), SHORT) == 0, "%s",
          err_msg());
    size_t big = 4u << 20;
    char *text = malloc(big + 1);
    memset(text, 'x', big);
    text[big] = '\0';
    Batch t;
    small_batch(&t);
    json_array_set_new(t.completions, 0, json_string(text));
    free(text);
    double out[2];
    CHECK(f.score(f.impl, &t.b, out) == -1, "noread: should time out");
    CHECK(strstr(err_msg(), "timed out") && strstr(err_msg(), "writing the request"), "message: %s",
          err_msg());
    CHECK(no_children(), "noread: reaped");
    batch_free(&t);
    reward_func_close(&f);
}

/* Whether process pid is gone or dead (a zombie waiting for whoever adopted it). */
static bool process_dead(pid_t pid) {
    char path[64], stat[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fp = fopen(path, "r");
    if (!fp) return true;
    size_t n = fread(stat, 1, sizeof stat - 1, fp);
    fclose(fp);
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')');
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* Through a pipeline the reward program is the shell's child, not ours: killing the command's
 * process group must end it too. */
static void test_process_group(void) {
    const char *pidfile = harness_tmp_path("grandchild.pid");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cat | '%s' --child sleep '%s'", self_path, pidfile);
    RewardFunc f;
    CHECK(command_reward_open(&f, "pipeline", cmd, SHORT) == 0, "%s", err_msg());
    /* Once it has written its pid it is surely running when the timeout strikes. */
    int pid = 0;
    for (int i = 0; i < 3000 && pid <= 0; i++) {
        FILE *fp = fopen(pidfile, "r");
        if (fp) {
            if (fscanf(fp, "%d", &pid) != 1) pid = 0;
            fclose(fp);
        }
        struct timespec ts = {0, 10000000};
        if (pid <= 0) nanosleep(&ts, NULL);
    }
    CHECK(pid > 0, "the grandchild wrote its pid");
    Batch t;
    small_batch(&t);
    double out[2];
    CHECK(f.score(f.impl, &t.b, out) == -1 && strstr(err_msg(), "timed out"), "pipeline: %s",
          err_msg());
    batch_free(&t);
    reward_func_close(&f);
    CHECK(no_children(), "the shell was reaped");
    bool dead = false;
    for (int i = 0; i < 200 && pid > 0 && !(dead = process_dead(pid)); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK(dead, "the grandchild %d was killed with its group", pid);
}

/* close() on a child that ignores end of input: killed after the grace, reaped. */
static void test_close(void) {
    RewardFunc f;
    CHECK(command_reward_open(&f, "stubborn", child_cmd("ignore_eof", NULL), SLOW_OK) == 0, "%s",
          err_msg());
    Batch t;
    small_batch(&t);
    double out[2];
    CHECK(f.score(f.impl, &t.b, out) == 0 && out[0] == 1 + 1000 + 1e6, "%s", err_msg());
    batch_free(&t);
    reward_func_close(&f);
    CHECK(no_children(), "the stubborn child was killed and reaped");

    /* Closing one that never got a batch. */
    CHECK(command_reward_open(&f, "unused", child_cmd("ok", NULL), SLOW_OK) == 0, "%s", err_msg());
    reward_func_close(&f);
    CHECK(no_children(), "an unused child is reaped");
    reward_func_close(&f); /* a zeroed function closes as a no-op */
}

static void test_open_errors(void) {
    RewardFunc f;
    CHECK(command_reward_open(&f, "r", "", 1.0) == -1 && strstr(err_msg(), "empty command"),
          "empty command: %s", err_msg());
    CHECK(f.impl == NULL && f.name == NULL, "zeroed");
    CHECK(command_reward_open(&f, "", "true", 1.0) == -1 && strstr(err_msg(), "name"),
          "empty name: %s", err_msg());
    CHECK(command_reward_open(&f, "r", "true", NAN) == -1 && strstr(err_msg(), "NaN"),
          "NaN timeout: %s", err_msg());
    CHECK(no_children(), "nothing started");
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], argc > 3 ? argv[3] : NULL);
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self_path[n] = '\0';
    test_scores();
    test_request_shape();
    test_answer_errors();
    test_child_deaths();
    test_sigpipe();
    test_timeouts();
    test_process_group();
    test_close();
    test_open_errors();
    return harness_finish("test_command_reward");
}
