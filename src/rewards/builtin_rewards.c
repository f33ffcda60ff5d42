/* The table of built-ins, option-key checking and the completion text they all judge. */
#include "rewards/builtin_rewards.h"

#include "common/error.h"
#include "common/json_util.h"
#include "rewards/builtin_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;         /* as reward_funcs names it */
    const char *default_name; /* as metrics name it */
    const char *const *keys;  /* options besides "name", NULL-terminated */
    int (*open)(RewardFunc *f, const char *name, const json_t *options);
} Builtin;

static const char *const accuracy_keys[] = {"column", "extract", NULL};
static const char *const format_keys[] = {"pattern", "match", "dotall", NULL};
static const char *const length_keys[] = {"target", NULL};

static const Builtin builtins[] = {
    {"builtin.accuracy", "accuracy", accuracy_keys, builtin_accuracy_open},
    {"builtin.format", "format", format_keys, builtin_format_open},
    {"builtin.length", "length", length_keys, builtin_length_open},
};
#define N_BUILTINS (sizeof builtins / sizeof *builtins)

/* A misspelt option would otherwise be silently ignored and the default used. */
static int check_keys(const Builtin *b, const json_t *options) {
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)options, key, value) {
        (void)value;
        bool known = strcmp(key, "name") == 0;
        for (const char *const *k = b->keys; *k && !known; k++)
            known = strcmp(key, *k) == 0;
        if (known) continue;
        char list[256] = "name";
        for (const char *const *k = b->keys; *k; k++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, ", %s", *k);
        }
        return err_set("unknown option '%s' (options: %s)", key, list);
    }
    return 0;
}

int builtin_reward_open(RewardFunc *f, const char *name, const json_t *options) {
    *f = (RewardFunc){0};
    const Builtin *b = NULL;
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (strcmp(name, builtins[i].name) == 0) b = &builtins[i];
    if (!b) {
        char list[256] = "";
        for (size_t i = 0; i < N_BUILTINS; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", builtins[i].name);
        }
        return err_set("unknown built-in reward function '%s' (known: %s)", name, list);
    }
    json_t *empty = NULL;
    if (!options) options = empty = json_object();
    int rc = -1;
    const char *metrics_name = b->default_name;
    if (!json_is_object(options)) {
        err_set("options: expected an object");
    } else if (check_keys(b, options) == 0 &&
               json_get_string(options, "name", &metrics_name) >= 0) {
        if (!*metrics_name)
            err_set("option 'name': expected a non-empty string");
        else
            rc = b->open(f, metrics_name, options);
    }
    json_decref(empty);
    if (rc != 0) {
        *f = (RewardFunc){0};
        return err_prefix("%s", name);
    }
    f->name = xstrdup(metrics_name);
    return 0;
}

int builtin_completion_text(const RewardBatch *b, int i, const char **text, size_t *len) {
    const json_t *c = json_array_get(b->completions, (size_t)i);
    if (json_is_string(c)) {
        *text = json_string_value(c);
        *len = json_string_length(c);
        return 0;
    }
    if (json_is_array(c)) {
        for (size_t k = json_array_size(c); k-- > 0;) {
            const json_t *m = json_array_get(c, k);
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!role || strcmp(role, "assistant") != 0) continue;
            const json_t *content = json_object_get(m, "content");
            if (!json_is_string(content))
                return err_set("completion %d: the assistant message's content is not a string", i);
            *text = json_string_value(content);
            *len = json_string_length(content);
            return 0;
        }
        return err_set("completion %d: a message list without an assistant message", i);
    }
    return err_set("completion %d: expected a string or a list of messages", i);
}
