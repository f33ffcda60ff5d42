/* `rlhf plot`: a run's curves from its metrics.jsonl drawn as small multiples, one panel per
 * metric (loss, learning rate, grad norm, then what the method logs: reward margins and
 * accuracies, KL, GRPO's reward mean and spread, completion lengths, replay-buffer figures...),
 * the training curve and its eval_ counterpart in the same panel. PNG or SVG (by the file's
 * extension), drawn with cairo; without cairo in the build every call says what to install. */
#ifndef RLHF_REPORT_PLOT_H
#define RLHF_REPORT_PLOT_H

#include "report/metrics_series.h"

/* The panels a plot of set shows, in order: the base keys (without eval_) that have at least
 * one point, the main curves first. Writes up to max pointers to keys owned by set into keys;
 * returns how many. */
int plot_panels(const MetricSet *set, const char **keys, int max);

/* Whether this build can draw: 0, or -1 with plot_write's error for out_path when it has no
 * cairo (so that `rlhf plot` says what to install before reading anything). */
int plot_check_available(const char *out_path);

/* Draws set into out_path (.png or .svg), titled `title`. Returns 0, or -1 with an error
 * naming the file (unknown extension, cannot write, no curve to draw, no cairo in this build). */
int plot_write(const MetricSet *set, const char *title, const char *out_path);

#endif
