/* Thin helpers over Jansson: loading with positioned error messages, and typed getters
 * that tell "absent" from "present but of the wrong type". */
#ifndef RLHF_COMMON_JSON_UTIL_H
#define RLHF_COMMON_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses a JSON file. Duplicate object keys are rejected. Integers too large for int64
 * (tokenizer_config.json's "model_max_length": 1e30-ish) are read as reals instead.
 * Returns 0, or -1 with an error "path:line:column: what is wrong". */
int json_load_path(const char *path, json_t **out);

/* Same for text in memory; `source` names it in messages ("source:line:column: ...").
 * With source NULL (one line of a JSONL file, named by the caller) only the column is given. */
int json_load_text(const char *text, size_t len, const char *source, json_t **out);

/* Typed getters on an object member. Return 1 when found, 0 when absent or null, and
 * -1 (error "key 'k': expected ...") when present with another type. A real with an
 * integral value is accepted where an integer is expected. */
int json_get_int64(const json_t *obj, const char *key, int64_t *out);
int json_get_double(const json_t *obj, const char *key, double *out);
int json_get_bool(const json_t *obj, const char *key, bool *out);
int json_get_string(const json_t *obj, const char *key, const char **out);

/* Reads a JSON value (not a member) as an integer; same rules as json_get_int64. */
int json_as_int64(const json_t *v, int64_t *out);

#endif
