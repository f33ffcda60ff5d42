/* Preference dataset types: Axolotl's prompt strategies for rl dpo/ipo/simpo, kto and orpo
 * (axolotl-config.md §4), turning one dataset row into the strings a preference trainer takes.
 *
 * A type name resolves as Axolotl resolves it (§4.1): a mapping under `type:` means
 * user_defined.default, a name without a dot gets ".default", and the rest is looked up in the
 * catalogue of the loader that `rl` selects (dpo for dpo/ipo/simpo, kto, orpo). The families
 * live one per file: pref_chatml.c, pref_llama3.c (hard-coded turn markup, pref_turns.c),
 * pref_zephyr.c, pref_chat_template.c (a Jinja chat template), pref_user_defined.c.
 *
 * Field values are inserted as Python's str() writes them (strings verbatim); a field that is
 * absent or null is an error naming it. (Upstream reads a column that exists in the file even
 * when this row's value is null, and prints "None"; rlhf.c looks at the row itself.) */
#ifndef RLHF_DATA_PREF_FORMAT_H
#define RLHF_DATA_PREF_FORMAT_H

#include "config/train_config.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* One formatted row. dpo/ipo/simpo/orpo: prompt, chosen, rejected. kto: prompt, completion,
 * label; or, for a typeless row that carries chosen and rejected, prompt, chosen, rejected with
 * `paired` set (TRL unpairs it: chosen desirable, rejected undesirable). */
typedef struct {
    char *prompt, *chosen, *rejected, *completion;
    bool label;
    bool paired;
} PrefStrings;

void pref_strings_free(PrefStrings *s);

typedef struct PrefFormat PrefFormat;

/* Resolves datasets[index].type for cfg->rl and reads the options it needs (field names,
 * formats, the chat template). Notes for the user (deprecated names, keys Axolotl would drop)
 * go to `log`. Returns 0, or -1 with an error "FILE:LINE: datasets[i].type: ..." that, for an
 * unknown type, lists the types rl supports. */
int pref_format_open(PrefFormat **out, const TrainConfig *cfg, int index, FILE *log);
void pref_format_close(PrefFormat *f);

/* Formats one row into *out (cleared first; the caller frees it with pref_strings_free).
 * Returns 0, or -1 with an error naming the field that is missing or malformed. */
int pref_format_row(const PrefFormat *f, const json_t *row, PrefStrings *out);

/* The types that rl accepts, ", "-separated (a static string). */
const char *pref_format_type_names(RlMethod rl);

#endif
