/* builtin.length: a reward peaking at a target completion length (in tokens), falling linearly
 * to 0 at no tokens and at twice the target. Used to steer a model away from both terse and
 * rambling answers without a hard cut-off. */
#include "common/error.h"
#include "common/json_util.h"
#include "rewards/builtin_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    char *name;
    int64_t target;
} Length;

static void length_close(void *impl) {
    Length *l = impl;
    free(l->name);
    free(l);
}

static int length_score(void *impl, const RewardBatch *b, double *out) {
    const Length *l = impl;
    if (b->n > 0 && !b->completion_lens) {
        err_set("the batch has no completion lengths");
        return err_prefix("reward function '%s'", l->name);
    }
    double target = (double)l->target;
    for (int i = 0; i < b->n; i++)
        out[i] = fmax(0.0, 1.0 - fabs((double)b->completion_lens[i] - target) / target);
    return 0;
}

int builtin_length_open(RewardFunc *f, const char *name, const json_t *options) {
    int64_t target = 0;
    int found = json_get_int64(options, "target", &target);
    if (found < 0) return -1;
    if (found == 0) return err_set("option 'target' is required: the completion length in tokens");
    if (target <= 0)
        return err_set("option 'target': expected a positive number of tokens, got %lld",
                       (long long)target);
    Length *l = xcalloc(1, sizeof *l);
    l->name = xstrdup(name);
    l->target = target;
    f->impl = l;
    f->score = length_score;
    f->close = length_close;
    return 0;
}
