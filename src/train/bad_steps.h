/* Numerical faults in a training loop: a step whose loss or gradient norm is NaN or infinite is
 * skipped by trainer_step (TRAINER_STEP_SKIPPED); this counts the skips, warns on the log, and
 * stops the run after max_consecutive_bad_steps of them in a row, when training has evidently
 * diverged rather than met one bad batch. */
#ifndef RLHF_TRAIN_BAD_STEPS_H
#define RLHF_TRAIN_BAD_STEPS_H

#include "train/trainer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int64_t limit;       /* max_consecutive_bad_steps; 0: never stop */
    int64_t total;       /* skipped steps since the run began, resumed runs included */
    int64_t consecutive; /* the current streak */
} BadSteps;

/* A guard for a run; `log_history` (a resumed run's) gives the skipped_steps counted so far. */
BadSteps bad_steps_init(int64_t limit, const json_t *log_history);

/* Records trainer_step's result `rc` (0 or TRAINER_STEP_SKIPPED) for the step now done, `step`.
 * A skip is warned about on `log`. Returns 0 to go on, or -1 with an error when the streak has
 * reached the limit. */
int bad_steps_record(BadSteps *b, int rc, int64_t step, const StepStats *st, FILE *log);

/* Adds skipped_steps (cumulative) to a log entry once any step was skipped. */
void bad_steps_log(const BadSteps *b, json_t *entry);

/* v as a JSON number, or null when it is NaN or infinite (JSON has no such numbers). */
json_t *json_real_or_null(double v);

#endif
