/* What the files of the training configuration share, private to src/config: the key table
 * (train_config_keys.c), the dataset entries (train_config_datasets.c), the checks
 * (train_config_validate.c) and the loading (train_config.c). Nothing outside src/config includes
 * this; the public interface is config/train_config.h. */
#ifndef RLHF_CONFIG_TRAIN_CONFIG_INTERNAL_H
#define RLHF_CONFIG_TRAIN_CONFIG_INTERNAL_H

#include "common/error.h"
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

/* Whether `name` is a key Axolotl documents that rlhf.c does not act on yet (it gets a
 * warning, not silence). */
bool train_config_key_is_documented(const char *name);

/* The known key (read or documented) nearest to `name` by edit distance, for "did you mean"
 * messages; never NULL (a static string). */
const char *train_config_nearest_key(const char *name);

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

/* Frees n entries and the array (NULL with n = 0 is fine). */
void train_config_free_datasets(DatasetConfig *list, int n);

/* ---- the checks (train_config_validate.c) ---- */

/* Checks the keys read against each other and fills the defaults that depend on others (the
 * method's beta, the LoRA target modules, the GRPO block, the optimizer, the output
 * directory). Returns 0, or -1 with an error naming the key. */
int train_config_validate(TrainConfig *cfg);

/* ---- the loading (train_config.c) ---- */

/* Appends a warning (formatted as printf, at most 1023 bytes) to cfg->warnings. */
void train_config_warn(TrainConfig *cfg, const char *fmt, ...) RLHF_PRINTF(2, 3);

#endif
