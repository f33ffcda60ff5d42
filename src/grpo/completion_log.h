/* trl.log_completions: what TRL's GRPOTrainer keeps of the latest generation batch (its _logs
 * deques, sized to the generation batch: prompt and completion texts, each reward function's
 * reward, the advantage) and what its log() does with them at every logging step: print a
 * sample (num_completions_to_print rows, drawn at random; all when unset) and write the whole
 * table. TRL writes output_dir/completions/completions_<step>.parquet; rlhf.c appends the rows to
 * output_dir/completions.jsonl, one JSON object per completion:
 *   {"step": N, "prompt": "...", "completion": "...", "<reward function>": r or null, ...,
 *    "advantage": a}
 * (TRL's table columns, in its order). */
#ifndef RLHF_GRPO_COMPLETION_LOG_H
#define RLHF_GRPO_COMPLETION_LOG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char path[4200];       /* output_dir/completions.jsonl */
    bool truncate_pending; /* a fresh run empties the file at its first write (a resumed one
                              appends), as metrics.jsonl: a run that fails before its first
                              logging step leaves the previous file alone */
    json_t *rows;          /* the latest generation batch's rows (above, without "step");
                              NULL: none yet */
    int num_to_print;      /* rows of the printed sample; <= 0: none (TRL's rule) */
    uint64_t seed;         /* with the step, picks the printed rows */
} CompletionLog;

/* resumed: the run continues a checkpoint (the file is appended to). Returns 0, or -1 with an
 * error when the path is too long. */
int completion_log_open(CompletionLog *cl, const char *output_dir, bool resumed, int num_to_print,
                        uint64_t seed);
void completion_log_close(CompletionLog *cl);

/* Replaces the kept rows with `rows` (the log takes the reference). */
void completion_log_keep(CompletionLog *cl, json_t *rows);

/* The logging step `step`: appends the kept rows to the file and prints the sample to out.
 * Nothing kept: nothing done. Returns 0, or -1 with an error naming the file. */
int completion_log_write(CompletionLog *cl, int64_t step, FILE *out);

#endif
