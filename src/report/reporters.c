#include "report/reporter.h"

#include "common/error.h"

#include <string.h>

/* The one warning of a reporter that did not start, or stopped (invariant 1). */
static void warn(Reporters *rs, const char *name, const char *what, bool started) {
    fprintf(rs->log ? rs->log : stderr,
            "warning: %s: %s; %s reporting to %s in this run (metrics.jsonl has every value)\n",
            name, what, started ? "no more" : "not", name);
}

void reporters_open(Reporters *rs, const TrainConfig *cfg, FILE *log) {
    memset(rs, 0, sizeof *rs);
    rs->log = log;
    const TrackingConfig *t = &cfg->tracking;
    if (t->tensorboard) {
        if (tensorboard_reporter_open(&rs->r[rs->n], cfg, log) == 0)
            rs->n++;
        else
            warn(rs, "tensorboard", err_msg(), false);
    }
    if (t->wandb) {
        int rc = wandb_reporter_open(&rs->r[rs->n], cfg, t->wandb_optional, log);
        if (rc == 0)
            rs->n++;
        else if (rc < 0)
            warn(rs, "wandb", err_msg(), false);
    }
}

void reporters_log(Reporters *rs, const json_t *entry) {
    const json_t *step = json_object_get(entry, "step");
    int64_t s = json_is_integer(step) ? (int64_t)json_integer_value(step) : 0;
    for (int i = 0; i < rs->n;) {
        Reporter *r = &rs->r[i];
        if (r->log(r->ctx, entry, s) == 0) {
            i++;
            continue;
        }
        warn(rs, r->name, err_msg(), true); /* invariant 1: dropped */
        r->close(r->ctx);
        memmove(r, r + 1, (size_t)(rs->n - i - 1) * sizeof *r);
        rs->n--;
    }
}

void reporters_close(Reporters *rs) {
    for (int i = 0; i < rs->n; i++)
        rs->r[i].close(rs->r[i].ctx);
    rs->n = 0;
}
