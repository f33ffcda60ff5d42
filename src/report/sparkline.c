#include "report/sparkline.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

void sparkline(const double *values, int n, int width, char *buf, size_t cap) {
    static const char *const blocks[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    buf[0] = '\0';
    if (n <= 0 || width <= 0) return;
    int cells = n < width ? n : width;
    double mean[256];
    if (cells > 256) cells = 256;
    double lo = INFINITY, hi = -INFINITY;
    for (int c = 0; c < cells; c++) { /* cell c holds points [c*n/cells, (c+1)*n/cells) */
        int a = (int)((long long)c * n / cells), b = (int)((long long)(c + 1) * n / cells);
        double sum = 0;
        for (int i = a; i < b; i++)
            sum += values[i];
        mean[c] = sum / (double)(b - a);
        if (mean[c] < lo) lo = mean[c];
        if (mean[c] > hi) hi = mean[c];
    }
    size_t len = 0;
    for (int c = 0; c < cells && len + 4 <= cap; c++) {
        int level = hi > lo ? (int)lrint(7.0 * (mean[c] - lo) / (hi - lo)) : 3;
        memcpy(buf + len, blocks[level], 3);
        len += 3;
    }
    buf[len] = '\0';
}

void sparkline_summary(FILE *out, const MetricSet *set) {
    static const char *const shown[] = {"loss",
                                        "eval_loss",
                                        "rewards/margins",
                                        "eval_rewards/margins",
                                        "rewards/accuracies",
                                        "eval_rewards/accuracies",
                                        "reward",
                                        "reward_std",
                                        "kl",
                                        "completions/mean_length",
                                        "learning_rate",
                                        "grad_norm"};
    bool header = false;
    for (size_t k = 0; k < sizeof shown / sizeof *shown; k++) {
        const MetricSeries *m = metrics_series_find(set, shown[k]);
        if (!m || m->n < 2) continue;
        if (!header) fprintf(out, "curves (step %g to %g):\n", m->step[0], m->step[m->n - 1]);
        header = true;
        char line[3 * 40 + 1];
        sparkline(m->value, m->n, 40, line, sizeof line);
        double lo = m->value[0];
        for (int i = 1; i < m->n; i++)
            lo = fmin(lo, m->value[i]);
        fprintf(out, "  %-24s %s  %.4g -> %.4g (min %.4g)\n", m->key, line, m->value[0],
                m->value[m->n - 1], lo);
    }
}
