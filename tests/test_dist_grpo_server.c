/* GRPO on a generation server over MPI (issue 31): `rlhf train --nproc 2` with vllm_mode: server
 * against `rlhf serve`, reached through a recording proxy (tests/serve/record_proxy.py), as TRL's
 * VLLMGeneration in server mode does it:
 *  - rank 0 alone talks to the server: one /health/ and one /get_world_size/ per run, and one
 *    POST /generate/ per generation batch holding the whole batch's prompts (every rank's), n =
 *    num_generations; each evaluation batch likewise;
 *  - the results: the same per-step metrics and final weights as 2 ranks generating in-process
 *    with the same seeds (the tolerance of test_dist_grpo: 1e-5; measured: identical), and as
 *    one process on the same server, whose completions (log_completions) are byte-identical
 *    (the server gets the very same requests);
 *  - no server, or one that takes no weights (rank 0 then fails inside the collective
 *    generation): the 2-rank job ends at once with one error line naming trl.vllm_mode.
 * Skipped (77) in a build without MPI; not built without libmicrohttpd or libcurl. */
#include "dist_harness.h"
#include "harness.h"

#include "common/fileio.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* <tmp>/name: 12 prompts, G = 4, 4 prompts per generation batch (micro-batches of 4
 * completions), sampled completions (temperature 0.9, top_k 20) from per-completion streams, a
 * reward with spread, 4 held-out prompts evaluated every 2 steps; `server` goes into the trl:
 * block. */
static void write_config(const char *name, const char *server) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n  loss_type: grpo\n"
             "  beta: 0.05\n  num_iterations: 2\n  temperature: 0.9\n  top_k: 20\n"
             "  log_completions: true\n  num_completions_to_print: 0\n"
             "  reward_funcs:\n    - {function: builtin.format, pattern: '^[a-m]', match: search}\n"
             "%s"
             "micro_batch_size: 4\nmax_steps: 4\nlearning_rate: 2e-3\nlr_scheduler: constant\n"
             "warmup_steps: 0\nseed: 5\nlogging_steps: 1\ngrpo_rng: streams\n"
             "val_set_size: 4\neval_steps: 2\n",
             harness_source_path("tests/fixtures/models/llama_text"),
             harness_tmp_path("prompts.jsonl"), server);
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

/* Starts argv (stdout to <tmp>/out_name, stderr to <tmp>/out_name.err) and waits until its
 * stdout holds `pattern` (a scanf format with one %d: the port). Returns the pid, *port set. */
static pid_t start_listener(const char *const *argv, const char *out_name, const char *pattern,
                            int *port) {
    char out[4200], errp[4300];
    snprintf(out, sizeof out, "%s", harness_tmp_path(out_name));
    snprintf(errp, sizeof errp, "%s.err", out);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(errp, "w", stderr)) _exit(127);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    *port = 0;
    for (int tries = 0; tries < 600 && *port == 0; tries++) {
        char *text = NULL;
        size_t len;
        if (read_file(out, &text, &len) == 0) {
            for (char *line = text; line && *port == 0; line = strchr(line, '\n')) {
                if (*line == '\n') line++;
                if (sscanf(line, pattern, port) != 1) *port = 0;
            }
            free(text);
        }
        if (*port == 0) usleep(100 * 1000);
    }
    CHECK(*port > 0, "%s started (see %s)", argv[0], errp);
    return pid;
}

/* The proxy's log lines since the last call (the file is moved aside), as a JSON array. */
static json_t *take_requests(const char *log, const char *keep_as) {
    json_t *rows = json_array();
    char *text = NULL;
    size_t len;
    if (read_file(log, &text, &len) == 0) {
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            json_array_append_new(rows, json_loads(line, 0, NULL));
        free(text);
    }
    CHECK(rename(log, harness_tmp_path(keep_as)) == 0 || json_array_size(rows) == 0,
          "moving the proxy log aside");
    return rows;
}

/* How many of the run's logged steps have key. */
static int lines_with(const char *run, const char *key) {
    json_t *rows = harness_read_metrics(harness_tmp_path(run));
    int n = 0;
    for (size_t i = 0; i < json_array_size(rows); i++)
        n += json_object_get(json_array_get(rows, i), key) != NULL;
    json_decref(rows);
    return n;
}

