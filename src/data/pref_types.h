/* Internal to the preference dataset types: the catalogue entry every family file provides, and
 * the row helpers they share (pref_format.c). */
#ifndef RLHF_DATA_PREF_TYPES_H
#define RLHF_DATA_PREF_TYPES_H

#include "data/pref_format.h"

#include <stddef.h>

/* Which Axolotl loader a type belongs to: `rl` picks the loader (dpo for dpo/ipo/simpo). */
typedef enum { PREF_LOADER_DPO = 1, PREF_LOADER_KTO = 2, PREF_LOADER_ORPO = 4 } PrefLoader;

typedef struct {
    const TrainConfig *cfg;
    const DatasetConfig *dc;
    int index; /* datasets[index] */
    FILE *log;
} PrefOpenContext;

typedef int (*PrefRowFn)(const PrefFormat *f, const json_t *row, PrefStrings *out);

typedef struct {
    const char *name; /* family.function, as written under `type:` */
    unsigned loaders; /* PrefLoader bits */
    PrefRowFn row;
    const void *param; /* fixed data row() reads through f->type->param (e.g. turn markup) */
    /* Reads the dataset's options into f->state (and sets f->free_state); NULL: nothing to
     * read. Returns 0, or -1 with an error (without the FILE:LINE: datasets[i] prefix). */
    int (*open)(PrefFormat *f, const PrefOpenContext *ctx);
    const char *deprecated_for; /* an old name kept as an alias of this type: warn */
} PrefType;

struct PrefFormat {
    const PrefType *type;
    void *state;
    void (*free_state)(void *state);
};

/* Each family's types, ended by an entry with name NULL. */
extern const PrefType pref_chatml_types[];
extern const PrefType pref_llama3_types[];
extern const PrefType pref_zephyr_types[];
extern const PrefType pref_chat_template_types[];
extern const PrefType pref_user_defined_types[];

/* ------------------------------------------------------------------ row helpers (pref_format.c)
 * Each returns NULL (or -1) with an error naming the field: `missing field "x"`, ... */

/* row[key] as Python's str() writes it (a string as it is), malloc'd; absent or null: error. */
char *pref_field_text(const json_t *row, const char *key);
/* Python truthiness of row[key]; an absent key is false. */
bool pref_field_truthy(const json_t *row, const char *key);
/* row[key] if present and not null, else NULL (no error). */
const json_t *pref_field_value(const json_t *row, const char *key);
/* row[key][index] (a negative index counts from the end, as in Python) as a message object. */
const json_t *pref_field_message(const json_t *row, const char *key, long index);
/* str() of row[key][index][prop]. */
char *pref_message_text(const json_t *row, const char *key, long index, const char *prop);
/* The KTO label row[key]: true (desirable) or false. */
int pref_field_label(const json_t *row, const char *key, bool *label);
/* Python str() of a JSON value (null: "None"), malloc'd. */
char *pref_py_str(const json_t *v);
/* The concatenation of the NULL-terminated list of strings, malloc'd. */
char *pref_concat(const char *first, ...);

#endif
