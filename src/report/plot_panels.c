/* Which panels a plot shows, without cairo: shared by the drawing and its tests. */
#include "report/plot.h"

#include <stdbool.h>
#include <string.h>

/* The main curves, in this order, when logged; every other key follows in log order. */
static const char *const first[] = {"loss",
                                    "learning_rate",
                                    "grad_norm",
                                    "rewards/margins",
                                    "rewards/accuracies",
                                    "rewards/chosen",
                                    "rewards/rejected",
                                    "kl",
                                    "reward",
                                    "reward_std",
                                    "completions/mean_length"};

/* Bookkeeping keys, not curves of the training: the epoch counter and wall-clock timings. */
static bool is_bookkeeping(const char *key) {
    return strcmp(key, "epoch") == 0 || strcmp(key, "step_time") == 0 ||
           strcmp(key, "skipped_steps") == 0 || strncmp(key, "time/", 5) == 0 ||
           strstr(key, "runtime") || strstr(key, "per_second");
}

static const char *base_key(const char *key) {
    return strncmp(key, "eval_", 5) == 0 ? key + 5 : key;
}

static bool listed(const char **keys, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return true;
    return false;
}

int plot_panels(const MetricSet *set, const char **keys, int max) {
    int n = 0;
    for (size_t k = 0; k < sizeof first / sizeof *first && n < max; k++)
        for (int i = 0; i < set->n; i++)
            if (strcmp(base_key(set->s[i].key), first[k]) == 0 && !listed(keys, n, first[k])) {
                keys[n++] = base_key(set->s[i].key);
                break;
            }
    for (int i = 0; i < set->n && n < max; i++) {
        const char *b = base_key(set->s[i].key);
        if (!is_bookkeeping(b) && !listed(keys, n, b)) keys[n++] = b;
    }
    return n;
}
