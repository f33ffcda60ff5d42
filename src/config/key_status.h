/* What rlhf.c does with every configuration key Axolotl documents (its pydantic schema, listed
 * in tests/fixtures/config_keys/axolotl_keys.txt), plus the TRL and rlhf.c keys it reads: one
 * table per scope (top level, trl:, vllm:, the entries of datasets:/test_datasets: and the
 * user-defined formats under their type:), each row
 * a status and the reason for it.
 *
 *   used     rlhf.c reads the key and acts on it (trl: keys may be read by some methods only).
 *   no-op    accepted; it has no effect here, for the reason given. A value other than the
 *            row's neutral ones (those that match what rlhf.c does anyway) gets a warning.
 *   refused  it would change what is trained or how much memory it takes, and rlhf.c does not
 *            implement it: a value other than the neutral ones is an error.
 *
 * Invariants (checked by test_config_keys):
 *  1. Every key of axolotl_keys.txt has a row in its scope.
 *  2. The top-level `used` rows are exactly the keys of train_config_keys.c's KeySpec table.
 *  3. A key absent from a scope's table gets "did you mean" only from that scope's rows, and
 *     only within a distance that grows with the key's length (key_status_nearest). */
#ifndef RLHF_CONFIG_KEY_STATUS_H
#define RLHF_CONFIG_KEY_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    KEY_SCOPE_TOP,
    KEY_SCOPE_TRL,
    KEY_SCOPE_VLLM,
    KEY_SCOPE_DATASET,      /* an entry of datasets: or test_datasets: */
    KEY_SCOPE_DATASET_TYPE, /* the mapping under an entry's type: (user-defined formats) */
    KEY_SCOPE_COUNT
} KeyScope;

typedef enum { KEY_USED, KEY_NOOP, KEY_REFUSED } KeyStatus;

typedef struct {
    const char *name;
    KeyStatus status;
    /* The values that match what rlhf.c does, as JSON texts separated by '|' ("false",
     * "true|false", "\"auto\""); "*" is every value; "=key" the value of another key of the
     * same mapping; null (a key left empty) always is. A
     * no-op key with another value warns, a refused key errs. NULL for used keys. */
    const char *neutral;
    const char *reason; /* why (no-op, refused), or what reads it (used); never NULL */
    /* trl: keys read by some methods only: a mask of (1u << RlMethod); 0: every method */
    unsigned methods;
} KeyStatusRow;

/* "" for the top level, "trl.", "vllm.", "datasets[].", "datasets[].type." (a static
 * string). */
const char *key_scope_prefix(KeyScope scope);

/* The row of `name` in `scope`, or NULL when the scope has no such key. */
const KeyStatusRow *key_status_find(KeyScope scope, const char *name);

/* The rows of `scope` (static), their count in *n. */
const KeyStatusRow *key_status_rows(KeyScope scope, size_t *n);

/* The key of `scope` nearest to `name` (an edit distance counting a transposition as one
 * edit), or NULL when none is within max(1, strlen(name) / 4) edits (2 for names of 6 or more
 * characters), so that a real key of another scope or program never gets an absurd suggestion.
 * The result is a static string. */
const char *key_status_nearest(KeyScope scope, const char *name);

/* Whether `value` is one of the row's neutral values (always true for null or NULL). A neutral
 * of the form "=other_key" is the value of other_key in `doc` (the mapping the key sits in; may
 * be NULL). */
bool key_status_is_neutral(const KeyStatusRow *row, const json_t *value, const json_t *doc);

/* Prints the whole table as Markdown (scope, key, status, neutral values, reason). */
void key_status_print_markdown(FILE *out);

#endif
