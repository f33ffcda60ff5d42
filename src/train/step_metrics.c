#include "train/step_metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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