/* What a run asked of the server: one connection check (rank 0's alone), `batches` /generate/
 * of 4 prompts x 4 (whole generation batches) and `eval_batches` of 1 x 4. */
static void check_requests(const char *name, json_t *rows, int batches, int eval_batches) {
    int health = 0, world = 0, train = 0, eval = 0, other = 0, pushes = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        const char *path = json_string_value(json_object_get(r, "path"));
        json_int_t prompts = json_integer_value(json_object_get(r, "prompts"));
        json_int_t n = json_integer_value(json_object_get(r, "n"));
        json_int_t first = json_integer_value(json_object_get(r, "first_stream"));
        if (!path) continue;
        if (!strcmp(path, "/health/"))
            health++;
        else if (!strcmp(path, "/get_world_size/"))
            world++;
        else if (!strcmp(path, "/update_safetensors/"))
            pushes++;
        else if (!strcmp(path, "/generate/") && prompts == 4 && n == 4 && first == 0)
            train++;
        else if (!strcmp(path, "/generate/") && prompts == 1 && n == 4 && first == 0)
            eval++;
        else
            other++;
    }
    CHECK(health == 1 && world == 1, "%s: one process connected (%d /health/, %d /get_world_size/)",
          name, health, world);
    CHECK(train == batches && eval == eval_batches && other == 0,
          "%s: %d whole generation batches and %d evaluation batches asked for (got %d, %d, and "
          "%d other requests)",
          name, batches, eval_batches, train, eval, other);
    /* num_iterations 2: generation at steps 0 and 2, evaluation at steps 2 and 4, so the weights
     * of steps 0, 2 and 4 */
    CHECK(pushes == 3, "%s: the weights pushed when the step moved: 3 pushes (got %d)", name,
          pushes);
    printf("%s: %d /generate/ of whole batches, %d of evaluation batches, %d weight pushes, one "
           "connection\n",
           name, train, eval, pushes);
}

static bool same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool same = read_file(a, &x, &nx) == 0 && read_file(b, &y, &ny) == 0 && nx == ny && nx > 0 &&
                memcmp(x, y, nx) == 0;
    free(x), free(y);
    return same;
}

