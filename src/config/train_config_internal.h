/* What the files of the training configuration share, private to src/config: the key table
 * (train_config_keys.c), the dataset entries (train_config_datasets.c), the checks
 * (train_config_validate.c) and the loading (train_config.c). Nothing outside src/config includes
 * this; the public interface is config/train_config.h. */
#ifndef RLHF_CONFIG_TRAIN_CONFIG_INTERNAL_H
#define RLHF_CONFIG_TRAIN_CONFIG_INTERNAL_H

#include "common/error.h"
#include "config/key_status.h"
#include "config/train_config.h"
#include "config/yaml_doc.h"

#include <stdbool.h>
#include <stddef.h>

/* How a key's value is read and where it is stored. */
typedef enum {
    K_STRING,
    K_INT,
    K_FLOAT, /* a number, or a numeric string ("2e-5", as PyYAML leaves it) */
    K_BOOL,
    K_OPT_BOOL,     /* true/false into an int that stays -1 when the key is absent or null */
    K_BF16,         /* true/false/"auto"/"full": the CPU computes in fp32 either way */
    K_PATH_OR_BOOL, /* resume_from_checkpoint: true (latest), false, or a path */
    K_RL,
    K_DATASETS,
    K_STRING_LIST, /* one string or a list of them (on the command line: comma-separated) */
    K_TRL,         /* the trl: mapping, kept as JSON */
} KeyKind;

typedef struct {
    const char *name;
    KeyKind kind;
    size_t offset;
} KeySpec;

/* ---- the key table (train_config_keys.c) ---- */

/* The key called `name`, or NULL when rlhf.c reads no such key. The table is static. */
const KeySpec *train_config_find_key(const char *name);

/* The i-th key rlhf.c reads (0 <= i), or NULL past the last. */
const KeySpec *train_config_key_spec(size_t i);

/* Sets the field of `spec` from a scalar's text (a YAML scalar or a command-line value);
 * `quoted`: the YAML scalar was quoted, so it is a string, never a number or a boolean. A
 * previous value is freed. Returns 0, or -1 with an error "key 'k': ..." (no file or line). */
int train_config_set_key(TrainConfig *cfg, const KeySpec *spec, const char *text, bool quoted);

/* Sets a K_STRING_LIST field from a YAML sequence node v (the key's line is `line`), freeing
 * the previous list. Returns 0, or -1 with an error "path:line: ...". */
int train_config_set_key_list(TrainConfig *cfg, const KeySpec *spec, YamlDoc *d, yaml_node_t *v,
                              int line);

/* A scalar or a list of scalars into a new array of *count owned strings (the previous *out is
 * freed first: a key given twice keeps its last value, as PyYAML does). `what` and `kind` name
 * the key and what each item should be, for messages. Returns 0, or -1 with an error
 * "what: expected kind ..." (without the file; *out then holds the *count items read). */
int train_config_read_string_list(YamlDoc *d, yaml_node_t *n, const char *what, const char *kind,
                                  char ***out, int *count);

/* Frees the *n strings of *list and the array; leaves NULL and 0. */
void train_config_free_string_list(char ***list, int *n);

/* ---- the dataset entries (train_config_datasets.c) ---- */

/* `datasets` or `test_datasets` (list): the YAML sequence v of dataset mappings, replacing
 * the entries read before (a key given twice keeps its last value). Keys of an entry that no
 * prompt strategy reads get a warning. Returns 0, or -1 with an error "path:line: ...". */
int train_config_read_datasets(TrainConfig *cfg, YamlDoc *d, yaml_node_t *v, const char *list);

/* Sets `key` of one entry from a command-line value (path, ds_type, split, type into their
 * fields; data_files from names separated by commas; every key into the entry's options as
 * YAML reads a plain scalar). Returns 0, or -1 with an error. */
int train_config_set_dataset_key(DatasetConfig *ds, const char *key, const char *text);

/* The checks and defaults of every entry once the file and the command line are read (path
 * present, ds_type json, split train). Returns 0, or -1 with an error "file:line: datasets[i]..".
 */
int train_config_finish_datasets(TrainConfig *cfg);

/* Frees n entries and the array (NULL with n = 0 is fine). */
void train_config_free_datasets(DatasetConfig *list, int n);

/* ---- the checks (train_config_validate.c) ---- */

/* Checks the keys read against each other and fills the defaults that depend on others (the
 * method's beta, the LoRA target modules, the GRPO block, the optimizer, the output
 * directory). Returns 0, or -1 with an error naming the key. */
int train_config_validate(TrainConfig *cfg);

/* ---- the command line (train_config_overrides.c) ---- */

/* Applies n (key, value) overrides (train_config_overrides.c's header says which keys), into
 * the typed fields and cfg->raw. Returns 0, or -1 with an error "command line --key: ...". */
int train_config_apply_overrides(TrainConfig *cfg, const char *const *overrides, int n);

/* ---- the loading (train_config.c) ---- */

/* What the status table (config/key_status.h) makes of a key that is not read into a
 * TrainConfig field: an unknown key warns with the nearest key of its scope (an error when
 * `cli`), a no-op key with a value other than its neutral ones warns, a refused one errs.
 * `label` prefixes the name in messages ("trl.", "datasets[0].";
 * on the command line "datasets.0."), `where` locates it
 * ("file:line", "command line --k"), `doc` is the mapping it sits in (for "=key" neutrals; may
 * be NULL). Returns 0, or -1 with an error. */
int train_config_check_key(TrainConfig *cfg, KeyScope scope, const char *label, const char *name,
                           const json_t *value, const json_t *doc, const char *where, bool cli);

/* Appends a warning (formatted as printf, at most 1023 bytes) to cfg->warnings. */
void train_config_warn(TrainConfig *cfg, const char *fmt, ...) RLHF_PRINTF(2, 3);

#endif
