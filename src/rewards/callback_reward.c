#include "rewards/callback_reward.h"

#include "common/error.h"
#include "rewards/reward_batch_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    RewardCallbackFn fn;
    void *user_data;
} CallbackReward;

static int callback_score(void *impl, const RewardBatch *b, double *out) {
    CallbackReward *c = impl;
    json_t *req = reward_batch_to_json(b);
    if (!req) return err_prefix("reward function %s", c->name);
    char *text = json_dumps(req, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(req);
    if (!text) return err_set("reward function %s: the batch cannot be written as JSON", c->name);
    /* the function may leave scores unwritten: they then read as "no score", never as garbage */
    for (int i = 0; i < b->n; i++)
        out[i] = NAN;
    char error[1024] = "";
    int rc = c->fn(c->user_data, text, (size_t)b->n, out, error, sizeof error);
    free(text);
    if (rc == 0) return 0;
    error[sizeof error - 1] = '\0';
    return err_set("reward function %s failed: %s", c->name,
                   *error ? error : "it returned an error without a message");
}

static void callback_close(void *impl) {
    CallbackReward *c = impl;
    if (!c) return;
    free(c->name);
    free(c);
}

int callback_reward_open(RewardFunc *f, const char *name, RewardCallbackFn fn, void *user_data) {
    CallbackReward *c = xcalloc(1, sizeof *c);
    c->name = xstrdup(name);
    c->fn = fn;
    c->user_data = user_data;
    *f = (RewardFunc){
        .name = xstrdup(name), .impl = c, .score = callback_score, .close = callback_close};
    return 0;
}
