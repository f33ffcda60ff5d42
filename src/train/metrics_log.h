/* A run's log: output_dir/metrics.jsonl (one JSON object a line, HF's keys), the
 * log_history array that trainer_state.json carries in every checkpoint, and the reporters
 * (report/reporter.h: TensorBoard, W&B) every entry written to metrics.jsonl also goes to. */
#ifndef RLHF_TRAIN_METRICS_LOG_H
#define RLHF_TRAIN_METRICS_LOG_H

#include "report/reporter.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* A run's metrics.jsonl. A resumed run appends to it; a fresh run replaces it, but only when it
 * logs its first entry: a run that fails before then (a bad reward function, a dataset error)
 * leaves the previous run's file as it was. */
typedef struct {
    FILE *fp;
    bool replace_pending; /* fresh run, nothing logged yet: empty the file at the first entry */
    bool created;         /* the file was not there: removed again if nothing is logged */
    char path[4096];
    Reporters reporters; /* opened by metrics_reporters_open; closed with the file */
} MetricsFile;

/* Opens output_dir/metrics.jsonl for appending (creating it). Returns 0, or -1 with an error
 * naming the path. A MetricsFile left zeroed (the ranks other than 0) writes nothing. */
int metrics_file_open(MetricsFile *f, const char *output_dir, bool resumed);

/* Opens the reporters cfg asks for (reporter.h's reporters_open: never fails, warns on log).
 * Only on an open MetricsFile (rank 0). */
void metrics_reporters_open(MetricsFile *f, const TrainConfig *cfg, FILE *log);

/* Closes the file and the reporters; one this run created and never wrote to is removed. Safe on a
 * zeroed or already closed MetricsFile. */
void metrics_file_close(MetricsFile *f);

/* Appends a log entry: to metrics.jsonl (one line, when f is open) and its reporters, and to
 * log_history (a new reference; the caller keeps its own). */
void metrics_log_entry(MetricsFile *f, json_t *log_history, json_t *entry);

/* The last value of key in the log history (0 when never logged): what a resumed run's running
 * figures continue from. */
double metrics_last_logged(const json_t *log_history, const char *key);

#endif
