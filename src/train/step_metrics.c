#include "train/step_metrics.h"

#include "common/error.h"
#include "dist/dist.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void step_metrics_add(StepMetrics *m, const char *key, double value) {
    if (isnan(value)) return; /* JSON has no NaN; TRL would log NaN for the whole window */
    int k = 0;
    while (k < m->n_keys && strcmp(m->key[k], key) != 0)
        k++;
    if (k == m->n_keys) {
        if (k == STEP_METRICS_MAX_KEYS) return;
        m->key[m->n_keys++] = key;
        m->sum[k] = 0;
        m->count[k] = 0;
    }
    m->sum[k] += value;
    m->count[k]++;
}

void step_metrics_add_tokens(StepMetrics *m, double tokens) {
    m->num_tokens += tokens;
    step_metrics_add(m, "num_tokens", m->num_tokens);
}

void step_metrics_flush(StepMetrics *m, json_t *entry, const char *prefix) {
    for (int k = 0; k < m->n_keys; k++) {
        bool tokens = strcmp(m->key[k], "num_tokens") == 0;
        if (tokens && *prefix) continue;
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix, m->key[k]);
        json_object_set_new(entry, name,
                            json_real(tokens ? m->num_tokens : m->sum[k] / m->count[k]));
    }
    m->n_keys = 0;
}

/* One rank's metrics as bytes, for gathering on rank 0. */
typedef struct {
    char key[STEP_METRICS_MAX_KEYS][64];
    double sum[STEP_METRICS_MAX_KEYS];
    int count[STEP_METRICS_MAX_KEYS];
    int n_keys;
    double num_tokens;
} MetricsRecord;

void step_metrics_flush_ranks(StepMetrics *m, json_t *entry, const char *prefix) {
    if (dist_size() == 1) {
        step_metrics_flush(m, entry, prefix);
        return;
    }
    MetricsRecord mine;
    memset(&mine, 0, sizeof mine);
    for (int k = 0; k < m->n_keys; k++) {
        snprintf(mine.key[k], sizeof mine.key[k], "%s", m->key[k]);
        mine.sum[k] = m->sum[k];
        mine.count[k] = m->count[k];
    }
    mine.n_keys = m->n_keys;
    mine.num_tokens = m->num_tokens;
    int world = dist_size();
    MetricsRecord *all = dist_is_root() ? xmalloc((size_t)world * sizeof *all) : NULL;
    dist_gather_bytes(&mine, sizeof mine, all);
    if (all) {
        /* every rank's micro-batches as if one rank had run them all: sums and counts add up,
         * and so do the running token counts (each rank counts its own tokens) */
        StepMetrics merged = {0};
        for (int r = 0; r < world; r++) {
            for (int j = 0; j < all[r].n_keys; j++) {
                int k = 0;
                while (k < merged.n_keys && strcmp(merged.key[k], all[r].key[j]) != 0)
                    k++;
                if (k == merged.n_keys) {
                    merged.key[merged.n_keys++] = all[r].key[j];
                    merged.sum[k] = 0;
                    merged.count[k] = 0;
                }
                merged.sum[k] += all[r].sum[j];
                merged.count[k] += all[r].count[j];
            }
            merged.num_tokens += all[r].num_tokens;
        }
        step_metrics_flush(&merged, entry, prefix);
        free(all);
    }
    m->n_keys = 0;
}
