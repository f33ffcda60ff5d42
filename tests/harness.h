/* A minimal test harness: CHECK records a failure and goes on; harness_finish prints
 * "<name>: N passed, N failed" and gives the exit status. */
#ifndef RLHF_TESTS_HARNESS_H
#define RLHF_TESTS_HARNESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

extern int harness_checks, harness_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        harness_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            harness_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* |got - want| <= rel * |want| + abs_tol */
bool harness_close(double got, double want, double rel, double abs_tol);

int harness_finish(const char *name);

/* Test data the same on every machine and libc: a 64-bit LCG (Knuth's MMIX constants) advanced
 * in *state, its top 53 bits as a double in [0, 1). Each test keeps its own state, so its data do
 * not depend on what other code drew. */
double harness_uniform(uint64_t *state);

/* harness_uniform scaled to a float in [-1, 1). */
float harness_frand(uint64_t *state);

/* Mostly uniform in [-1.5, 1.5); one value in 20 one whose bf16 rounding is special: a tie that
 * rounds down, one that rounds up, a NaN with a payload, -inf, a subnormal, -0. */
float harness_bf16_edge_value(uint64_t *state);

/* A fresh empty directory under $TMPDIR (or /tmp), removed by harness_finish. */
const char *harness_tmpdir(void);

/* harness_tmpdir() "/" name, in one of 4 rotating static buffers: a few stay valid at once. */
const char *harness_tmp_path(const char *name);

/* Whether two files exist and hold the same bytes. */
bool harness_same_file(const char *a, const char *b);

/* A path inside the source tree: RLHF_SOURCE_DIR "/" rel (static buffer, one at a time), or
 * $RLHF_TEST_SOURCE_DIR "/" rel where that is set (a test binary run on another machine). */
const char *harness_source_path(const char *rel);

/* The committed fixture at harness_source_path(rel) as JSON, owned by the caller; NULL after
 * printing "<file>: <parser's message> (line N)" to stderr when it is missing or malformed. */
json_t *harness_load_fixture_json(const char *rel);

/* Writes `len` bytes to `path` (plain write; test set-up only). Returns 0 or -1. */
int harness_write_file(const char *path, const void *data, size_t len);

/* <tmp>/prompts.jsonl: the GRPO tests' 12 arithmetic prompts, {"prompt": "Qi: add i and i+2",
 * "answer": "2i+2"}. Returns its path (harness_tmp_path's buffer). */
const char *harness_write_grpo_prompts(void);

/* <tmp>/NAME: n arithmetic preference pairs, {"prompt": "Qi: i plus i+2 is", "chosen": " 2i+2.",
 * "rejected": " 5i+1 or so, I guess."}. */
void harness_write_arith_pairs(const char *name, int n);

/* <tmp>/NAME: n KTO rows of the same questions, {"prompt", "completion", "label"}: row i is the
 * right answer (label true) unless i % 3 == 1, then the near miss (label false). */
void harness_write_arith_kto_rows(const char *name, int n);

/* <tmp>/untied: the llama_text fixture with its lm_head untied (a copy of the embedding), the one
 * tensor large enough for 8-bit AdamW moments (the embedding keeps fp32 ones, as under Trainer).
 * Returns the directory. */
const char *harness_write_untied_llama_text(void);

/* The rows of out_dir/metrics.jsonl, a JSON array (empty when the file is missing; caller
 * decrefs), and one row's number for key (0 when absent). */
json_t *harness_read_metrics(const char *out_dir);
double harness_metric(const json_t *rows, size_t i, const char *key);

/* Checks out_dir/metrics.jsonl against a reference run's log_history (a JSON array of per-step
 * objects, as TRL's trainer.state.log_history): the same number of steps, and every key of every
 * reference step logged as a number within 1e-4 of it (relative above 1), but skip_key (NULL:
 * none). Returns how many values were compared. */
int harness_check_log_history(const char *out_dir, const json_t *history, const char *skip_key);

/* Starts `build/rlhf train config --output_dir out [extra...]` (RLHF_BINARY_DIR "/rlhf", or
 * $RLHF_TEST_BINARY_DIR "/rlhf" where that is set) as a
 * child process, its stdout (progress) and stderr (warnings, errors) to log_path (appended);
 * extra ends with NULL. Returns the pid. The
 * tests that signal or kill a run need it in a process of its own. */
pid_t harness_spawn_train(const char *config, const char *out, const char *log_path,
                          const char *const *extra);

/* Waits for a child: its exit status, or 128 + the signal that ended it. */
int harness_wait_child(pid_t pid);

/* Checks that every checkpoint-N in out is whole (checkpoint.h, invariant 1): its model,
 * optimizer, config and tokenizer files are there and trainer_state.json says global_step N.
 * Returns how many checkpoint-N there are; *temp_entries (may be NULL) gets how many
 * unfinished (".tmp") entries lie beside them. */
int harness_check_checkpoints(const char *out, int *temp_entries);

/* Calls fn(name) for each directory under root (a source-relative path) that holds a file
 * named `marker`, in readdir order; returns how many. */
int harness_foreach_case(const char *root, const char *marker, void (*fn)(const char *name));

#endif
