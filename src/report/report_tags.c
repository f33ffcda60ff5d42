#include "report/report_tags.h"

#include <stdio.h>
#include <string.h>

void report_tag(const char *key, char *buf, size_t cap) {
    if (strncmp(key, "eval_", 5) == 0)
        snprintf(buf, cap, "eval/%s", key + 5);
    else if (strncmp(key, "test_", 5) == 0)
        snprintf(buf, cap, "test/%s", key + 5);
    else
        snprintf(buf, cap, "train/%s", key);
}

bool report_is_scalar(const char *key, const json_t *value) {
    return json_is_number(value) && strcmp(key, "step") != 0;
}
