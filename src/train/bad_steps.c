#include "train/bad_steps.h"

#include "common/error.h"
#include "train/metrics_log.h"

#include <math.h>

BadSteps bad_steps_init(int64_t limit, const json_t *log_history) {
    return (BadSteps){limit, (int64_t)metrics_last_logged(log_history, "skipped_steps"), 0};
}

int bad_steps_record(BadSteps *b, int rc, int64_t step, const StepStats *st, FILE *log) {
    if (rc != TRAINER_STEP_SKIPPED) {
        b->consecutive = 0;
        return 0;
    }
    b->total++;
    b->consecutive++;
    fprintf(log,
            "warning: step %lld skipped: loss %g, grad_norm %g is not finite; the weights and the "
            "optimizer state are unchanged (%lld skipped so far)\n",
            (long long)step, st->loss, st->grad_norm, (long long)b->total);
    if (b->limit > 0 && b->consecutive >= b->limit)
        return err_set("%lld consecutive steps (%lld to %lld) had a non-finite loss or gradient "
                       "norm (max_consecutive_bad_steps: %lld): training has diverged; stopped "
                       "without saving, so the last checkpoint holds the last good weights. Lower "
                       "learning_rate or check the data",
                       (long long)b->consecutive, (long long)(step - b->consecutive + 1),
                       (long long)step, (long long)b->limit);
    return 0;
}

void bad_steps_log(const BadSteps *b, json_t *entry) {
    if (b->total > 0) json_object_set_new(entry, "skipped_steps", json_integer(b->total));
}

json_t *json_real_or_null(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}
