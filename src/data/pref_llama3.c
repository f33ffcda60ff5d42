/* llama3.* preference types: Llama-3 turns written by hand (axolotl-config.md §4.2, §4.6). Like
 * Axolotl's, they never write <|begin_of_text|>: the tokenizer adds BOS. */
#include "data/pref_turns.h"

static const PrefTurnMarkup llama3_markup = {"<|start_header_id|>", "<|end_header_id|>\n\n",
                                             "<|eot_id|>", "<|eot_id|>"};

const PrefType pref_llama3_types[] = {PREF_TURNS_TYPES("llama3.", llama3_markup), {.name = NULL}};
