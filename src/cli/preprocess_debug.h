/* `rlhf preprocess --debug`: prints tokenised examples as Axolotl's check_dataset_labels does, so
 * a user sees exactly which tokens each method trains on.
 *  - SFT: every token as `text(label, id)`, label being the id when the token is trained on and
 *    -100 when it is masked; red = masked, green = trained; then "Total input len" and "Count of
 *    labels".
 *  - Preference pairs: "INPUT PROMPT", "CHOSEN RESPONSE", "REJECTED RESPONSE" (and "REJECTED
 *    PROMPT" when ORPO/SimPO tokenised the rejected row's prompt apart), each token `text(id)`:
 *    yellow prompt (never trained), green chosen, red rejected.
 *  - KTO rows: "INPUT PROMPT", "COMPLETION RESPONSE" and the row's label.
 *  - GRPO prompts: "INPUT PROMPT" and the row's other columns (what the reward functions get).
 * Unlike Axolotl, which re-encodes the text of an RL example to show it, the ids printed are the
 * ones training uses. text_only prints the token texts alone. Colours only when `color`. */
#ifndef RLHF_CLI_PREPROCESS_DEBUG_H
#define RLHF_CLI_PREPROCESS_DEBUG_H

#include "data/grpo_dataset.h"
#include "data/pref_dataset.h"
#include "data/sft_dataset.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    FILE *out;
    const Tokenizer *tok;
    size_t n_examples; /* the first n of the dataset, in file order */
    bool text_only;
    bool color; /* ANSI colours (a terminal without NO_COLOR) */
} DebugPrinter;

/* Each prints the first p->n_examples examples of its dataset (fewer when it has fewer). */
void debug_print_sft(const DebugPrinter *p, const SftDataset *ds);
void debug_print_pref(const DebugPrinter *p, const PrefDataset *ds);
void debug_print_grpo(const DebugPrinter *p, const GrpoDataset *ds);

#endif
