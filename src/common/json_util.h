/* Thin helpers over Jansson: loading with positioned error messages, and typed getters
 * that tell "absent" from "present but of the wrong type". */
#ifndef RLHF_COMMON_JSON_UTIL_H
#define RLHF_COMMON_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses a JSON file. Duplicate object keys are rejected; strings may hold U+0000 (their
 * length is json_string_length). A number jansson cannot hold -- an integer beyond int64
 * (tokenizer_config.json's "model_max_length": 1000000000000000019884624838656, a tool
 * argument 18446744073709551615) or a real beyond double (1e400) -- is kept as a "bignum":
 * a tagged string carrying the number's text as written (json_bignum_text), so that every
 * other number of the document stays what it was and the number can be rendered as Python
 * reads it (an exact int; inf). Returns 0, or -1 with an error "path:line:column: ...". */
int json_load_path(const char *path, json_t **out);

/* Same for text in memory; `source` names it in messages ("source:line:column: ...").
 * With source NULL (one line of a JSONL file, named by the caller) only the column is given. */
int json_load_text(const char *text, size_t len, const char *source, json_t **out);

/* The text of a bignum (see json_load_path) as the document wrote it ("-184467440737095516150",
 * "1e400"), or NULL when v is not one. A bignum is a JSON string to jansson; nothing else
 * makes such strings, as their first byte is not valid UTF-8. */
const char *json_bignum_text(const json_t *v);
/* A new bignum carrying `text` (a JSON number, e.g. str() of a Python int beyond int64). */
json_t *json_bignum(const char *text);
/* Whether a bignum's text is an integer (Python int) rather than a real (Python float). */
bool json_bignum_is_integer(const char *text);

/* Typed getters on an object member. Return 1 when found, 0 when absent or null, and
 * -1 (error "key 'k': expected ...") when present with another type. A real with an
 * integral value is accepted where an integer is expected; a bignum where a double is
 * (as the nearest double, or +-inf). */
int json_get_int64(const json_t *obj, const char *key, int64_t *out);
int json_get_double(const json_t *obj, const char *key, double *out);
int json_get_bool(const json_t *obj, const char *key, bool *out);
int json_get_string(const json_t *obj, const char *key, const char **out);

/* Reads a JSON value (not a member) as an integer; same rules as json_get_int64. */
int json_as_int64(const json_t *v, int64_t *out);

#endif
