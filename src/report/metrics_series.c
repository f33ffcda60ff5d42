#include "report/metrics_series.h"

#include "common/error.h"
#include "report/report_tags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static MetricSeries *series_for(MetricSet *set, const char *key) {
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i].key, key) == 0) return &set->s[i];
    set->s = xrealloc(set->s, (size_t)(set->n + 1) * sizeof *set->s);
    MetricSeries *m = &set->s[set->n++];
    *m = (MetricSeries){.key = xstrdup(key)};
    return m;
}

static void add_entry(MetricSet *set, const json_t *entry) {
    const json_t *step = json_object_get(entry, "step");
    if (!json_is_number(step)) return;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        if (!report_is_scalar(key, v)) continue;
        MetricSeries *m = series_for(set, key);
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 16;
            m->step = xrealloc(m->step, (size_t)m->cap * sizeof *m->step);
            m->value = xrealloc(m->value, (size_t)m->cap * sizeof *m->value);
        }
        m->step[m->n] = json_number_value(step);
        m->value[m->n++] = json_number_value(v);
    }
}

void metrics_series_from_entries(MetricSet *set, const json_t *entries) {
    memset(set, 0, sizeof *set);
    for (size_t i = 0; i < json_array_size(entries); i++)
        add_entry(set, json_array_get(entries, i));
}

int metrics_series_read(MetricSet *set, const char *path) {
    memset(set, 0, sizeof *set);
    FILE *f = fopen(path, "r");
    if (!f) return err_set("%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int lineno = 1; getline(&line, &cap, f) > 0; lineno++) {
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t je;
        json_t *entry = json_loads(line, 0, &je);
        if (!json_is_object(entry)) {
            json_decref(entry);
            rc = err_set("%s:%d: expected one JSON object a line (a metrics.jsonl entry): %s", path,
                         lineno, entry ? "not an object" : je.text);
            break;
        }
        add_entry(set, entry);
        json_decref(entry);
    }
    free(line);
    fclose(f);
    if (rc != 0) metrics_series_free(set);
    return rc;
}

const MetricSeries *metrics_series_find(const MetricSet *set, const char *key) {
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i].key, key) == 0) return &set->s[i];
    return NULL;
}

void metrics_series_free(MetricSet *set) {
    for (int i = 0; i < set->n; i++) {
        free(set->s[i].key);
        free(set->s[i].step);
        free(set->s[i].value);
    }
    free(set->s);
    memset(set, 0, sizeof *set);
}
