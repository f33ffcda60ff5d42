/* The names reporters give metrics.jsonl's keys: HF Trainer's rewrite_logs, which its
 * TensorBoard and W&B callbacks both apply. */
#ifndef RLHF_REPORT_REPORT_TAGS_H
#define RLHF_REPORT_REPORT_TAGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The tag of a log entry's key: "eval_x" -> "eval/x", "test_x" -> "test/x", anything else ->
 * "train/x" ("loss" -> "train/loss", "rewards/margins" -> "train/rewards/margins"). Writes it
 * into buf (cap bytes, truncated if longer). */
void report_tag(const char *key, char *buf, size_t cap);

/* Whether a log entry's key/value pair is a scalar a reporter sends: a number (integer or
 * real), not the entry's "step" (which is where it is sent, HF's global_step, not a metric).
 * Non-finite values are null in metrics.jsonl and so are not numbers. */
bool report_is_scalar(const char *key, const json_t *value);

#endif