int main(void) {
    if (!dist_tests_can_run("test_dist_grpo_server")) return 77;
    harness_write_grpo_prompts();
    char rlhf[4200], model[4200], proxy_py[4200], up[32], log[4200];
    const char *bin = getenv("RLHF_TEST_BINARY_DIR");
    snprintf(rlhf, sizeof rlhf, "%s/rlhf", bin && *bin ? bin : RLHF_BINARY_DIR);
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(proxy_py, sizeof proxy_py, "%s", harness_source_path("tests/serve/record_proxy.py"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("requests.jsonl"));
    int serve_port, proxy_port;
    const char *serve_argv[] = {rlhf, "serve", model, "--port", "0", NULL};
    pid_t serve = start_listener(serve_argv, "serve.out",
                                 "rlhf serve: listening on http://127.0.0.1:%d", &serve_port);
    snprintf(up, sizeof up, "%d", serve_port);
    const char *proxy_argv[] = {"python3", proxy_py, up, log, NULL};
    pid_t proxy = start_listener(proxy_argv, "proxy.out", "%d", &proxy_port);
    if (serve_port <= 0 || proxy_port <= 0) goto done;

    char keys[512];
    snprintf(keys, sizeof keys,
             "  use_vllm: true\n  vllm_mode: server\n  vllm_server_host: 127.0.0.1\n"
             "  vllm_server_port: %d\n  vllm_server_timeout: 30\n",
             proxy_port);
    write_config("local.yaml", "");
    write_config("server.yaml", keys);
    const char *two[] = {"--nproc", "2", "--gradient_accumulation_steps", "2", NULL};
    const char *one[] = {"--gradient_accumulation_steps", "4", NULL};
    char local2[4200], server2[4200], server1[4200], path_a[4400], path_b[4400];
    snprintf(local2, sizeof local2, "%s", harness_tmp_path("local-2ranks"));
    snprintf(server2, sizeof server2, "%s", harness_tmp_path("server-2ranks"));
    snprintf(server1, sizeof server1, "%s", harness_tmp_path("server-1proc"));

    CHECK(dist_train("local.yaml", local2, two) == 0, "2 ranks generating in-process");
    CHECK(dist_train("server.yaml", server2, two) == 0, "2 ranks on the server");
    json_t *asked = take_requests(log, "requests-2ranks.jsonl");
    int evals = lines_with("server-2ranks", "eval_reward");
    CHECK(evals == 2, "2 evaluations logged (%d)", evals);
    /* 4 steps of num_iterations 2: 2 generation batches */
    check_requests("server-2ranks", asked, 2, 4 * evals);
    json_decref(asked);
    dist_compare_metrics("server vs in-process, 2 ranks", local2, server2);
    dist_compare_outputs("server vs in-process, 2 ranks", local2, server2);

    CHECK(dist_train("server.yaml", server1, one) == 0, "1 process on the server");
    asked = take_requests(log, "requests-1proc.jsonl");
    check_requests("server-1proc", asked, 2, 4 * evals);
    json_decref(asked);
    dist_compare_metrics("server: 2 ranks vs 1 process", server1, server2);
    dist_compare_outputs("server: 2 ranks vs 1 process", server1, server2);
    snprintf(path_a, sizeof path_a, "%s/completions.jsonl", server1);
    snprintf(path_b, sizeof path_b, "%s/completions.jsonl", server2);
    CHECK(same_file(path_a, path_b),
          "the server's completions are the same bytes for 2 ranks and for 1 process");

    /* no server: every rank stops at once, one error line naming the key */
    char closed[512];
    snprintf(closed, sizeof closed,
             "  use_vllm: true\n  vllm_mode: server\n  vllm_server_base_url: "
             "http://127.0.0.1:1/\n  vllm_server_timeout: 1\n");
    write_config("closed.yaml", closed);
    char closed_log[4300];
    snprintf(closed_log, sizeof closed_log, "%s", harness_tmp_path("closed.log"));
    pid_t pid = harness_spawn_train(harness_tmp_path("closed.yaml"), harness_tmp_path("closed"),
                                    closed_log, two);
    int rc = dist_wait_at_most(pid, 60);
    CHECK(rc > 0 && rc < 128, "no server: the 2-rank job fails without hanging (%d)", rc);
    CHECK(dist_error_lines(closed_log) == 1 &&
              dist_log_mentions(closed_log, "key 'trl.vllm_mode': server: the generation server "
                                            "at http://127.0.0.1:1 did not answer within 1 s"),
          "no server: one error line naming trl.vllm_mode (see %s)", closed_log);

    /* a server that takes no weights (a vLLM stand-in: the proxy answers 404 there): rank 0
     * fails in the middle of the generation, rank 1 waits for it there, and both stop with one
     * error line */
    const char *refusing_argv[] = {"python3", proxy_py, up, log, "/update_safetensors/", NULL};
    int refusing_port;
    pid_t refusing = start_listener(refusing_argv, "refusing.out", "%d", &refusing_port);
    snprintf(closed, sizeof closed,
             "  use_vllm: true\n  vllm_mode: server\n  vllm_server_host: 127.0.0.1\n"
             "  vllm_server_port: %d\n",
             refusing_port);
    write_config("refusing.yaml", closed);
    snprintf(closed_log, sizeof closed_log, "%s", harness_tmp_path("refusing.log"));
    pid = harness_spawn_train(harness_tmp_path("refusing.yaml"), harness_tmp_path("refusing"),
                              closed_log, two);
    rc = dist_wait_at_most(pid, 60);
    CHECK(rc > 0 && rc < 128,
          "a server taking no weights: the 2-rank job fails without hanging "
          "(%d)",
          rc);
    CHECK(dist_error_lines(closed_log) == 1 &&
              dist_log_mentions(closed_log, "does not take weights over HTTP (POST "
                                            "/update_safetensors/ answered 404: Not Found)"),
          "a server taking no weights: one error line naming it (see %s)", closed_log);
    kill(refusing, SIGKILL);
    harness_wait_child(refusing);

done:
    kill(proxy, SIGKILL);
    kill(serve, SIGTERM);
    harness_wait_child(proxy);
    CHECK(harness_wait_child(serve) == 0, "rlhf serve stops cleanly on SIGTERM");
    printf("worst: metrics %.2g, weights %.2g relative\n", dist_worst.metric, dist_worst.weight);
    return harness_finish("test_dist_grpo_server");
}
