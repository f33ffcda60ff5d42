/* The hard-coded chat families (chatml.*, llama3.*; axolotl-config.md §4.2, §4.6): Axolotl
 * writes their turns with fixed markup rather than a chat template. Each family file supplies
 * its markup and its catalogue; the row functions here are shared, reading the markup from
 * f->type->param.
 *
 * A system turn is written only when the row's `system` is truthy; values go in verbatim; the
 * prompt ends with the assistant's turn header and each response with the response end. */
#ifndef RLHF_DATA_PREF_TURNS_H
#define RLHF_DATA_PREF_TURNS_H

#include "data/pref_types.h"

typedef struct {
    const char *turn_start;   /* before the role name */
    const char *header_end;   /* between the role name and the content */
    const char *turn_end;     /* after a turn's content */
    const char *response_end; /* after a response */
} PrefTurnMarkup;

/* DPO (prompt / chosen / rejected). */
int pref_turns_dpo_default(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_dpo_argilla_chat(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_dpo_icr(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_dpo_intel(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_dpo_prompt_pairs(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_dpo_ultra(const PrefFormat *f, const json_t *row, PrefStrings *out);

/* KTO (prompt / completion; the row's own `label`). */
int pref_turns_kto_argilla(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_kto_argilla_chat(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_kto_intel(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_kto_prompt_pairs(const PrefFormat *f, const json_t *row, PrefStrings *out);
int pref_turns_kto_ultra(const PrefFormat *f, const json_t *row, PrefStrings *out);

/* The catalogue entries both families share, for their markup (prefix "chatml." or "llama3."). */
#define PREF_TURNS_TYPE(type_name, loader, fn, markup)                                             \
    { .name = type_name, .loaders = loader, .row = fn, .param = &markup }
#define PREF_TURNS_TYPES(prefix, markup)                                                           \
    PREF_TURNS_TYPE(prefix "default", PREF_LOADER_DPO, pref_turns_dpo_default, markup),            \
        {.name = prefix "argilla",                                                                 \
         .loaders = PREF_LOADER_DPO,                                                               \
         .row = pref_turns_dpo_default,                                                            \
         .param = &markup,                                                                         \
         .deprecated_for = prefix "default"},                                                      \
        PREF_TURNS_TYPE(prefix "argilla_chat", PREF_LOADER_DPO, pref_turns_dpo_argilla_chat,       \
                        markup),                                                                   \
        PREF_TURNS_TYPE(prefix "icr", PREF_LOADER_DPO, pref_turns_dpo_icr, markup),                \
        PREF_TURNS_TYPE(prefix "intel", PREF_LOADER_DPO, pref_turns_dpo_intel, markup),            \
        PREF_TURNS_TYPE(prefix "prompt_pairs", PREF_LOADER_DPO, pref_turns_dpo_prompt_pairs,       \
                        markup),                                                                   \
        PREF_TURNS_TYPE(prefix "ultra", PREF_LOADER_DPO, pref_turns_dpo_ultra, markup),            \
        PREF_TURNS_TYPE(prefix "argilla", PREF_LOADER_KTO, pref_turns_kto_argilla, markup),        \
        PREF_TURNS_TYPE(prefix "argilla_chat", PREF_LOADER_KTO, pref_turns_kto_argilla_chat,       \
                        markup),                                                                   \
        PREF_TURNS_TYPE(prefix "intel", PREF_LOADER_KTO, pref_turns_kto_intel, markup),            \
        PREF_TURNS_TYPE(prefix "prompt_pairs", PREF_LOADER_KTO, pref_turns_kto_prompt_pairs,       \
                        markup),                                                                   \
        PREF_TURNS_TYPE(prefix "ultra", PREF_LOADER_KTO, pref_turns_kto_ultra, markup)

#endif
