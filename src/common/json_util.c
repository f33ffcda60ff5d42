#include "common/json_util.h"

#include "common/error.h"
#include "common/fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int json_load_text(const char *text, size_t len, const char *source, json_t **out) {
    json_error_t jerr;
    size_t flags = JSON_REJECT_DUPLICATES;
    *out = json_loadb(text, len, flags, &jerr);
    if (*out) return 0;
    if (strstr(jerr.text, "too big")) {
        *out = json_loadb(text, len, flags | JSON_DECODE_INT_AS_REAL, &jerr);
        if (*out) return 0;
    }
    if (!source) return err_set("invalid JSON (column %d): %s", jerr.column, jerr.text);
    return err_set("%s:%d:%d: invalid JSON: %s", source, jerr.line, jerr.column, jerr.text);
}

int json_load_path(const char *path, json_t **out) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    int rc = json_load_text(text, len, path, out);
    free(text);
    return rc;
}

int json_as_int64(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.2e18) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return -1;
}

static const json_t *member(const json_t *obj, const char *key) {
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return (v && !json_is_null(v)) ? v : NULL;
}

int json_get_int64(const json_t *obj, const char *key, int64_t *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (json_as_int64(v, out) != 0) return err_set("key '%s': expected an integer", key);
    return 1;
}

int json_get_double(const json_t *obj, const char *key, double *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return err_set("key '%s': expected a number", key);
    *out = json_number_value(v);
    return 1;
}

int json_get_bool(const json_t *obj, const char *key, bool *out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return err_set("key '%s': expected true or false", key);
    *out = json_is_true(v);
    return 1;
}

int json_get_string(const json_t *obj, const char *key, const char **out) {
    const json_t *v = member(obj, key);
    if (!v) return 0;
    if (!json_is_string(v)) return err_set("key '%s': expected a string", key);
    *out = json_string_value(v);
    return 1;
}
