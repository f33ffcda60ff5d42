/* The metrics a method logs between two log lines, as TRL's trainers keep them: each micro-batch
 * adds one value per key, and a log line carries the mean of each key over the micro-batches
 * that added it since the previous line (a key none added is absent). num_tokens is the one
 * running figure: the tokens trained on so far, logged as it stands. */
#ifndef RLHF_TRAIN_STEP_METRICS_H
#define RLHF_TRAIN_STEP_METRICS_H

#include <jansson.h>

#define STEP_METRICS_MAX_KEYS 32

typedef struct {
    const char *key[STEP_METRICS_MAX_KEYS]; /* static strings (TRL's names) */
    double sum[STEP_METRICS_MAX_KEYS];
    int count[STEP_METRICS_MAX_KEYS];
    int n_keys;
    double num_tokens; /* attention-mask tokens trained on so far */
} StepMetrics;

/* Adds one micro-batch's value of key (a string that outlives the metrics). A NaN value is not
 * added. */
void step_metrics_add(StepMetrics *m, const char *key, double value);

/* Adds the running token count and logs it as num_tokens. */
void step_metrics_add_tokens(StepMetrics *m, double tokens);

/* Writes prefix + key = the mean of each key to entry and starts over. With a prefix (eval_)
 * num_tokens is left out: it counts what was trained on, and evaluation trains on nothing. */
void step_metrics_flush(StepMetrics *m, json_t *entry, const char *prefix);

/* step_metrics_flush over every rank of a multi-process run (dist.h): rank 0 writes the mean of
 * each key over all the ranks' micro-batches, and num_tokens summed over ranks; every rank
 * starts over. Collective: every rank calls it at the same point. In one process it is
 * step_metrics_flush. */
void step_metrics_flush_ranks(StepMetrics *m, json_t *entry, const char *prefix);

#endif
