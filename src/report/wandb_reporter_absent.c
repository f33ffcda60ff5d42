/* The W&B reporter in a build without Python (RLHF_PYTHON=OFF): wandb is a Python package, so
 * a config asking for it gets one warning (reporters.c) saying what is missing. */
#include "common/error.h"
#include "python/py_embed.h"
#include "report/reporter.h"

int wandb_reporter_open(Reporter *r, const TrainConfig *cfg, bool optional, FILE *log) {
    if (optional) return 1; /* report_to: all reports to what is there */
    return err_set("W&B reporting (wandb_project / report_to: wandb) runs the wandb Python "
                   "package, " PY_EMBED_ABSENT);
}
