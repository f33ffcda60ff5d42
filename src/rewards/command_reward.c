#include "rewards/command_reward.h"

#include "common/error.h"
#include "rewards/line_child.h"
#include "rewards/reward_batch_json.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* How long close() lets the command finish after end of input before killing it. */
#define CLOSE_GRACE_S 1.0

typedef struct {
    char *name, *command;
    double timeout_s;
    LineChild *child;
    char *failure; /* the first failure's message; NULL while healthy */
} CommandReward;

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* Reads the answer line into out[0..n). Returns 0, or -1 with an error. */
static int parse_answer(const char *line, size_t len, int n, double *out) {
    json_error_t jerr;
    json_t *arr = json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!arr) {
        /* Python's json.dumps writes NaN and Infinity, which are not JSON. */
        bool nan_hint = strstr(line, "NaN") || strstr(line, "Infinity");
        char excerpt[200];
        return err_set("the command answered with invalid JSON (%s, column %d): '%s'%s", jerr.text,
                       jerr.column, line_child_excerpt(line, len, 80, excerpt),
                       nan_hint ? " (NaN and Infinity are not JSON: write null for no score)"
                                : " (stdout is for answer lines only; print diagnostics to "
                                  "stderr)");
    }
    int rc = 0;
    char excerpt[200];
    if (!json_is_array(arr)) {
        rc = err_set("the command answered with %s, not an array of scores: '%s'",
                     json_type_name(arr), line_child_excerpt(line, len, 80, excerpt));
    } else if (json_array_size(arr) != (size_t)n) {
        rc = err_set("the command answered with %zu scores for %d completions",
                     json_array_size(arr), n);
    } else {
        for (int i = 0; i < n && rc == 0; i++) {
            const json_t *v = json_array_get(arr, (size_t)i);
            if (json_is_number(v))
                out[i] = json_number_value(v);
            else if (json_is_null(v))
                out[i] = NAN;
            else
                rc = err_set("score %d is %s, not a number or null", i, json_type_name(v));
        }
    }
    json_decref(arr);
    return rc;
}

/* The request line for a batch: compact JSON escapes every newline inside strings, so it is
 * exactly one line. Returns a malloc'd string, or NULL with an error. */
static char *request_line(const RewardBatch *b, size_t *len) {
    json_t *req = reward_batch_to_json(b);
    if (!req) return NULL;
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!text) {
        err_set("could not encode the batch as JSON");
        return NULL;
    }
    *len = strlen(text);
    text = xrealloc(text, *len + 2);
    text[(*len)++] = '\n';
    text[*len] = '\0';
    return text;
}

static int command_score(void *impl, const RewardBatch *b, double *out) {
    CommandReward *c = impl;
    char cmd[128];
    line_child_excerpt(c->command, strlen(c->command), 60, cmd);
    if (c->failure)
        return err_set("reward function '%s' (command '%s') failed on an earlier batch and is "
                       "not restarted: %s",
                       c->name, cmd, c->failure);
    if (b->n == 0) return 0;
    /* A batch that cannot be encoded is the caller's mistake, not the command's: no failure. */
    size_t len;
    char *text = request_line(b, &len);
    if (!text) return err_prefix("reward function '%s'", c->name);
    const char *line;
    size_t line_len;
    int rc = line_child_exchange(c->child, text, len, c->timeout_s, &line, &line_len);
    free(text);
    if (rc == 0) rc = parse_answer(line, line_len, b->n, out);
    if (rc == 0) return 0;
    /* A half-finished or garbled exchange leaves the command out of step with us: it is killed
     * (the exchange already did so for its own failures) and the function stays failed. */
    line_child_kill(c->child);
    c->failure = xstrdup(err_msg());
    return err_prefix("reward function '%s' (command '%s')", c->name, cmd);
}

static void command_close(void *impl) {
    CommandReward *c = impl;
    line_child_close(c->child, CLOSE_GRACE_S);
    free(c->name);
    free(c->command);
    free(c->failure);
    free(c);
}

int command_reward_open(RewardFunc *f, const char *name, const char *command, double timeout_s) {
    *f = (RewardFunc){0};
    if (!name || !*name) return err_set("command reward: empty name");
    if (!command || !*command) return err_set("reward function '%s': empty command", name);
    if (isnan(timeout_s)) return err_set("reward function '%s': timeout is NaN", name);
    LineChild *child;
    if (line_child_spawn(command, &child) != 0) {
        char cmd[128];
        return err_prefix("reward function '%s' (command '%s')", name,
                          line_child_excerpt(command, strlen(command), 60, cmd));
    }
    CommandReward *c = xcalloc(1, sizeof *c);
    c->name = xstrdup(name);
    c->command = xstrdup(command);
    c->timeout_s = timeout_s;
    c->child = child;
    f->name = xstrdup(name);
    f->impl = c;
    f->score = command_score;
    f->close = command_close;
    return 0;
}
