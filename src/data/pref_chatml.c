/* chatml.* preference types: ChatML turns written by hand (axolotl-config.md §4.2, §4.6). */
#include "data/pref_turns.h"

static const PrefTurnMarkup chatml_markup = {"<|im_start|>", "\n", "<|im_end|>\n", "<|im_end|>"};

const PrefType pref_chatml_types[] = {PREF_TURNS_TYPES("chatml.", chatml_markup), {.name = NULL}};
