#include "rewards/reward_registry.h"

#include "common/error.h"
#include "rewards/builtin_rewards.h"
#include "rewards/callback_reward.h"
#include "rewards/command_reward.h"
#include "rewards/python_reward.h"

#include <stdbool.h>
#include <string.h>

static bool is_builtin(const char *spec) {
    return strncmp(spec, "builtin.", 8) == 0;
}

static int open_function(RewardFunc *f, const char *spec, const json_t *options) {
    if (is_builtin(spec)) return builtin_reward_open(f, spec, options);
    if (options && json_object_size(options) > 0)
        return err_set("options are for built-in functions; \"%s\" takes none", spec);
    return python_reward_open(f, spec);
}

static int open_command(RewardFunc *f, const json_t *spec) {
    const json_t *cmd = json_object_get(spec, "command"), *name = json_object_get(spec, "name"),
                 *timeout = json_object_get(spec, "timeout");
    if (!json_is_string(cmd)) return err_set("key 'command': expected a command line");
    if (name && !json_is_string(name)) return err_set("key 'name': expected a string");
    if (timeout && !json_is_number(timeout))
        return err_set("key 'timeout': expected a number of seconds");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)spec, k, v) {
        if (strcmp(k, "command") && strcmp(k, "name") && strcmp(k, "timeout"))
            return err_set("unknown key '%s' (command, name, timeout)", k);
    }
    return command_reward_open(f, name ? json_string_value(name) : "command",
                               json_string_value(cmd), timeout ? json_number_value(timeout) : 120);
}

static int open_callback(RewardFunc *f, const json_t *spec, const RewardCallbacks *callbacks) {
    const json_t *name = json_object_get(spec, "callback");
    if (!json_is_string(name) || json_object_size(spec) != 1)
        return err_set("expected {callback: NAME} and no other key");
    const char *n = json_string_value(name);
    for (int i = 0; callbacks && i < callbacks->n; i++) {
        const RewardCallback *cb = &callbacks->items[i];
        if (strcmp(cb->name, n) != 0) continue;
        return cb->fn ? callback_reward_open(f, cb->name, cb->fn, cb->user_data)
                      : python_reward_wrap(f, cb->python, cb->name);
    }
    return err_set("no reward function is registered under the name '%s' (callbacks are "
                   "registered by a program that embeds rlhf.c: rlhf_trainer_set_reward)",
                   n);
}

static int open_one(RewardFunc *f, const json_t *spec, const RewardCallbacks *callbacks) {
    if (json_is_string(spec)) return open_function(f, json_string_value(spec), NULL);
    if (!json_is_object(spec))
        return err_set("expected a function name (\"rewards.my_reward\", \"builtin.accuracy\") or "
                       "a mapping ({function: ..., <option>: ...} or {command: ...})");
    if (json_object_get(spec, "callback")) return open_callback(f, spec, callbacks);
    if (json_object_get(spec, "command")) return open_command(f, spec);
    const json_t *fn = json_object_get(spec, "function");
    if (!json_is_string(fn))
        return err_set("a mapping needs 'function' (a built-in or module.fn), 'command' or "
                       "'callback'");
    json_t *options = json_deep_copy(spec);
    json_object_del(options, "function");
    int rc = open_function(f, json_string_value(fn), options);
    json_decref(options);
    return rc;
}

int reward_funcs_open(RewardFunc *funcs, const json_t *specs, const char *source,
                      const RewardCallbacks *callbacks) {
    size_t n = json_array_size(specs);
    memset(funcs, 0, n * sizeof *funcs);
    for (size_t i = 0; i < n; i++)
        if (open_one(&funcs[i], json_array_get(specs, i), callbacks) != 0) {
            reward_funcs_close(funcs, (int)i);
            return err_prefix("%s: trl.reward_funcs[%zu]", source, i);
        }
    return 0;
}

void reward_funcs_close(RewardFunc *funcs, int n) {
    for (int i = 0; i < n; i++)
        reward_func_close(&funcs[i]);
}
