/* The completions two GRPO runs logged, compared row by row: the device against the CPU, one
 * rank against several. */
#ifndef RLHF_TESTS_LOGGED_COMPLETIONS_H
#define RLHF_TESTS_LOGGED_COMPLETIONS_H

/* The completions.jsonl of run directories a_dir and b_dir (one row per completion and step;
 * rank 0's under several ranks): CHECKs, reporting under `name`, that both hold `rows` rows and
 * that each pair has the same step, prompt and completion text; the first differing pair is
 * printed with the runs' labels a_label and b_label. */
void logged_completions_same(const char *name, const char *a_dir, const char *a_label,
                             const char *b_dir, const char *b_label, int rows);

#endif
