/* builtin.accuracy: the completion's final answer against the dataset's reference answer. */
#include "common/error.h"
#include "common/json_util.h"
#include "rewards/answer_extract.h"
#include "rewards/builtin_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    char *column;
    AnswerExtract extract;
} Accuracy;

static void accuracy_close(void *impl) {
    Accuracy *a = impl;
    free(a->name);
    free(a->column);
    free(a);
}

/* "question, answer" - the columns the batch does have, for the missing-column message. */
static void column_list(const json_t *columns, char *buf, size_t size) {
    buf[0] = '\0';
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)columns, key, value) {
        (void)value;
        size_t used = strlen(buf);
        if (used + 1 >= size) break;
        snprintf(buf + used, size - used, "%s%s", used ? ", " : "", key);
    }
    if (!buf[0]) snprintf(buf, size, "none");
}

/* Scores row i; *out stays untouched (the caller's NaN) when the reference is null. */
static int score_row(const Accuracy *a, const RewardBatch *b, const json_t *refs, int i,
                     double *out) {
    const json_t *ref = json_array_get(refs, (size_t)i);
    char number[64];
    AnswerSpan want;
    if (json_is_null(ref)) {
        return 0;
    } else if (json_is_string(ref)) {
        want = answer_reference(json_string_value(ref), json_string_length(ref));
    } else if (json_is_integer(ref)) {
        snprintf(number, sizeof number, "%" JSON_INTEGER_FORMAT, json_integer_value(ref));
        want = (AnswerSpan){number, strlen(number)};
    } else if (json_is_real(ref)) {
        snprintf(number, sizeof number, "%.17g", json_real_value(ref));
        want = (AnswerSpan){number, strlen(number)};
    } else {
        return err_set("column '%s' row %d: expected a string, a number or null", a->column, i);
    }
    const char *text;
    size_t len;
    if (builtin_completion_text(b, i, &text, &len) != 0) return -1;
    AnswerSpan got;
    *out = answer_extract(text, len, a->extract, &got) && answer_equal(got, want) ? 1.0 : 0.0;
    return 0;
}

static int accuracy_score(void *impl, const RewardBatch *b, double *out) {
    const Accuracy *a = impl;
    const json_t *refs = json_object_get(b->columns, a->column);
    if (!json_is_array(refs)) {
        char have[512];
        column_list(b->columns, have, sizeof have);
        err_set("the batch has no column '%s' (its columns: %s); set the option 'column'",
                a->column, have);
        return err_prefix("reward function '%s'", a->name);
    }
    if (json_array_size(refs) != (size_t)b->n) {
        err_set("column '%s' has %zu values for %d completions", a->column, json_array_size(refs),
                b->n);
        return err_prefix("reward function '%s'", a->name);
    }
    for (int i = 0; i < b->n; i++) {
        out[i] = NAN;
        if (score_row(a, b, refs, i, &out[i]) != 0)
            return err_prefix("reward function '%s'", a->name);
    }
    return 0;
}

int builtin_accuracy_open(RewardFunc *f, const char *name, const json_t *options) {
    const char *column = "answer", *extract = "auto";
    if (json_get_string(options, "column", &column) < 0) return -1;
    if (json_get_string(options, "extract", &extract) < 0) return -1;
    if (!*column) return err_set("option 'column': expected a non-empty string");
    AnswerExtract mode;
    if (answer_extract_parse(extract, &mode) != 0)
        return err_set("option 'extract': '%s' is not one of auto, boxed, hash, last_number, none",
                       extract);
    Accuracy *a = xcalloc(1, sizeof *a);
    a->name = xstrdup(name);
    a->column = xstrdup(column);
    a->extract = mode;
    f->impl = a;
    f->score = accuracy_score;
    f->close = accuracy_close;
    return 0;
}
