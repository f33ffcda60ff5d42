/* A run's logged values as curves: for each key of metrics.jsonl (or a log history), the steps
 * it was logged at and its values. What `rlhf plot` draws and the end-of-run sparklines show. */
#ifndef RLHF_REPORT_METRICS_SERIES_H
#define RLHF_REPORT_METRICS_SERIES_H

#include <jansson.h>

typedef struct {
    char *key; /* as in metrics.jsonl: "loss", "eval_loss", "rewards/margins" */
    int n, cap;
    double *step, *value; /* n points, in log order */
} MetricSeries;

typedef struct {
    MetricSeries *s; /* keys in order of first appearance */
    int n;
} MetricSet;

/* Every scalar of every entry (report_tags.h's report_is_scalar; nulls are gaps) of a JSON array
 * of log entries, each at its "step". */
void metrics_series_from_entries(MetricSet *set, const json_t *entries);

/* The same from a metrics.jsonl file. Returns 0, or -1 with an error naming the file and line
 * (cannot open, a line that is not a JSON object). */
int metrics_series_read(MetricSet *set, const char *path);

/* The series of key, or NULL. */
const MetricSeries *metrics_series_find(const MetricSet *set, const char *key);

void metrics_series_free(MetricSet *set);

#endif
