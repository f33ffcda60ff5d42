/* rewards/python_reward.h in a build without Python (python/py_embed.h, PY_EMBED_ABSENT): a
 * config naming a Python reward function is refused when it is opened, before any training, so
 * that the user learns at once which entry needs Python and how to get a build that has it.
 * Built-in and command rewards (reward_registry.c) do not come here and keep working. */
#include "rewards/python_reward.h"

#include "common/error.h"
#include "python/py_embed.h"

#include <string.h>

int python_reward_open(RewardFunc *f, const char *spec) {
    *f = (RewardFunc){0};
    /* what python_reward.c would not even try to import: no module part or no function part */
    const char *dot = strrchr(spec, '.');
    if (!dot || dot == spec || !dot[1])
        return err_set("Reward function %s not found: expected builtin.<name>, {command: ...}, or "
                       "a Python function module.function, " PY_EMBED_ABSENT,
                       spec);
    return err_set("'%s' is a Python reward function, " PY_EMBED_ABSENT, spec);
}

int python_reward_wrap(RewardFunc *f, void *callable, const char *name) {
    *f = (RewardFunc){0};
    return err_set("reward function %s is a Python callable, " PY_EMBED_ABSENT, name);
}

int python_reward_is(const RewardFunc *f) {
    return 0;
}

int python_reward_take_logs(RewardFunc *f, json_t **metrics, json_t **extra) {
    return err_set("%s is not a Python reward function", f && f->name ? f->name : "this");
}
