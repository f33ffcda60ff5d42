/* The run's main curves as one line each of block characters (▁▂▃▄▅▆▇█), printed at the end of
 * `rlhf train`: a glance at whether the loss fell and the rewards rose, without a plot. */
#ifndef RLHF_REPORT_SPARKLINE_H
#define RLHF_REPORT_SPARKLINE_H

#include "report/metrics_series.h"

#include <stddef.h>
#include <stdio.h>

/* The sparkline of values (n of them) in at most width cells (UTF-8, 3 bytes a cell): each cell
 * the mean of its share of the points, scaled between the smallest and largest cell. A flat
 * series is all ▄. Writes into buf (cap bytes, always terminated). */
void sparkline(const double *values, int n, int width, char *buf, size_t cap);

/* One line per main curve that was logged at least twice (loss, eval_loss, reward margins and
 * accuracies, GRPO's reward and its spread, KL, completion length, learning rate, grad norm):
 * "  loss              ▇▆▅▃▂▁  first 0.693 -> last 0.521 (min 0.498)". Nothing when none
 * qualifies. */
void sparkline_summary(FILE *out, const MetricSet *set);

#endif
