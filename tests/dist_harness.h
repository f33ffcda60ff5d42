/* What the multi-process tests (test_dist_train, test_dist_grpo) share: running `rlhf train`
 * as one process and as 2 ranks (--nproc 2) and comparing the two, and finding, killing and
 * waiting for the ranks mpirun started. */
#ifndef RLHF_TESTS_DIST_HARNESS_H
#define RLHF_TESTS_DIST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

/* Where a multi-process test starts: false (having said why; the test then exits 77, which
 * ctest shows as skipped) in a build without MPI or its launcher. Else it sets OMP_NUM_THREADS
 * to 1 for the runs it starts: two ranks of one thread against one process of one thread leave
 * the order in which the ranks' gradients are summed as the only difference (with more threads,
 * one process differs from itself on another thread count by as much). */
bool dist_tests_can_run(const char *test_name);

double dist_now(void);

/* Runs `rlhf train <tmp>/config --output_dir out extra...` (its stderr appended to
 * <tmp>/train.log); its exit status. */
int dist_train(const char *config, const char *out, const char *const *extra);

/* The worst relative differences the comparisons below have measured so far. */
typedef struct {
    double metric, weight;
} DistWorst;
extern DistWorst dist_worst;

/* The metrics of two runs line by line: the same keys, every number within 1e-5 relative (or
 * 1e-6 absolute: a GRPO loss is ~0 by construction at some steps), num_tokens and step exactly.
 * Prints the worst relative difference. */
void dist_compare_metrics(const char *name, const char *one, const char *two);
/* The same with another bound: rel relative or abs_tol absolute (bf16 runs). */
void dist_compare_metrics_within(const char *name, const char *one, const char *two, double rel,
                                 double abs_tol);

/* The final weights (model.safetensors) or adapter of two output directories: within 1e-5 of
 * the largest weight (each tensor's largest, for an adapter). Prints the gap. */
void dist_compare_outputs(const char *name, const char *one, const char *two);
/* The same within bound (of the largest weight) in place of 1e-5. */
void dist_compare_outputs_within(const char *name, const char *one, const char *two, double bound);
/* The gap those compare, unchecked: the largest difference of the final weights relative to the
 * largest weight, or of an adapter relative to each tensor's largest; INFINITY when a file is
 * missing or the two do not hold the same tensors. */
double dist_outputs_gap(const char *one, const char *two);

/* One process with gradient accumulation ga1 against 2 ranks with ga2 (the same global batch
 * when ga1 = 2 x ga2), both with `extra` (NULL-terminated), compared as above. Output
 * directories <tmp>/name and <tmp>/name-2ranks. */
void dist_one_vs_two(const char *name, const char *config, const char *ga1, const char *ga2,
                     const char *const *extra);

/* The resume check: `config` (6 steps) run on 2 ranks with accumulation ga2, ZeRO-1 and a
 * checkpoint every 2 steps; its checkpoint-2 alone (what a run killed right after it leaves)
 * resumed on 2 ranks ends bit for bit where the uninterrupted run does: model.safetensors,
 * checkpoint-6/optimizer.safetensors and each of `same` (paths under the output directory,
 * NULL-terminated); resumed in one process with ga1, its weights agree within 1e-5. */
void dist_check_resume(const char *config, const char *ga2, const char *ga1,
                       const char *const *same);

/* The kill check: `config` run on 2 ranks (`--nproc 2` then `extra`, NULL-terminated) into
 * <tmp>/die while rank 1 is SIGKILLed after checkpoint-2: the job ends in seconds with a
 * failure status and mpirun's message naming the rank, leaves no final model and whole
 * checkpoints (the latest holding `ckpt_file` too, when not NULL), and resumed it ends at the
 * weights of the uninterrupted run in `straight`. */
void dist_check_rank_dies(const char *config, const char *const *extra, const char *straight,
                          const char *ckpt_file);

/* `rm -rf to && cp -r from to`, checked. */
void dist_copy_tree(const char *from, const char *to);

/* The pid of the rank `rank` among mpirun's children, or -1. */
pid_t dist_rank_pid(pid_t launcher, int rank);

/* waitpid with a deadline: the exit status (128 + signal), or -1 after `seconds` (the child is
 * then killed). */
int dist_wait_at_most(pid_t pid, double seconds);

/* Whether the file at path holds `what`. */
bool dist_log_mentions(const char *path, const char *what);

/* How many "rlhf: error:" lines the file at path holds. */
int dist_error_lines(const char *path);

#endif
