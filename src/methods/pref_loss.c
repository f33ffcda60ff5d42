#include "methods/pref_loss.h"

void pref_metrics_add(PrefMetrics *m, const char *name, double value) {
    if (m->n < PREF_MAX_METRICS) {
        m->name[m->n] = name;
        m->value[m->n++] = value;
    }
}
